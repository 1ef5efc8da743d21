"""The papers' tables as declared in ``reports/table_specs.yaml``, checked against their search spaces.

A table spec names the search space that fills it, read as the sweep engine
reads it (:func:`sweep.spec.sweep_spec.load_spec`, without the environment checks): its
rows, seeds, grid and symmetric axes. A rows table shows named rows of it (or
``{row: NAME, spec: PATH}`` of another search space, or ``{line: NAME, columns: {COLUMN: ROW}}``, a line
whose columns come from several of its rows: ConSERT's BERT-flow line, a flow per test set); a grid table
shows its one or two grid knobs. ``paper`` says which of ``paper_numbers.yaml``'s tables
and rows ours are compared with.

A rows table's rows are measured against one reference row: every search space
it draws from names the same one (``reference:``), and each row's contract was
checked when its search space loaded (:mod:`sweep.spec.contracts`). Where that
reference stands in for the paper's, the caption says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from results.table import COLUMNS, DELTA
from sweep.spec.contracts import REGIME_KNOBS, TRAINING_DATA, VIEWS, regime
from sweep.spec.ledger import LEDGER_NAME, SpecLedger, declared, deviation_notes, lines_of, load_ledger
from sweep.spec.rows import Reference
from sweep.spec.source import read_yaml
from sweep.spec.sweep_spec import SpecError, SweepSpec, load_spec

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
TABLE_SPECS = HERE / "table_specs.yaml"
PAPER_NUMBERS = HERE / "paper_numbers.yaml"
SPEC_KEYS = {"title", "kind", "spec", "columns", "rows", "index", "across", "metric", "delta", "paper"}

ENCODER_ANALYSES = {
    "sg-bert-figure5": "python -m reports.analyses tsne --encoder ENC",
    "consert-figure1": "python -m reports.analyses gold-cosine --encoder A --encoder B",
    "sct-table5": "python -m reports.analyses augmentations --encoder ENC --view synonym",
}
"""The papers' figures and tables drawn from an encoder, not from a sweep's results (SG-BERT Figures 5
and 6, ConSERT Figure 1, SCT Table 5), and the command that draws each (docs/analyses.md)."""


class TableSpecError(ValueError):
    """A table spec that cannot be rendered as written."""


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
    sweep: SweepSpec  # the search space
    columns: tuple[str, ...]  # metric columns (rows tables, one-knob grids)
    rows: tuple[str, ...]  # rows tables: the sweep rows, in order
    index: str | None  # grids: the knob of the lines
    across: str | None  # two-knob grids: the knob of the columns
    metric: str | None  # two-knob grids: the one metric column shown
    delta: tuple[str, str] | None  # (column, reference line): Delta = column minus the reference's
    paper: PaperSource | None
    delta_from: Mapping[Any, Any] = field(default_factory=dict)
    """A line whose Delta is measured against another line than ``delta``'s (its matching reference: SCT Table
    4's 'Same BT (T = T)' against the two back-translations, as the paper's -5.66 is)."""
    row_sweeps: Mapping[str, tuple[str, SweepSpec]] = field(default_factory=dict)
    """rows tables: a row drawn from another search space -> (its path, that search space)"""
    parts: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """rows tables: a line drawn from several rows of its search space -> {column: the row it comes from}; its Avg
    is each seed's mean of its parts' test sets (:data:`COMPOSED_AVERAGE`)"""
    reference: Reference | None = None
    """rows tables: the row every line is measured against (:func:`_table_reference`)"""
    regimes: str = ""
    """rows tables whose trained rows train different regimes (corpus, length, batch, sequence length, views):
    each knob's value per row (:func:`regime_note`)."""
    deviations: tuple[str, ...] | None = None
    """What our rows' resolved settings declare different from the paper's, from the settings ledger
    (:func:`sweep.spec.ledger.deviation_notes`); None where the ledger has no record of the table's specs."""

    @property
    def caption(self) -> str:
        """The title, the reference row where it stands in for the paper's, and the ledger's deviations."""
        caption = self.title
        if self.reference is not None and self.reference.stands_in_for:
            caption += f". Reference row {self.reference.row!r} stands in for {self.reference.stands_in_for}"
        if self.delta_from:
            caption += ". " + "; ".join(f"Delta of {line!r} is against {reference!r}"
                                        for line, reference in self.delta_from.items())
        for line, parts in self.parts.items():
            by_row: dict[str, list[str]] = {}
            for column, row in parts.items():
                by_row.setdefault(row, []).append(column)
            caption += (f". Line {line!r} draws its columns from {len(by_row)} rows (" + "; ".join(
                f"{' and '.join(columns)}: {row!r}" for row, columns in by_row.items()) + ")" +
                (", its Avg each seed's mean of their seven test sets" if "Avg" in self.columns else ""))
        if self.regimes:
            caption += f". {self.regimes}"
        if self.deviations:
            caption += f". Deviations from the paper ({LEDGER_NAME}): " + "; ".join(self.deviations)
        elif self.deviations is not None:
            caption += f". No deviation from the paper's settings ({LEDGER_NAME})"
        return caption

    @property
    def experiment(self) -> str:
        return self.sweep.name

    def sweep_rows(self, line: Any) -> tuple[Any, ...]:
        """The search-space rows a line shows: its own, or a composed line's parts, each once."""
        return line_rows(line, self.parts)

    def shown_rows(self, path: str) -> list[Any]:
        """The rows of the search space at ``path`` that a rows table shows, in the table's order."""
        return [row for line in self.rows for row in self.sweep_rows(line) if self.sweep_of(line)[0] == path]

    def sweep_of(self, line: Any) -> tuple[str, SweepSpec]:
        """(search space path, search space) that a line's trials come from."""
        return (self.row_sweeps.get(line, (self.spec_file, self.sweep)) if self.kind == "rows"
                else (self.spec_file, self.sweep))

    def search_spaces(self) -> dict[str, SweepSpec]:
        """Path -> search space, of every search space the table draws from (its own first)."""
        return {self.spec_file: self.sweep, **dict(self.row_sweeps.values())}

    def sweeps(self) -> dict[str, str]:
        """Experiment name -> search space path, of every sweep the table draws from."""
        return {sweep.name: path for path, sweep in self.search_spaces().items()}

    def fill_commands(self) -> dict[str, str]:
        """Experiment name -> the command that runs its search space, for every sweep the table draws from:
        ``sweep glue`` for a GLUE fine-tuning spec (its ``glue`` key), ``sweep run`` for the others."""
        return {sweep.name: f"python -m sweep {'glue' if sweep.glue is not None else 'run'} {path}"
                for path, sweep in self.search_spaces().items()}

    def line_keys(self) -> list[Any]:
        return list(self.rows) if self.kind == "rows" else list(self.sweep.grid[self.index])

    def column_keys(self) -> list[Any]:
        return list(self.sweep.grid[self.across]) if self.across else list(self.columns)

    def mirrored(self) -> tuple[str, str] | None:
        """The symmetric axes of the search space when they are this table's two knobs (mirror cells)."""
        pair = self.sweep.symmetric
        return pair if self.across and pair and sorted(pair) == sorted([self.index, self.across]) else None


def load_yaml(path: Path) -> Any:
    return read_yaml(path.read_text(encoding="utf-8"))


def search_space(relative: str, project: Path, fail: Callable[[str], TableSpecError]) -> SweepSpec:
    """The search space at ``relative`` (from ``project``), as the sweep engine reads it."""
    path = (project / relative).resolve()
    if not path.is_file():
        raise fail(f"search space {relative} not found")
    try:
        return load_spec(path, check_environment=False)
    except SpecError as error:
        raise fail(f"search space {relative}: {'; '.join(error.problems)}") from None


def line_rows(line: Any, parts: Mapping[str, Mapping[str, str]]) -> tuple[Any, ...]:
    """The search-space rows a rows table's line shows: its own, or, for a line drawn from several rows
    (``parts``), theirs, each once."""
    return tuple(dict.fromkeys(parts[line].values())) if line in parts else (line,)


COMPOSED_AVERAGE = ("STS-B", "SICK-R", "STS12", "STS13", "STS14", "STS15", "STS16")
"""The columns a composed line's Avg is the mean of, as each trial's Avg is of its seven test sets."""


def _parse_rows(raw_rows: Sequence[Any], columns: Sequence[str], project: Path, fail) -> tuple[tuple, dict, dict]:
    """A rows table's lines: names of the main search space's rows, ``{row: NAME, spec: PATH}`` for a
    row of another search space (SCT Table 4's augmentation rows live in three specs), or ``{line: NAME, columns:
    {COLUMN: ROW}}`` for a line whose every column but Avg and Delta comes from a row of the main search space."""
    names, row_sweeps, parts = [], {}, {}
    for item in raw_rows:
        if isinstance(item, Mapping) and set(item) == {"line", "columns"}:
            parts[item["line"]] = _parts(item["line"], item["columns"], columns, fail)
            names.append(item["line"])
        elif isinstance(item, Mapping):
            if set(item) != {"row", "spec"}:
                raise fail(f"a row from another search space is {{row: NAME, spec: PATH}} and a line from several "
                           f"rows {{line: NAME, columns: {{COLUMN: ROW}}}}, got {dict(item)}")
            row_sweeps[item["row"]] = (item["spec"], search_space(item["spec"], project, fail))
            names.append(item["row"])
        else:
            names.append(item)
    return tuple(names), row_sweeps, parts


def _parts(line: str, raw: Any, columns: Sequence[str], fail) -> dict[str, str]:
    """A composed line's column -> row: every column of the table but Avg and Delta, which are computed."""
    computed = {"Avg", DELTA}
    wanted = [c for c in columns if c not in computed]
    if not isinstance(raw, Mapping) or sorted(raw) != sorted(wanted):
        raise fail(f"line {line!r} draws each column from a row: its columns must be {wanted} (Avg and Delta are "
                   f"computed), got {sorted(raw) if isinstance(raw, Mapping) else raw!r}")
    if "Avg" in columns and not set(COMPOSED_AVERAGE) <= set(raw):
        raise fail(f"line {line!r} shows Avg, the mean of {list(COMPOSED_AVERAGE)}: it needs each of them")
    return dict(raw)


def _check_lines(raw: Mapping[str, Any], sweep: SweepSpec, rows: tuple[str, ...], row_sweeps: Mapping,
                 parts: Mapping, fail: Callable[[str], TableSpecError]) -> None:
    """A rows table's rows exist and pool no grid points; a grid table's knobs are its sweep's grid."""
    index, across, metric, columns = raw.get("index"), raw.get("across"), raw.get("metric"), raw.get("columns")
    if raw["kind"] == "rows":
        if not rows or not columns:
            raise fail("a rows table needs 'rows' and 'columns'")
        for path, source in [(raw["spec"], sweep), *row_sweeps.values()]:
            source_rows = [r.name for r in source.rows]
            shown = dict.fromkeys(row for line in rows for row in line_rows(line, parts))
            stray = [r for r in shown if row_sweeps.get(r, (raw["spec"],))[0] == path and r not in source_rows]
            if stray:
                raise fail(f"rows {stray} are not rows of {path} ({source_rows})")
            if source.grid:
                raise fail(f"{path} has a grid: a row's cells would pool its grid points")
        return
    if across and (metric not in COLUMNS or columns):
        raise fail("a two-knob grid shows one 'metric' (a column name) and no 'columns'")
    if not across and not columns:
        raise fail("a one-knob grid needs 'columns'")
    knobs = [k for k in (index, across) if k]
    if sorted(knobs) != sorted(sweep.grid):
        # Otherwise a cell would pool trials of different grid points.
        raise fail(f"index/across {knobs} must be the grid knobs of {raw['spec']} ({sorted(sweep.grid)})")


def parse_table_spec(name: str, raw: Mapping[str, Any], project: Path = PROJECT) -> TableSpec:
    """One entry of table_specs.yaml, checked against its search space."""
    def fail(message: str) -> TableSpecError:
        return TableSpecError(f"table {name!r}: {message}")

    unknown = set(raw) - SPEC_KEYS
    if unknown:
        raise fail(f"unknown keys {sorted(unknown)}; expected some of {sorted(SPEC_KEYS)}")
    if raw.get("kind") not in ("rows", "grid"):
        raise fail(f"kind must be 'rows' or 'grid', got {raw.get('kind')!r}")
    if "spec" not in raw:
        raise fail("needs 'spec', the search space that fills it")
    sweep = search_space(raw["spec"], project, fail)
    columns = tuple(raw.get("columns") or ())
    for column in columns:
        if column not in COLUMNS and column != DELTA:
            raise fail(f"unknown column {column!r}; known: {sorted(COLUMNS) + [DELTA]}")
    delta = None
    if DELTA in columns:
        if (not isinstance(raw.get("delta"), Mapping) or not {"of", "from"} <= set(raw["delta"])
                or set(raw["delta"]) - {"of", "from", "rows"} or not isinstance(raw["delta"].get("rows", {}), Mapping)):
            raise fail("a Delta column needs delta: {of: COLUMN, from: LINE, rows: {LINE: ITS REFERENCE LINE}?}")
        delta = (raw["delta"]["of"], raw["delta"]["from"])
    rows, row_sweeps, parts = _parse_rows(raw.get("rows") or (), columns, project, fail)
    _check_lines(raw, sweep, rows, row_sweeps, parts, fail)
    if delta and delta[0] not in columns:
        raise fail(f"delta.of {delta[0]!r} is not one of the columns")
    spec = TableSpec(
        name=name, title=str(raw.get("title", name)), kind=raw["kind"], spec_file=raw["spec"], sweep=sweep,
        columns=columns, rows=rows, index=raw.get("index"), across=raw.get("across"), metric=raw.get("metric"),
        delta=delta, paper=_paper_source(raw.get("paper"), fail), row_sweeps=row_sweeps, parts=parts,
        delta_from=dict((raw.get("delta") or {}).get("rows") or {}),
    )
    if spec.kind == "rows":
        spec = dataclasses.replace(spec, reference=_table_reference(spec, fail))
    if delta and delta[1] not in spec.line_keys():
        raise fail(f"delta.from {delta[1]!r} is not one of the table's lines")
    stray = [line for pair in spec.delta_from.items() for line in pair if line not in spec.line_keys()]
    if stray:
        raise fail(f"delta.rows names {stray}, not lines of the table")
    return spec


def _table_reference(table: TableSpec, fail: Callable[[str], TableSpecError]) -> Reference | None:
    """The one reference row of a rows table's search spaces (None: its one search space names none): rows
    drawn from several search spaces must be measured against the same row, or against rows of their own that
    resolve to one config (the same trial: SG-BERT Table 1's 'SG-OPT' and the 'Contrastive (SG-OPT)' of Table 7's
    spec, which Table 1's BT row is measured against); the table's own search space's then. Every shipped table
    has one (tests/test_row_contracts.py)."""
    sources = table.search_spaces()
    if len(table.rows) < 2 or (len(sources) == 1 and table.sweep.reference is None):
        return table.sweep.reference
    found: dict[tuple, Reference] = {}
    configs = []
    for path, source in sources.items():
        if source.reference is None:
            raise fail(f"{path} names no reference row: the table's rows come from several search spaces, so "
                       "each must name the one they are measured against (its `reference:` key, and each row's "
                       "`changes:`)")
        found.setdefault((source.reference.spec or source.path, source.reference.row), source.reference)
        configs.append(None if source.reference.spec else source.row_config(source.reference.row))
    if len(found) > 1 and (None in configs or any(config != configs[0] for config in configs)):
        named = ", ".join(f"{row!r} of {Path(where).name}" for where, row in found)
        raise fail(f"its search spaces name different reference rows ({named}): its rows must be measured against one")
    return next(iter(found.values()))


def _paper_source(raw: Mapping[str, Any] | None, fail) -> PaperSource | None:
    if raw is None:
        return None
    unknown = set(raw) - {"paper", "table", "model", "rows", "columns"}
    if unknown or not {"paper", "table"} <= set(raw):
        raise fail(f"paper needs paper and table (and optionally model, rows, columns), got {sorted(raw)}")
    return PaperSource(raw["paper"], raw["table"], raw.get("model"), dict(raw.get("rows") or {}),
                       dict(raw.get("columns") or {}))


def table_deviations(table: TableSpec, ledger: Mapping[str, SpecLedger]) -> tuple[str, ...] | None:
    """The ledger's declared deviations of the lines ``table`` shows (None: a spec without a record)."""
    found = []
    for path, sweep in table.search_spaces().items():
        record = ledger.get(sweep.path.name)
        if record is None:
            return None
        found += declared(sweep, record, table.shown_rows(path) if table.kind == "rows" else None)
    rows = [row for line in table.rows for row in table.sweep_rows(line)]
    return tuple(deviation_notes(found, rows if table.kind == "rows" else lines_of(table.sweep)))


@dataclass(frozen=True)
class PerColumn:
    """A composed line's regime knob whose value differs between its columns' rows."""

    values: tuple[Any, ...]

    def __repr__(self) -> str:
        return f"one per column ({', '.join(map(repr, self.values))})"


def _one_or_each(values: Sequence[Any]) -> Any:
    """The value of a composed line's rows where they agree, else each distinct value (:class:`PerColumn`)."""
    distinct = list({repr(value): value for value in values}.values())
    return distinct[0] if len(distinct) == 1 else PerColumn(tuple(distinct))


def regime_note(table: TableSpec) -> str:
    """Where a rows table's trained rows of different methods train different regimes
    (:func:`sweep.spec.contracts.regime`): each such knob and its values, with the rows of each (``sweep plan`` names
    each value's source)."""
    if table.kind != "rows":
        return ""
    regimes, methods = {}, {}
    for line in table.rows:
        _, sweep = table.sweep_of(line)
        rows = table.sweep_rows(line)
        found = [regime(sweep.row_config(row), sweep.method_of(row)) for row in rows]
        if all(found) and len({sweep.method_of(row).name for row in rows}) == 1:
            regimes[line] = {knob: _one_or_each([f[knob] for f in found]) for knob in found[0]}
            methods[line] = sweep.method_of(rows[0]).name
    parts = []
    for knob in (TRAINING_DATA, *REGIME_KNOBS, VIEWS):
        if not any(regimes[a][knob] != regimes[b][knob] and methods[a] != methods[b] for a in regimes for b in regimes):
            continue
        by_value: dict[str, list[str]] = {}
        for line, found in regimes.items():
            by_value.setdefault(repr(found[knob]), []).append(line)
        most = max(by_value.values(), key=len)
        parts.append(f"{knob} " + ", ".join(
            f"{value} ({'the other trained rows' if rows is most and len(rows) > 2 else ', '.join(rows)})"
            for value, rows in by_value.items()))
    if not parts:
        return ""
    return "Rows of different methods train at their own papers' settings (sweep plan names each source): " + \
        "; ".join(parts)


def load_table_specs(path: Path = TABLE_SPECS, project: Path = PROJECT) -> dict[str, TableSpec]:
    """Every table spec, its caption naming the ledger's deviations of its rows."""
    ledger = load_ledger()
    tables = {name: parse_table_spec(name, raw, project) for name, raw in load_yaml(path).items()}
    return {name: dataclasses.replace(table, regimes=regime_note(table), deviations=table_deviations(table, ledger))
            for name, table in tables.items()}
