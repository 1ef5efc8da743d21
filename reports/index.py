"""The reproduction index: every table and figure of the three papers, and what reproduces it here.

    python -m reports.index [--write docs/reproduction.md]
    python -m reports.tables --index          # the same, and whether each search space runs on this machine

It joins the papers' catalogue (``reports/paper_index.yaml``: each table and figure and its kind) with the
table specs (``reports/table_specs.yaml``) and their search spaces, so it cannot drift from them: for each
paper table and figure, the table specs that fill it, their search spaces and rows, the reference row, the
command, and the caption that names every substitute (model, view, data). Tables of hyperparameters or data
and the papers' diagrams are named as such; analyses drawn from an encoder give their command.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from reports.table_specs import ENCODER_ANALYSES, HERE, PAPER_NUMBERS, TableSpec, load_table_specs, load_yaml
from sweep.spec.sweep_spec import SpecError, load_spec

PAPER_INDEX = HERE / "paper_index.yaml"
KINDS = ("results", "analysis", "hyperparameters", "data", "diagram")
PAPER_TITLES = {"sg-bert": "SG-BERT (Kim et al., ACL 2021)", "consert": "ConSERT (Yan et al., ACL 2021)",
                "sct": "SCT (Limkonchotiwat et al.)"}


@dataclass(frozen=True)
class Item:
    """One table or figure of a paper, and what fills it here."""

    paper: str
    key: str  # "table4", "figure2"
    what: str
    kind: str
    tables: tuple[TableSpec, ...]  # results: the table specs that fill it
    note: str  # analysis: its command; hyperparameters: where our defaults carry them
    has_paper_numbers: bool

    @property
    def label(self) -> str:
        """"Table 4" for "table4"."""
        kind, number = re.fullmatch(r"(table|figure)(\d+)", self.key).groups()
        return f"{kind.capitalize()} {number}"


def fills(item_name: str, table_name: str) -> bool:
    """Whether table spec ``table_name`` fills paper item ``item_name`` ("sg-bert-table1" fills itself and
    "sg-bert-table1-...", not "sg-bert-table10")."""
    return table_name == item_name or table_name.startswith(f"{item_name}-")


def load_index(tables: Mapping[str, TableSpec] | None = None, path: Path = PAPER_INDEX) -> list[Item]:
    """The catalogue joined with the table specs; raises ValueError where they disagree (a table spec that
    fills no item, a results item that nothing fills, an analysis without its command)."""
    tables = load_table_specs() if tables is None else tables
    numbers = load_yaml(PAPER_NUMBERS)
    items, claimed = [], set()
    for paper, entries in load_yaml(path).items():
        for key, entry in entries.items():
            name = f"{paper}-{key}"
            if entry["kind"] not in KINDS:
                raise ValueError(f"{path}: {paper}.{key}.kind: expected one of {list(KINDS)}, got {entry['kind']!r}")
            filling = tuple(table for table_name, table in tables.items() if fills(name, table_name))
            claimed.update(table.name for table in filling)
            if entry["kind"] == "results" and not filling:
                raise ValueError(f"{path}: {paper}.{key}: a results item that no table spec fills ({name}...)")
            if entry["kind"] == "analysis" and entry.get("drawn_by") not in ENCODER_ANALYSES:
                raise ValueError(f"{path}: {paper}.{key}.drawn_by: expected one of {sorted(ENCODER_ANALYSES)}")
            note = ENCODER_ANALYSES[entry["drawn_by"]] if entry["kind"] == "analysis" else entry.get("see", "")
            items.append(Item(paper, key, entry["what"], entry["kind"], filling, note, key in numbers.get(paper, {})))
    stray = sorted(set(tables) - claimed)
    if stray:
        raise ValueError(f"{path}: table specs {stray} fill no table or figure of the catalogue")
    return items


def spec_lines(table: TableSpec) -> list[str]:
    """A table spec's search spaces, each with its rows (or grid) and the command that fills it."""
    commands = table.fill_commands()
    lines = []
    for path, sweep in table.search_spaces().items():
        shown = table.shown_rows(path) if table.kind == "rows" else []
        what = f"rows {', '.join(repr(r) for r in shown)}" if shown else f"grid {', '.join(sweep.grid) or '-'}"
        lines.append(f"`{commands[sweep.name]}` ({what})")
    return lines


def markdown(items: Sequence[Item], here: Callable[[TableSpec], str] | None = None) -> str:
    """The index as Markdown: one section per paper, one line per table spec or other item; ``here`` adds a
    column saying whether each table's search spaces run on this machine."""
    out = ["# Reproduction index", "",
           "Every table and figure of the three papers and what reproduces it here, generated from the catalogue "
           "(`reports/paper_index.yaml`) and the table specs by `python -m reports.index --write "
           "docs/reproduction.md`. `python -m reports.tables --index` prints it with a column saying what this "
           "machine lacks for each table. Each caption is generated from the settings ledger "
           "(`sweep/spec/paper_ledger.yaml`): every setting our rows resolve to that differs from the paper's "
           "(or, where the paper is silent, from the authors' script), with its kind (forced: no hub model or data; "
           "budget; open: a choice the paper leaves open) and reason, and where rows of different methods train at "
           "their own papers' settings; each row's difference from its table's reference row, what follows its method "
           "with the source of each default, and the ledger's deviations are printed by `python -m sweep plan SPEC`.",
           ""]
    for paper in dict.fromkeys(item.paper for item in items):
        out += [f"## {PAPER_TITLES.get(paper, paper)}", "",
                "| item | what | table spec | caption (our deviations) | reference row | commands |"
                + (" here |" if here else ""),
                "|---|---|---|---|---|---|" + ("---|" if here else "")]
        for item in (i for i in items if i.paper == paper):
            numbers = "" if item.has_paper_numbers or item.kind != "results" else " (the paper prints no numbers)"
            if item.kind != "results":
                kind = {"analysis": f"analysis: `{item.note}`", "hyperparameters": f"hyperparameters: {item.note}",
                        "data": "a data table", "diagram": "a diagram"}[item.kind]
                out.append(f"| {item.label} | {item.what} | {kind} | | | |" + (" |" if here else ""))
                continue
            for table in item.tables:
                reference = table.reference.describe() if table.reference else ""
                cells = [item.label, item.what + numbers, f"`{table.name}`", table.caption.replace("|", "/"),
                         reference.replace("|", "/"), "<br>".join(spec_lines(table))]
                out.append("| " + " | ".join(cells) + " |" + (f" {here(table)} |" if here else ""))
        out.append("")
    return "\n".join(out)


def runs_here(table: TableSpec) -> str:
    """"yes", or what this machine lacks for the table's search spaces (the first problem of each)."""
    lacking = []
    for path, sweep in table.search_spaces().items():
        try:
            load_spec(sweep.path)
        except SpecError as error:
            lacking.append(f"{Path(path).name}: {error.problems[0].split(': ', 1)[1]}")
    return "yes" if not lacking else "no: " + "; ".join(lacking).replace("|", "/")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", metavar="PATH", help="Write the index there (docs/reproduction.md).")
    args = parser.parse_args(argv)
    text = markdown(load_index())
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
