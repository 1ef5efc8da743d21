"""The papers' tables, and any sweep's table, from collected results.

    python -m reports.tables [--results results.parquet] [--format markdown|latex|csv] [--out DIR]
                             [--table NAME ... | --sweep NAME]

Each paper table comes from a declarative spec in ``reports/table_specs.yaml``
(:mod:`reports.table_specs`) and the papers' numbers from
``reports/paper_numbers.yaml``; :mod:`reports.paper_tables` builds them. With
no arguments only the paper tables that have results are rendered.
``--sweep NAME`` renders any collected sweep (:mod:`reports.sweeps`), one
table per variant. Every table is rendered by :mod:`results.render`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from reports.paper_tables import build_tables_for_cli
from reports.sweeps import sweep_tables
from results.render import RENDERERS
from results.schema import DEFAULT_RESULTS


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="Parquet file written by reports.collect.")
    parser.add_argument("--format", choices=tuple(RENDERERS), default="markdown")
    parser.add_argument("--out", help="Folder to write one file per table (and print nothing).")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--table", action="append", dest="tables", help="Only these paper tables (repeatable).")
    which.add_argument("--sweep", help="Any collected sweep (its MLflow experiment name), one table per variant.")
    args = parser.parse_args(argv)
    if not Path(args.results).is_file():
        print(f"{args.results}: no results file; run `python -m reports.collect` first", file=sys.stderr)
        return 2
    results = pd.read_parquet(args.results)
    try:
        tables = sweep_tables(results, args.sweep) if args.sweep else build_tables_for_cli(results, args.tables)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    render, suffix = RENDERERS[args.format]
    for table in tables:
        text = render(table)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"{table.name}{suffix}").write_text(text, encoding="utf-8")
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
