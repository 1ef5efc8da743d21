import sys

from sweep.commands.cli import main

sys.exit(main())
