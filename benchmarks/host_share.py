"""The host's share of a training step, on this CPU: the shared loop at an older commit against this checkout's.

    python -m benchmarks.host_share [--before 2b1617a] [--repeats 3] [--steps 20]

A 1-layer, 32-wide BERT with the bundled uncased tokenizer: its step is little arithmetic, so what is timed is
the loop's own work around it (tokenising and padding the batch, the views' random draws, reading the loss,
the optimiser's launches), which a GPU cannot hide. Each side is :mod:`benchmarks.gpu`'s steps part in a
child process, the older one importing the ``trainers/`` of ``--before`` (``git archive``); the repeats
interleave the two sides and each figure is the fastest of its side's. The section goes to
benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time

from benchmarks.gpu.common import ROOT
from benchmarks.gpu.legacy import steps_in_child
from benchmarks.results_file import write_section

METHODS = ("simcse", "sg", "consert", "sct")
SHAPE = "1,32"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_share", description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="2b1617a", help="The older commit whose trainers/ run the other side.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    extra = ["--tiny", "--tiny-shape", SHAPE, "--steps", str(args.steps), "--precisions", "fp32",
             "--methods", *METHODS]
    best: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "archive", args.before, "trainers"], check=True, capture_output=True,
                                 cwd=ROOT).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        for _ in range(args.repeats):
            for side, trainers in ((args.before, folder), ("now", None)):
                for row in steps_in_child(extra, trainers)["steps"]:
                    key = (side, row["method"])
                    best[key] = min(best.get(key, float("inf")), row["ms"])
    rows = [f"| {method} | {best[(args.before, method)]:.1f} | {best[('now', method)]:.1f} | "
            f"{best[(args.before, method)] - best[('now', method)]:.1f} | "
            f"{best[(args.before, method)] / best[('now', method)]:.2f}x |" for method in METHODS]
    body = "\n".join([
        f"Command: `python -m benchmarks.host_share --before {args.before} --repeats {args.repeats} --steps "
        f"{args.steps}` ({time.strftime('%Y-%m-%d')}; a 1-layer, 32-wide random BERT with the bundled tokenizer, "
        "each method's defaults in fp32, ms per step through `trainers.training.loop.train`, fastest of the "
        "interleaved "
        "repeats).",
        "",
        f"| method | loop at {args.before} (ms) | now (ms) | host time cut (ms) | speed-up |",
        "| --- | ---: | ---: | ---: | ---: |",
        *rows,
    ])
    write_section("The host's share of a step (host_share)", body)
    print(body)


if __name__ == "__main__":
    main()
