"""What the ``python -m reports.*`` commands share: their refusals and their input.

A refused command (no results file, no MLflow store, a sweep or table that is
not there) prints one line on stderr and exits 2, as ``python -m sweep`` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from results.names import UsageError
from results.schema import DEFAULT_RESULTS, from_stored

REFUSED = 2


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                body: Callable[[argparse.Namespace], int]) -> int:
    """``body`` of the parsed arguments; a refusal (:class:`UsageError`, or a :class:`KeyError` naming what is
    not there) becomes its one line on stderr and exit code 2."""
    args = parser.parse_args(argv)
    try:
        return body(args)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
    except UsageError as error:
        print(error, file=sys.stderr)
    return REFUSED


def results_parser(prog: str, doc: str, tables: str, sweep: str) -> argparse.ArgumentParser:
    """The parser of a command that reads collected results: ``--results``, then ``--table NAME ...``
    (paper tables) or ``--sweep NAME`` (any collected sweep)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="Parquet file written by reports.collect.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--table", action="append", dest="tables", help=tables)
    which.add_argument("--sweep", help=sweep)
    return parser


def read_results(path: str | Path) -> pd.DataFrame:
    """The collected results, or a refusal that says how to collect them."""
    if not Path(path).is_file():
        raise UsageError(f"{path}: no results file; run `python -m reports.collect` first")
    frame = pd.read_parquet(path)
    if "grid_point" not in frame:
        raise UsageError(f"{path}: collected by an older version (no grid_point column); run `python -m "
                         "reports.collect` again")
    return from_stored(frame)
