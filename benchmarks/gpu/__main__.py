from benchmarks.gpu.check import main

main()
