"""The papers' tables, and any sweep's table, from collected results.

    python -m reports.tables [--results results.parquet] [--format markdown|latex|csv] [--out DIR]
                             [--table NAME ... | --sweep NAME]
    python -m reports.tables --index

Each paper table comes from a declarative spec in ``reports/table_specs.yaml``
(:mod:`reports.table_specs`) and the papers' numbers from
``reports/paper_numbers.yaml``; :mod:`reports.paper_tables` builds them. With
no arguments only the paper tables that have results are rendered.
``--sweep NAME`` renders any collected sweep (:mod:`reports.sweeps`), one
table per variant, each saying under it how its numbers were made (evaluation subset, budget, model, precision
asked, as its trials recorded them: :func:`reports.paper_tables.how_made`). Every table is rendered by
:mod:`results.render`, with the legend of the marks it uses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from reports.cli import read_results, results_parser, run_command
from reports.paper_tables import build_tables_for_cli, how_made
from reports.sweeps import variant_tables
from results.render import RENDERERS
from results.schema import FINISHED
from results.table import Table


def described_sweep_tables(results: pd.DataFrame, name: str) -> list[Table]:
    """Each variant's table of sweep ``name``, with how its numbers were made under it (the precision asked; what
    ``auto`` resolved to is in ``reports.paper``'s report, which reads the runs' tags)."""
    tables = []
    for trials, table in variant_tables(results, name):
        table.notes[1:1] = how_made(trials[trials["status"] == FINISHED])
        tables.append(table)
    return tables


def render(args: argparse.Namespace) -> int:
    if args.index:
        from reports.index import load_index, markdown, runs_here

        print(markdown(load_index(), here=runs_here))
        return 0
    results = read_results(args.results)
    tables = described_sweep_tables(results, args.sweep) if args.sweep else build_tables_for_cli(results, args.tables)
    render_table, suffix = RENDERERS[args.format]
    for table in tables:
        text = render_table(table)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"{table.name}{suffix}").write_text(text, encoding="utf-8")
        else:
            print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = results_parser("python -m reports.tables", __doc__, "Only these paper tables (repeatable).",
                            "Any collected sweep (its MLflow experiment name), one table per variant.")
    parser.add_argument("--format", choices=tuple(RENDERERS), default="markdown")
    parser.add_argument("--out", help="Folder to write one file per table (and print nothing).")
    parser.add_argument("--index", action="store_true", help="List every table and figure of the papers, what "
                        "reproduces it and whether it runs on this machine (reports.index); no results needed.")
    return run_command(parser, argv, render)


if __name__ == "__main__":
    sys.exit(main())
