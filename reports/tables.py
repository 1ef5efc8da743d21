"""The papers' tables from collected results, with the papers' numbers beside ours.

    python -m reports.tables [--results results.parquet] [--format latex|markdown] [--out DIR] [--table NAME ...]

Each table comes from a declarative spec in ``reports/table_specs.yaml``.
Cells are mean ± std over seeds with the number of seeds; under each of our
rows comes the paper's figure and our difference from it; the best of our
figures in each column is bold. Rows or seeds the sweep has not produced show
as "–" and are listed in a warning; a partial sweep still renders. Only
FINISHED trials count; for a (row, seed) run several times, the latest counts.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import yaml

from reports.collect import DEFAULT_OUT

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
TABLE_SPECS = HERE / "table_specs.yaml"
PAPER_NUMBERS = HERE / "paper_numbers.yaml"
DASH = "–"

COLUMN_METRICS = {
    "Dev": "best_dev_spearman",
    "STS-B": "test_stsb_spearman",
    "SICK-R": "test_sickr_spearman",
    "STS12": "test_sts12_spearman",
    "STS13": "test_sts13_spearman",
    "STS14": "test_sts14_spearman",
    "STS15": "test_sts15_spearman",
    "STS16": "test_sts16_spearman",
    "Avg": "test_avg_spearman",
}
"""The papers' column names -> our metric names (STS12-16: the 'all' aggregation)."""


class MissingResults(UserWarning):
    """Rows or seeds a table expects that the results do not have."""


@dataclass(frozen=True)
class Cell:
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n if self.n else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (0 for a single seed)."""
        if self.n < 2:
            return 0.0
        return math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (self.n - 1))


@dataclass
class RenderedTable:
    name: str
    title: str
    header: list[str]
    lines: list[list[str]]
    bold: set[tuple[int, int]]
    notes: list[str]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def sweep_spec(table: Mapping[str, Any]) -> dict[str, Any]:
    """The search space a table is filled from (path relative to the project, or absolute)."""
    return load_yaml(PROJECT / table["spec"])


def finished_runs(results: pd.DataFrame, spec: Mapping[str, Any]) -> pd.DataFrame:
    """The spec's FINISHED trials, the latest one for each (row, seed, grid point)."""
    runs = results[(results["experiment"] == spec["name"]) & (results["status"] == "FINISHED")]
    keys = ["row", "seed"] + [k for k in spec.get("grid", {}) if k in runs.columns]
    return runs.sort_values("start_time").drop_duplicates(keys, keep="last")


def paper_values(numbers: Mapping[str, Any], source: Mapping[str, Any] | None) -> dict[str, dict[str, float]]:
    """Paper row name -> column -> number, for the model the table compares with."""
    if not source:
        return {}
    table = numbers[source["paper"]][source["table"]]
    model = source.get("model")
    return {r["row"]: r["values"] for r in table["rows"] if model is None or r.get("model") == model}


def fmt(value: float, digits: int = 2) -> str:
    return DASH if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def rows_table(name: str, table: Mapping[str, Any], results: pd.DataFrame, numbers: Mapping[str, Any]) -> RenderedTable:
    spec = sweep_spec(table)
    runs = finished_runs(results, spec)
    seeds = list(spec.get("seeds", [42]))
    paper = paper_values(numbers, table.get("paper"))
    columns = list(table["columns"])
    lines, bold, notes, cells_by_column = [], set(), [], {c: [] for c in columns}
    for entry in table["rows"]:
        row_runs = runs[runs["row"] == entry["row"]]
        missing = sorted(set(seeds) - set(int(s) for s in row_runs["seed"]))
        if missing:
            notes.append(f"row {entry['row']!r}: {len(missing)} of {len(seeds)} seeds missing: {missing}")
        cells = {}
        for column in columns:
            metric = COLUMN_METRICS[column]
            values = row_runs[metric].dropna().astype(float).tolist() if metric in row_runs else []
            cells[column] = Cell(tuple(values))
            if values:
                cells_by_column[column].append((len(lines), cells[column].mean))
        lines.append([entry["row"]] + [_cell_text(cells[c]) for c in columns])
        paper_row = paper.get(entry.get("paper_row", entry["row"]), {})
        lines.append(["  paper (ours − paper)"] + [_paper_text(paper_row.get(c), cells[c]) for c in columns])
    for index, column in enumerate(columns):
        if cells_by_column[column]:
            best_line = max(cells_by_column[column], key=lambda item: item[1])[0]
            bold.add((best_line, index + 1))
    models = sorted(set(runs["model"].dropna())) if "model" in runs else []
    notes.insert(0, f"ours: {', '.join(models) or DASH}; paper: {table.get('paper', {}).get('model', DASH)}")
    return RenderedTable(name, table["title"], ["row"] + columns, lines, bold, notes)


def _cell_text(cell: Cell) -> str:
    if cell.n == 0:
        return DASH
    return f"{cell.mean:.2f} ± {cell.std:.2f} ({cell.n})"


def _paper_text(value: float | None, ours: Cell) -> str:
    if value is None:
        return DASH
    if ours.n == 0:
        return f"{value:.2f}"
    return f"{value:.2f} ({ours.mean - value:+.2f})"


def grid_table(name: str, table: Mapping[str, Any], results: pd.DataFrame) -> RenderedTable:
    spec = sweep_spec(table)
    runs = finished_runs(results, spec)
    index, columns = table["index"], table.get("columns")
    index_values = spec["grid"][index]
    column_values = spec["grid"][columns] if columns else [None]
    metric = COLUMN_METRICS[table["metric"]]
    lines, notes, best = [], [], {}
    for i, index_value in enumerate(index_values):
        line = [str(index_value)]
        for j, column_value in enumerate(column_values):
            match = runs[runs[index] == index_value] if index in runs else runs.iloc[0:0]
            if columns and columns in match:
                match = match[match[columns] == column_value]
            cell = Cell(tuple(match[metric].dropna().astype(float))) if metric in match else Cell(())
            if cell.n == 0:
                where = f"{index}={index_value}" + (f", {columns}={column_value}" if columns else "")
                notes.append(f"{where}: missing")
            elif cell.mean > best.get(j, (None, -math.inf))[1]:
                best[j] = (i, cell.mean)
            line.append(_cell_text(cell))
        lines.append(line)
    bold = {(i, j + 1) for j, (i, _) in best.items()}
    if columns:
        header = [f"{index} \\ {columns}"] + [str(v) for v in column_values]
    else:
        header = [index, table["metric"]]
    return RenderedTable(name, f"{table['title']} ({table['metric']})", header, lines, bold, notes)


def build_tables(
    results: pd.DataFrame,
    names: Sequence[str] | None = None,
    specs: Mapping[str, Any] | None = None,
    numbers: Mapping[str, Any] | None = None,
) -> list[RenderedTable]:
    """Render the named tables (all by default) of ``specs`` (default: table_specs.yaml)."""
    specs = specs if specs is not None else load_yaml(TABLE_SPECS)
    numbers = numbers if numbers is not None else load_yaml(PAPER_NUMBERS)
    unknown = sorted(set(names or []) - set(specs))
    if unknown:
        raise KeyError(f"unknown table(s) {unknown}; known: {sorted(specs)}")
    tables = []
    for name in names or list(specs):
        table = specs[name]
        built = grid_table(name, table, results) if table["kind"] == "grid" else rows_table(name, table, results, numbers)
        missing = [n for n in built.notes if "missing" in n]
        if missing:
            warnings.warn(f"{name}: " + "; ".join(missing), MissingResults, stacklevel=2)
        tables.append(built)
    return tables


def to_markdown(table: RenderedTable) -> str:
    def cell(i: int, j: int, text: str) -> str:
        return f"**{text}**" if (i, j) in table.bold and text != DASH else text

    out = [f"### {table.title}", "", "| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
    out += ["| " + " | ".join(cell(i, j, t) for j, t in enumerate(line)) + " |" for i, line in enumerate(table.lines)]
    out += [""] + [f"- {note}" for note in table.notes]
    return "\n".join(out) + "\n"


def _latex_escape(text: str) -> str:
    for old, new in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                     ("±", r"$\pm$"), ("−", "$-$"), ("–", "--")):
        text = text.replace(old, new)
    return text


def to_latex(table: RenderedTable) -> str:
    def cell(i: int, j: int, text: str) -> str:
        text = _latex_escape(text)
        return f"\\textbf{{{text}}}" if (i, j) in table.bold and text != "--" else text

    spec = "l" + "r" * (len(table.header) - 1)
    out = [
        "\\begin{table}[ht]", "\\centering", "\\small", f"\\caption{{{_latex_escape(table.title)}}}",
        f"\\begin{{tabular}}{{{spec}}}", "\\toprule",
        " & ".join(_latex_escape(h) for h in table.header) + r" \\", "\\midrule",
    ]
    out += [" & ".join(cell(i, j, t) for j, t in enumerate(line)) + r" \\" for i, line in enumerate(table.lines)]
    out += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=DEFAULT_OUT, help="Parquet file written by reports.collect.")
    parser.add_argument("--format", choices=("markdown", "latex"), default="markdown")
    parser.add_argument("--out", help="Folder to write one file per table (and print nothing).")
    parser.add_argument("--table", action="append", dest="tables", help="Only these tables (repeatable).")
    args = parser.parse_args(argv)
    if not Path(args.results).is_file():
        print(f"{args.results}: no results file; run `python -m reports.collect` first", file=sys.stderr)
        return 2
    try:
        tables = build_tables(pd.read_parquet(args.results), args.tables)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    render, suffix = (to_latex, ".tex") if args.format == "latex" else (to_markdown, ".md")
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
