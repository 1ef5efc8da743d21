"""The papers' tables, and any sweep's table, from collected results.

    python -m reports.tables [--results results.parquet] [--format markdown|latex|csv] [--out DIR]
                             [--table NAME ... | --sweep NAME]

Each table comes from a declarative spec in ``reports/table_specs.yaml`` and
the papers' numbers from ``reports/paper_numbers.yaml``. Cells are mean ± std
over seeds with the number of seeds ("seed-free": one run of a configuration
that cannot depend on the seed; "mirror": filled from the mirror cell of
symmetric grid axes); under each of our lines comes the
paper's figure and our difference from it; the best of our figures in each
column is bold. Lines, grid cells or seeds the sweep has not produced show as
"–" and are listed in a :class:`MissingResults` warning; a partial sweep still
renders. Only FINISHED trials count; where a (row, seed, grid point) ran more
than once, the latest run counts. Row tables test each row against their
reference row over seeds (:mod:`reports.significance`). ``--sweep NAME``
renders any collected sweep (:func:`sweep_table`); with no arguments only the
paper tables that have results are rendered.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from reports.collect import DEFAULT_OUT, IDENTITY
from reports.lines import latest_finished, with_lines
from reports.significance import is_significant, note as significance_note, p_text, welch_p
from sweep.spec_yaml import read_yaml
from trainers.registry import get_method

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
TABLE_SPECS = HERE / "table_specs.yaml"
PAPER_NUMBERS = HERE / "paper_numbers.yaml"
DASH = "–"
DELTA = "Delta"


@dataclass(frozen=True)
class Column:
    """How one of the papers' column names is computed from our results."""

    metric: str
    best: str | None = "max"  # which end is bold: "max", "min", or None for no bold
    digits: int = 2


COLUMNS = {
    "Dev": Column("best_dev_spearman"),
    "STS-B": Column("test_stsb_spearman"),
    "SICK-R": Column("test_sickr_spearman"),
    "STS12": Column("test_sts12_spearman"),
    "STS13": Column("test_sts13_spearman"),
    "STS14": Column("test_sts14_spearman"),
    "STS15": Column("test_sts15_spearman"),
    "STS16": Column("test_sts16_spearman"),
    "Avg": Column("test_avg_spearman"),
    "Steps": Column("steps", best=None, digits=0),
    "Training": Column("train_seconds", best="min"),
    "Inference": Column("test_seconds", best="min"),
}
"""The papers' column names -> our metrics, in one place. STS12-16 are the
'all' aggregation (every subset's pairs together), as the papers report.
``Delta`` is not here: it is our ``delta.of`` column minus the reference line's."""

PAPER_MODELS = {
    "bert-base-uncased": "bert-base",
    "bert-large-uncased": "bert-large",
    "prajjwal1/bert-tiny": "bert-tiny",
    "prajjwal1/bert-mini": "bert-mini",
    "prajjwal1/bert-small": "bert-small",
    "sentence-transformers/bert-base-nli-mean-tokens": "sbert-base",
    "sentence-transformers/bert-large-nli-mean-tokens": "sbert-large",
}
"""Our ``model`` knob value -> the papers' model key: when every trial of a
table ran one of these, the paper's rows for that model are compared with;
otherwise the table spec's ``paper.model``."""


class MissingResults(UserWarning):
    """Lines, grid cells or seeds a table expects that the results do not have."""


class TableSpecError(ValueError):
    """A table spec that cannot be rendered as written."""


# ---------------------------------------------------------------- table specs


@dataclass(frozen=True)
class PaperSource:
    paper: str
    table: str
    model: str | None
    rows: Mapping[Any, str | None]  # our line key -> the paper's row (None: the paper has none)
    columns: Mapping[Any, str]  # two-knob grids: our column value -> the paper's column


@dataclass(frozen=True)
class TableSpec:
    name: str
    title: str
    kind: str  # "rows" or "grid"
    spec_file: str  # the search space's path from the project root
    sweep: Mapping[str, Any]  # the search space
    columns: tuple[str, ...]  # metric columns (rows tables, one-knob grids)
    rows: tuple[str, ...]  # rows tables: the sweep rows, in order
    index: str | None  # grids: the knob of the lines
    across: str | None  # two-knob grids: the knob of the columns
    metric: str | None  # two-knob grids: the one metric column shown
    delta: tuple[str, str] | None  # (column, reference line): Delta = column minus the reference's
    paper: PaperSource | None
    row_sweeps: Mapping[str, tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    """rows tables: a row drawn from another search space -> (its path, that search space)"""

    @property
    def experiment(self) -> str:
        return self.sweep["name"]

    @property
    def seeds(self) -> list[int]:
        """The seeds the search space asks for (as the sweep engine reads them)."""
        return sweep_seeds(self.sweep)

    def sweep_of(self, line: Any) -> tuple[str, Mapping[str, Any]]:
        """(search space path, search space) that a line's trials come from."""
        return self.row_sweeps.get(line, (self.spec_file, self.sweep)) if self.kind == "rows" else (self.spec_file, self.sweep)

    def sweeps(self) -> dict[str, str]:
        """Experiment name -> search space path, of every sweep the table draws from."""
        found = {self.experiment: self.spec_file}
        found.update({sweep["name"]: path for path, sweep in self.row_sweeps.values()})
        return found

    def line_keys(self) -> list[Any]:
        return list(self.rows) if self.kind == "rows" else list(self.sweep["grid"][self.index])

    def column_keys(self) -> list[Any]:
        return list(self.sweep["grid"][self.across]) if self.across else list(self.columns)


SPEC_KEYS = {"title", "kind", "spec", "columns", "rows", "index", "across", "metric", "delta", "paper"}


def sweep_seeds(sweep: Mapping[str, Any]) -> list[int]:
    """The seeds a search space asks for (as the sweep engine reads them)."""
    default = get_method(sweep["method"]).all_knobs["seed"].default
    return [int(s) for s in sweep.get("seeds", [default])]


def _parse_rows(raw_rows: Sequence[Any], project: Path, fail) -> tuple[tuple[str, ...], dict]:
    """A rows table's rows: names of the main search space's rows, or ``{row: NAME, spec: PATH}`` for a
    row of another search space (SCT Table 4's augmentation rows live in three specs)."""
    names, row_sweeps = [], {}
    for item in raw_rows:
        if isinstance(item, Mapping):
            if set(item) != {"row", "spec"}:
                raise fail(f"a row from another search space is {{row: NAME, spec: PATH}}, got {dict(item)}")
            path = project / item["spec"]
            if not path.is_file():
                raise fail(f"search space {item['spec']} not found")
            row_sweeps[item["row"]] = (item["spec"], load_yaml(path))
            names.append(item["row"])
        else:
            names.append(item)
    return tuple(names), row_sweeps


def load_yaml(path: Path) -> Any:
    return read_yaml(path.read_text(encoding="utf-8"))


def parse_table_spec(name: str, raw: Mapping[str, Any], project: Path = PROJECT) -> TableSpec:
    """One entry of table_specs.yaml, checked against its search space."""
    def fail(message: str) -> TableSpecError:
        return TableSpecError(f"table {name!r}: {message}")

    unknown = set(raw) - SPEC_KEYS
    if unknown:
        raise fail(f"unknown keys {sorted(unknown)}; expected some of {sorted(SPEC_KEYS)}")
    kind = raw.get("kind")
    if kind not in ("rows", "grid"):
        raise fail(f"kind must be 'rows' or 'grid', got {kind!r}")
    if "spec" not in raw:
        raise fail("needs 'spec', the search space that fills it")
    path = project / raw["spec"]
    if not path.is_file():
        raise fail(f"search space {raw['spec']} not found")
    sweep = load_yaml(path)
    columns = tuple(raw.get("columns") or ())
    for column in columns:
        if column not in COLUMNS and column != DELTA:
            raise fail(f"unknown column {column!r}; known: {sorted(COLUMNS) + [DELTA]}")
    delta = None
    if DELTA in columns:
        if not isinstance(raw.get("delta"), Mapping) or set(raw["delta"]) != {"of", "from"}:
            raise fail("a Delta column needs delta: {of: COLUMN, from: LINE}")
        delta = (raw["delta"]["of"], raw["delta"]["from"])
    rows, row_sweeps = _parse_rows(raw.get("rows") or (), project, fail)
    index, across, metric = raw.get("index"), raw.get("across"), raw.get("metric")
    if kind == "rows":
        if not rows or not columns:
            raise fail("a rows table needs 'rows' and 'columns'")
        for path, source in [(raw["spec"], sweep), *row_sweeps.values()]:
            source_rows = [r["name"] for r in source.get("rows", [])]
            stray = [r for r in rows if row_sweeps.get(r, (raw["spec"],))[0] == path and r not in source_rows]
            if stray:
                raise fail(f"rows {stray} are not rows of {path} ({source_rows})")
            if source.get("grid"):
                raise fail(f"{path} has a grid: a row's cells would pool its grid points")
    else:
        if across and (metric not in COLUMNS or columns):
            raise fail("a two-knob grid shows one 'metric' (a column name) and no 'columns'")
        if not across and not columns:
            raise fail("a one-knob grid needs 'columns'")
        grid = sweep.get("grid", {})
        knobs = [k for k in (index, across) if k]
        if sorted(knobs) != sorted(grid):
            # Otherwise a cell would pool trials of different grid points.
            raise fail(f"index/across {knobs} must be the grid knobs of {raw['spec']} ({sorted(grid)})")
    if delta and delta[0] not in columns:
        raise fail(f"delta.of {delta[0]!r} is not one of the columns")
    spec = TableSpec(
        name=name, title=str(raw.get("title", name)), kind=kind, spec_file=raw["spec"], sweep=sweep,
        columns=columns, rows=rows, index=index, across=across, metric=metric,
        delta=delta, paper=_paper_source(raw.get("paper"), fail), row_sweeps=row_sweeps,
    )
    if delta and delta[1] not in spec.line_keys():
        raise fail(f"delta.from {delta[1]!r} is not one of the table's lines")
    return spec


def _paper_source(raw: Mapping[str, Any] | None, fail) -> PaperSource | None:
    if raw is None:
        return None
    unknown = set(raw) - {"paper", "table", "model", "rows", "columns"}
    if unknown or not {"paper", "table"} <= set(raw):
        raise fail(f"paper needs paper and table (and optionally model, rows, columns), got {sorted(raw)}")
    return PaperSource(raw["paper"], raw["table"], raw.get("model"), dict(raw.get("rows") or {}),
                       dict(raw.get("columns") or {}))


def load_table_specs(path: Path = TABLE_SPECS, project: Path = PROJECT) -> dict[str, TableSpec]:
    return {name: parse_table_spec(name, raw, project) for name, raw in load_yaml(path).items()}


# ---------------------------------------------------------------- building tables


@dataclass(frozen=True)
class Cell:
    """Our figures for one cell, one per seed. ``seed_free``: one run of a configuration that cannot
    depend on the seed (it stands for every seed); ``mirror``: filled from the mirror cell of
    symmetric grid axes, which ran instead."""

    values: tuple[float, ...]
    seed_free: bool = False
    mirror: bool = False

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n if self.n else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (nan below two seeds)."""
        if self.n < 2:
            return math.nan
        return math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (self.n - 1))


@dataclass
class Line:
    label: str
    cells: dict[str, Cell]  # column label -> ours
    paper: dict[str, float]  # column label -> the paper's figure


@dataclass
class Table:
    name: str
    title: str
    corner: str  # what the lines are: "row", or the grid knob of the lines
    columns: list[str]  # column labels
    formats: dict[str, Column]  # column label -> its format and bold rule
    lines: list[Line]
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    paper_model: str | None = None
    across: str | None = None  # two-knob grids: the knob of the columns
    p_values: dict[str, float] = field(default_factory=dict)  # line label -> p against p_reference
    p_reference: str | None = None  # the line the others are tested against (rows tables)

    def best_line(self, column: str) -> int | None:
        """Index of the line whose mean is best in ``column`` (None: no bold)."""
        direction = self.formats[column].best
        scored = [(i, line.cells[column].mean) for i, line in enumerate(self.lines) if line.cells[column].n]
        if direction is None or not scored:
            return None
        pick = max if direction == "max" else min
        return pick(scored, key=lambda item: item[1])[0]


def finished_runs(results: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The FINISHED trials of the table's sweeps, the latest for each (sweep, row, seed, grid point)."""
    runs = results[results["experiment"].isin(list(spec.sweeps())) & (results["status"] == "FINISHED")]
    keys = ["experiment", "row", "seed"] + [k for k in spec.sweep.get("grid", {}) if k in runs.columns]
    return runs.sort_values(["start_time", "run_id"]).drop_duplicates(keys, keep="last")


def _select(frame: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    for knob, value in where.items():
        if knob not in frame.columns:
            return frame.iloc[0:0]
        frame = frame[frame[knob] == value]
    return frame


def _describe(where: Mapping[str, Any]) -> str:
    if set(where) == {"experiment", "row"}:
        return f"row {where['row']!r}"
    return ", ".join(f"{k}={v}" for k, v in where.items() if k != "experiment")


def paper_rows(
    numbers: Mapping[str, Any], source: PaperSource | None, model: str | None
) -> dict[str, dict[str, float]]:
    """The paper's row name -> column -> figure, for ``model`` (all rows when None)."""
    if source is None:
        return {}
    table = numbers[source.paper][source.table]
    return {r["row"]: r["values"] for r in table["rows"] if model is None or r.get("model") == model}


def _paper_model(spec: TableSpec, numbers: Mapping[str, Any], runs: pd.DataFrame) -> str | None:
    if spec.paper is None:
        return None
    models = set(runs["model"].dropna()) if "model" in runs.columns else set()
    if len(models) == 1:
        mapped = PAPER_MODELS.get(next(iter(models)))
        if mapped and paper_rows(numbers, spec.paper, mapped):
            return mapped
    return spec.paper.model


def build_table(spec: TableSpec, results: pd.DataFrame, numbers: Mapping[str, Any]) -> Table:
    """Our cells and the paper's figures for one table spec."""
    if results.empty:
        results = pd.DataFrame(columns=list(IDENTITY))
    all_runs = results[results["experiment"].isin(list(spec.sweeps()))]
    runs = finished_runs(results, spec)
    model = _paper_model(spec, numbers, runs)
    paper = paper_rows(numbers, spec.paper, model)
    if spec.across:
        labels = [str(v) for v in spec.column_keys()]
        formats = {label: COLUMNS[spec.metric] for label in labels}
    else:
        labels = list(spec.columns)
        formats = {c: COLUMNS.get(c, Column(c)) for c in labels}
    corner = "row" if spec.kind == "rows" else spec.index
    table = Table(spec.name, spec.title, corner, labels, formats, [], paper_model=model, across=spec.across)

    for key in spec.line_keys():
        line_where = {"experiment": spec.sweep_of(key)[1]["name"]}
        line_where.update({"row": key} if spec.kind == "rows" else {spec.index: key})
        paper_row = spec.paper.rows.get(key, key if spec.kind == "rows" else None) if spec.paper else None
        figures = paper.get(paper_row, {}) if paper_row is not None else {}
        line = Line(str(key), {}, {})
        for column_key, label in zip(spec.column_keys(), labels):
            if spec.across:
                where = {**line_where, spec.across: column_key}
                metric = COLUMNS[spec.metric].metric
                paper_column = spec.paper.columns.get(column_key) if spec.paper else None
            else:
                where, metric, paper_column = line_where, formats[label].metric, label
            if label != DELTA:  # Delta is computed from the other cells below
                line.cells[label] = _cell(table, spec, runs, all_runs, where, metric, label)
            if paper_column in figures:
                line.paper[label] = float(figures[paper_column])
        table.lines.append(line)

    ran = set(runs["experiment"])
    absent = [f"no finished trial of sweep {name!r} (python -m sweep run {path})"
              for name, path in spec.sweeps().items() if name not in ran]
    if runs.empty:
        table.missing = absent
    else:
        table.missing += absent
    if spec.delta:
        _add_delta(table, spec)
    _note_sources(table, spec, runs, paper)
    if spec.kind == "rows":
        add_significance(table, spec.delta[0] if spec.delta else None, spec.delta[1] if spec.delta else None)
    return table


def add_significance(table: Table, column: str | None = None, reference: str | None = None) -> None:
    """Test each line's ``column`` (default: Avg, else the first column) against the ``reference`` line
    (default: the first) over seeds, where both have at least 2 (:mod:`reports.significance`)."""
    column = column or ("Avg" if "Avg" in table.columns else table.columns[0])
    reference = reference if reference is not None else table.lines[0].label
    base = next(line for line in table.lines if line.label == str(reference)).cells[column]
    exact = base.seed_free and base.n == 1  # a known constant: no seeds needed on its side
    tested = (base.n >= 2 or exact) and any(line.cells[column].n >= 2 for line in table.lines
                                            if line.label != str(reference))
    if tested:
        table.p_reference = str(reference)
        table.p_values = {line.label: welch_p(line.cells[column].values, base.values, exact)
                          for line in table.lines if line.label != str(reference)}
    if tested or any(line.cells[column].n for line in table.lines):
        table.notes.append(significance_note(column, str(reference), tested))


def _cell(table: Table, spec: TableSpec, runs: pd.DataFrame, all_runs: pd.DataFrame,
          where: Mapping[str, Any], metric: str, label: str) -> Cell:
    """Our cell where ``where`` holds; notes what is missing (once per line or grid cell)."""
    trials = _select(runs, where)
    mirror = trials.empty and _mirror(spec, where) is not None
    if mirror:
        trials = _select(runs, _mirror(spec, where))
    place = _describe(where)
    first_column = label == table.columns[0] or spec.across
    if first_column:
        done = {int(s) for s in trials["seed"]} | _stood_for(trials)
        seeds = sweep_seeds(spec.sweep_of(where.get("row"))[1])
        missing = [s for s in seeds if s not in done]
        if missing:
            table.missing.append(f"{place}: {len(missing)} of {len(seeds)} seeds missing: {missing}")
        others = _select(all_runs, where)
        others = others[others["status"] != "FINISHED"] if not others.empty else others
        if len(others):
            counts = others["status"].value_counts().sort_index()
            table.notes.append(f"{place}: left out " + ", ".join(f"{n} {s}" for s, n in counts.items()) + " trial(s)")
    values = trials[metric].dropna().astype(float).tolist() if metric in trials.columns else []
    if len(trials) and len(values) < len(trials):
        where_text = place if spec.across else f"{place}, {label}"
        absent = len(trials) - len(values)
        table.notes.append(f"{where_text}: {absent} of {len(trials)} finished trials logged no {metric}")
    seed_free = bool(len(trials)) and "seeds" in trials.columns and trials["seeds"].fillna("").ne("").all()
    return Cell(tuple(values), seed_free=seed_free, mirror=mirror)


def _stood_for(trials: pd.DataFrame) -> set[int]:
    """The seeds that seed-free trials stand for (their one run counts for every seed)."""
    if "seeds" not in trials.columns:
        return set()
    return {int(seed) for text in trials["seeds"].dropna() for seed in str(text).split(",") if seed}


def _mirror(spec: TableSpec, where: Mapping[str, Any]) -> dict[str, Any] | None:
    """The mirror cell of ``where`` when the table's two knobs are the sweep's symmetric axes."""
    if not spec.across or sorted(spec.sweep.get("symmetric") or []) != sorted([spec.index, spec.across]):
        return None
    return {**where, spec.index: where[spec.across], spec.across: where[spec.index]}


def _add_delta(table: Table, spec: TableSpec) -> None:
    """Delta = each seed's value of ``delta.of`` minus the reference line's mean (so its std is the line's)."""
    column, reference = spec.delta
    base = next(line for line in table.lines if line.label == str(reference)).cells[column]
    for line in table.lines:
        source = line.cells[column]
        line.cells[DELTA] = Cell(tuple(v - base.mean for v in source.values) if base.n else (), source.seed_free)


def _note_sources(table: Table, spec: TableSpec, runs: pd.DataFrame, paper: Mapping[str, Any]) -> None:
    def listed(name: str) -> str:
        values = sorted({str(v) for v in runs[name].dropna()}) if name in runs.columns else []
        return ", ".join(values) or DASH

    budget = f"; budget {listed('budget')}" if "budget" in runs.columns else ""
    paper_name = f"{spec.paper.paper} {spec.paper.table}, {table.paper_model or 'all models'}" if spec.paper else "none"
    cut = sorted({int(v) for v in runs["model_layers"].dropna() if v}) if "model_layers" in runs.columns else []
    layers = f" (first {', '.join(map(str, cut))} layers)" if cut else ""
    table.notes.insert(0, f"ours: {listed('model')}{layers}{budget}; paper: {paper_name}")
    for name in ("model", "budget", "model_layers"):
        if name in runs.columns and runs[name].nunique() > 1:
            table.notes.insert(1, f"the trials mix several values of {name} ({listed(name)}): filter or re-run before comparing")
    if spec.paper and spec.across:
        shown = {(line.label, label) for line in table.lines for label in line.paper}
        reported = [(k, c) for k, row in spec.paper.rows.items() for c, pc in spec.paper.columns.items()
                    if row in paper and pc in paper[row]]
        absent = [f"{spec.index}={k}, {spec.across}={c}" for k, c in reported if (str(k), str(c)) not in shown]
        if absent:
            table.notes.append(f"the paper reports cells outside this grid: {'; '.join(absent)}")


def build_tables(
    results: pd.DataFrame,
    names: Sequence[str] | None = None,
    specs: Mapping[str, TableSpec] | None = None,
    numbers: Mapping[str, Any] | None = None,
) -> list[Table]:
    """The named tables (all by default) of ``specs`` (default: table_specs.yaml), warning about gaps."""
    specs = specs if specs is not None else load_table_specs()
    numbers = numbers if numbers is not None else load_yaml(PAPER_NUMBERS)
    unknown = sorted(set(names or []) - set(specs))
    if unknown:
        raise KeyError(f"unknown table(s) {unknown}; known: {sorted(specs)}")
    tables = []
    for name in names or list(specs):
        table = build_table(specs[name], results, numbers)
        if table.missing:
            warnings.warn(f"{name}: " + "; ".join(table.missing), MissingResults, stacklevel=2)
        tables.append(table)
    return tables


def build_tables_for_cli(
    results: pd.DataFrame, names: Sequence[str] | None, specs: Mapping[str, TableSpec] | None = None
) -> list[Table]:
    """:func:`build_tables`, with what is missing printed to stderr, one line per item. With no
    ``names``, only the tables that have results: one line then lists the others and the command
    that fills each."""
    specs = specs if specs is not None else load_table_specs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        built = build_tables(results, names, specs)
    if not names:
        empty = [t for t in built if not has_results(t)]
        built = [t for t in built if has_results(t)]
        if empty:
            print(without_results_line(empty, specs), file=sys.stderr)
    for table in built:
        for item in table.missing:
            print(f"warning: {table.name}: {item}", file=sys.stderr)
    return built


def has_results(table: Table) -> bool:
    return any(cell.n for line in table.lines for cell in line.cells.values())


def without_results_line(tables: Sequence[Table], specs: Mapping[str, TableSpec]) -> str:
    """One line naming the paper tables that have no results yet, with the command that fills each."""
    commands = [f"{t.name} ({'; '.join(f'python -m sweep run {path}' for path in specs[t.name].sweeps().values())})"
                for t in tables]
    return "no results yet for: " + ", ".join(commands)


# ---------------------------------------------------------------- any sweep


SWEEP_COLUMNS = ("Dev", "STS-B", "SICK-R", "STS12", "STS13", "STS14", "STS15", "STS16", "Avg")


class NotCollected(KeyError):
    """A sweep asked for by name that the results file does not hold."""


def sweep_variants(results: pd.DataFrame, name: str) -> list[pd.DataFrame]:
    """The collected trials of sweep ``name``, one frame per variant (spec hash), oldest first."""
    trials = results[results["experiment"] == name] if not results.empty else results
    if trials.empty:
        known = sorted(set(results["experiment"])) if not results.empty else []
        raise NotCollected(
            f"sweep {name!r} is not in the collected results (collected: {', '.join(known) or 'none'}); "
            f"collect it with `python -m reports.collect`, or `python -m sweep status {name}` to see its trials"
        )
    first_start = trials.groupby("spec_hash")["start_time"].min().sort_values()
    return [trials[trials["spec_hash"] == spec_hash] for spec_hash in first_start.index]


def sweep_table(trials: pd.DataFrame, columns: Sequence[str] = SWEEP_COLUMNS, title: str | None = None) -> Table:
    """Any sweep variant's table: a line per row x grid point (a line per trial for sampled axes, sorted by
    the sweep's metric), cells mean ± std (n) over the latest FINISHED run of each seed, the best in bold,
    and each line's Avg tested against the first line's."""
    trials = with_lines(trials)
    finished = latest_finished(trials)
    name = str(trials["experiment"].iloc[0])
    spec_hash = str(trials["spec_hash"].iloc[0])
    formats = {column: COLUMNS[column] for column in columns}
    table = Table(f"{name}-{spec_hash}", title or f"{name} (spec hash {spec_hash})", "row [grid point]",
                  list(columns), formats, [])
    for label, group in trials.groupby("line", sort=False):
        done = finished[finished["line"] == label]
        cells = {c: Cell(tuple(done[formats[c].metric].dropna().astype(float)) if formats[c].metric in done else ())
                 for c in columns}
        table.lines.append(Line(str(label), cells, {}))
        left_out = group.loc[~group.index.isin(done.index), "status"].value_counts().sort_index()
        if len(left_out):
            table.notes.append(f"{label}: left out " + ", ".join(f"{n} {s}" for s, n in left_out.items()) + " trial(s)")
    add_significance(table)
    metric, mode = (str(trials["sweep_metric"].iloc[0]).split() + ["max"])[:2] if "sweep_metric" in trials else ("best_dev_spearman", "max")
    if "sampled_axes" in trials and str(trials["sampled_axes"].iloc[0]):
        column = next((c for c, f in formats.items() if f.metric == metric), columns[0])
        scored = [line for line in table.lines if line.cells[column].n]
        table.lines = sorted(scored, key=lambda line: line.cells[column].mean, reverse=mode == "max") + [
            line for line in table.lines if not line.cells[column].n]
        table.notes.append(f"sampled axes ({trials['sampled_axes'].iloc[0]}): one line per trial, best {metric} first")
    budget = ", ".join(sorted(set(trials["budget"].dropna().astype(str))))
    models = ", ".join(sorted(set(trials["model"].dropna().astype(str)))) if "model" in trials else DASH
    table.notes.insert(0, f"ours: {models}; budget {budget}; {len(finished)} finished of {len(trials)} trials")
    return table


# ---------------------------------------------------------------- rendering


PAPER_LABEL = "paper (ours − paper)"
P_COLUMN = "p"
REFERENCE = "ref"


def cell_text(cell: Cell, column: Column) -> str:
    if cell.n == 0:
        return DASH
    mean = f"{cell.mean:+.{column.digits}f}" if column.metric == DELTA else f"{cell.mean:.{column.digits}f}"
    mirror = ", mirror" if cell.mirror else ""
    if cell.seed_free:
        return f"{mean} (seed-free{mirror})"
    if cell.n == 1:
        return f"{mean} (1{mirror})"
    return f"{mean} ± {cell.std:.{column.digits}f} ({cell.n}{mirror})"


def paper_text(value: float | None, ours: Cell, column: Column) -> str:
    if value is None:
        return DASH
    figure = f"{value:+.{column.digits}f}" if column.metric == DELTA else f"{value:.{column.digits}f}"
    if ours.n == 0:
        return figure
    return f"{figure} ({ours.mean - value:+.{column.digits}f})"


def layout(table: Table) -> tuple[list[str], list[list[str]], set[tuple[int, int]]]:
    """Header, text lines and the (line, column) positions to set in bold.

    Each of our lines is followed by the paper's line where the paper reports
    any of its cells.
    """
    formats = table.formats
    best_columns: dict[int, list[int]] = {}
    for j, column in enumerate(table.columns, start=1):
        best_columns.setdefault(table.best_line(column), []).append(j)
    text, bold = [], set()
    significance = [P_COLUMN] if table.p_values else []
    for i, line in enumerate(table.lines):
        bold.update((len(text), j) for j in best_columns.get(i, []))
        p = [REFERENCE if line.label == table.p_reference else p_text(table.p_values.get(line.label, math.nan))]
        text.append([line.label] + [cell_text(line.cells[c], formats[c]) for c in table.columns] + p[: len(significance)])
        if line.paper:
            paper = [paper_text(line.paper.get(c), line.cells[c], formats[c]) for c in table.columns]
            text.append([PAPER_LABEL] + paper + [""] * len(significance))
    corner = f"{table.corner} \\ {table.across}" if table.across else table.corner
    return [corner] + table.columns + significance, text, bold


def to_csv(table: Table) -> str:
    """One line per line of ours: mean, std and n of each column, the paper's figure, and the p-value
    (with whether it is significant at 5%) against the reference line."""
    records = []
    for line in table.lines:
        record: dict[str, Any] = {table.corner: line.label}
        for column in table.columns:
            cell = line.cells[column]
            record.update({f"{column} mean": cell.mean, f"{column} std": cell.std, f"{column} n": cell.n,
                           f"{column} paper": line.paper.get(column, math.nan)})
        p_value = table.p_values.get(line.label, math.nan)
        record.update({"p_value": p_value, "significant": is_significant(p_value),
                       "p_reference": table.p_reference or ""})
        records.append(record)
    return pd.DataFrame.from_records(records).to_csv(index=False)


def to_markdown(table: Table) -> str:
    header, lines, bold = layout(table)

    def cell(i: int, j: int, text: str) -> str:
        return f"**{text}**" if (i, j) in bold else text

    out = [f"### {table.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(i, j, t) for j, t in enumerate(line)) + " |" for i, line in enumerate(lines)]
    out += [""] + [f"- missing: {m}" for m in table.missing] + [f"- {note}" for note in table.notes]
    return "\n".join(out) + "\n"


LATEX_REPLACEMENTS = (
    ("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"),
    ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}"),
    ("->", r"$\rightarrow$"), ("<", r"\textless{}"), (">", r"\textgreater{}"),
    ("±", r"$\pm$"), ("−", "$-$"), ("–", "--"),
)


def latex_escape(text: str) -> str:
    """Plain text as LaTeX source (one pass, so replacements are never re-escaped)."""
    out, i = [], 0
    while i < len(text):
        for old, new in LATEX_REPLACEMENTS:
            if text.startswith(old, i):
                out.append(new)
                i += len(old)
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def to_latex(table: Table) -> str:
    """A booktabs table float (needs \\usepackage{booktabs} and \\usepackage{graphicx})."""
    header, lines, bold = layout(table)

    def cell(i: int, j: int, text: str) -> str:
        if (i, j) in bold:
            return f"\\textbf{{{latex_escape(text)}}}"
        return f"\\textit{{{latex_escape(text)}}}" if lines[i][0] == PAPER_LABEL else latex_escape(text)

    def row(cells: list[str]) -> str:
        return " & ".join(cells) + r" \\"

    out = [
        "% needs \\usepackage{booktabs} and \\usepackage{graphicx}",
        "\\begin{table}[ht]", "\\centering", "\\small", f"\\caption{{{latex_escape(table.title)}}}",
        # Shrunk to the line width when wider, never enlarged.
        f"\\label{{tab:{table.name}}}", "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%",
        f"\\begin{{tabular}}{{l{'r' * (len(header) - 1)}}}", "\\toprule", row([latex_escape(h) for h in header]),
        "\\midrule",
    ]
    out += [row([cell(i, j, t) for j, t in enumerate(line)]) for i, line in enumerate(lines)]
    out += ["\\bottomrule", "\\end{tabular}}", "\\end{table}"]
    return "\n".join(out) + "\n"


RENDERERS = {"markdown": (to_markdown, ".md"), "latex": (to_latex, ".tex"), "csv": (to_csv, ".csv")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=DEFAULT_OUT, help="Parquet file written by reports.collect.")
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
        if args.sweep:
            tables = [sweep_table(trials) for trials in sweep_variants(results, args.sweep)]
        else:
            tables = build_tables_for_cli(results, args.tables)
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
