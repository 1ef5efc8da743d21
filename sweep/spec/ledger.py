"""The settings ledger (``sweep/spec/paper_ledger.yaml``): for every row of every spec that fills a paper's table or
figure, the settings the paper states (where it is silent, what the authors' script uses), each citing its source,
and every way our resolved configs differ from them, declared as a deviation of one kind (:data:`KINDS`).

A record is keyed by the spec's file name and holds ``settings`` (every row's, ``knob: [value, source]``), ``rows``
(one record per row: the settings in which that paper row differs, or ``not_in_paper: why`` for a row of ours) and
``deviations`` (``{knob, ours, kind, reason, rows?}``: our value it declares, so that a row that comes to
another value is undeclared again). :func:`ledger_mismatches` resolves each row as the sweep does and
compares it with the ledger; :func:`ledger_problems` says which mismatches nobody declared (naming the spec, the
row, the knob, both values and the source), which declarations no row needs, which rows have no record, and
which knob of a row the ledger neither sets nor excuses (:data:`NOT_SETTINGS`): every knob that can change a number
a row reports is traced to the paper or its authors' code, so none stays at a method default unread.
Captions (``reports.table_specs``) and ``sweep plan`` print the declared deviations (:func:`deviation_notes`), so
what differs from the paper is written once, here, and rendered everywhere from it.

A row whose settings name its ``method`` takes only the table's model from the spec's settings. A knob of the
ledger that the row's method does not have (a training knob of an untuned row) is not compared: it
does not apply to that row. The axes of a spec's grid are the figure's lines, not a setting, and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sweep.spec.problems import SpecError
from sweep.spec.source import read_yaml

if TYPE_CHECKING:
    from sweep.spec.sweep_spec import SweepSpec

LEDGER = Path(__file__).resolve().parent / "paper_ledger.yaml"
LEDGER_NAME = "sweep/spec/paper_ledger.yaml"
"""How captions and messages name the ledger."""
KINDS = {
    "forced": "forced here: no hub model or data",
    "budget": "a budget",
    "open": "a choice the paper leaves open",
}
"""The kinds of deviation a ledger may declare (captions and plans name the kind) and what each means."""
RECORD_KEYS = {"paper", "settings", "rows", "deviations"}
EVERY_SPEC = "every_spec"
"""The ledger's section of ``settings`` and ``deviations`` that hold for every spec's record (the authors' fp32
evaluation, say): written once, part of each record as if written there, every row's (a row that names its own
method too); such a deviation is printed wherever a row comes to it and is no problem where none does."""
NOT_SETTINGS = "not_settings"
"""The :data:`EVERY_SPEC` section of knobs that are no paper's setting (where a trial runs, its seed: the spec's
``seeds``), ``knob: why``: the only knobs, beside bookkeeping ones (:attr:`trainers.knobs.Knob.bookkeeping`), a row
may leave out of its settings."""
EVERY_SPEC_KEYS = {"settings", "deviations", NOT_SETTINGS}
ROW_KEYS = {"settings", "not_in_paper"}
TABLE_KNOBS = ("model", "model_layers")
"""What a row that names its own ``method`` (a competitor at its own paper's settings) takes from the spec's
settings, which are the reference method's: the table's model."""
DEVIATION_KEYS = {"knob", "ours", "kind", "reason", "rows"}


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str


@dataclass(frozen=True)
class Deviation:
    knob: str
    ours: Any
    """Our value it declares: a row that comes to another is an undeclared difference again."""
    kind: str
    reason: str
    rows: tuple[str, ...] | None = None
    """The rows it is declared for (None: every row of the spec)."""
    everywhere: bool = False
    """Declared in :data:`EVERY_SPEC`, for every spec: a spec none of whose rows needs it is no problem."""

    def covers(self, row: Any, ours: Any) -> bool:
        return (self.rows is None or row in self.rows) and ours == self.ours


@dataclass(frozen=True)
class SpecLedger:
    spec: str
    paper: str
    settings: Mapping[str, Mapping[str, Setting]]
    """Each row -> knob -> the paper's setting (the spec's settings, the row's own over them)."""
    not_in_paper: Mapping[str, str]
    deviations: tuple[Deviation, ...]
    not_settings: Mapping[str, str]
    """Knob -> why it is no setting of any paper (:data:`NOT_SETTINGS`)."""
    shared: frozenset[str]
    """The knobs of the :data:`EVERY_SPEC` settings: compared where a row's method has them, no problem where not."""


@dataclass(frozen=True)
class Mismatch:
    spec: str
    row: str
    knob: str
    ours: Any
    paper: Setting
    deviation: Deviation | None

    def describe(self) -> str:
        return (f"{self.spec}, row {self.row!r}, knob {self.knob}: ours {self.ours!r}, the paper's "
                f"{self.paper.value!r} ({self.paper.source})")


def _setting(where: str, raw: Any) -> Setting:
    if not (isinstance(raw, list) and len(raw) == 2 and isinstance(raw[1], str) and raw[1]):
        raise SpecError([f"{LEDGER}: {where}: expected [value, source], got {raw!r}"])
    return Setting(raw[0], raw[1])


def _settings(where: str, raw: Any) -> dict[str, Setting]:
    if not isinstance(raw, Mapping):
        raise SpecError([f"{LEDGER}: {where}: expected a mapping of knob -> [value, source], got {raw!r}"])
    return {knob: _setting(f"{where}.{knob}", value) for knob, value in raw.items()}


def _deviations(where: str, raw: Any, everywhere: bool = False) -> list[Deviation]:
    deviations = []
    for index, item in enumerate(raw or []):
        if (not isinstance(item, Mapping) or set(item) - DEVIATION_KEYS
                or not {"knob", "ours", "kind", "reason"} <= set(item) or item["kind"] not in KINDS
                or not str(item["reason"]).strip()):
            raise SpecError([f"{LEDGER}: {where}[{index}]: expected {{knob, ours, kind: {'|'.join(KINDS)}, reason, "
                             f"rows?}}, got {item!r}"])
        rows = item.get("rows")
        deviations.append(Deviation(item["knob"], item["ours"], item["kind"], str(item["reason"]),
                                    tuple(rows) if rows is not None else None, everywhere))
    return deviations


def _record(spec: str, raw: Any, shared: Mapping[str, Setting], everywhere: list[Deviation],
            not_settings: Mapping[str, str]) -> SpecLedger:
    """A spec's record, with the ledger's :data:`EVERY_SPEC` settings (``shared``) and deviations in it."""
    if not isinstance(raw, Mapping) or set(raw) - RECORD_KEYS or "rows" not in raw:
        raise SpecError([f"{LEDGER}: {spec}: expected {{{', '.join(sorted(RECORD_KEYS))}}}, got {raw!r}"])
    own_settings = _settings(f"{spec}.settings", raw.get("settings") or {})
    common = {**own_settings, **{k: v for k, v in shared.items() if k not in own_settings}}  # shared last
    settings, not_in_paper = {}, {}
    for row, record in (raw["rows"] or {}).items():
        record = record or {}
        if not isinstance(record, Mapping) or set(record) - ROW_KEYS:
            raise SpecError([f"{LEDGER}: {spec}.rows.{row}: expected {{settings, not_in_paper}}, got {record!r}"])
        own = _settings(f"{spec}.rows.{row}.settings", record.get("settings") or {})
        inherited = ({**{k: v for k, v in common.items() if k in TABLE_KNOBS}, **shared} if "method" in own
                     else common)
        settings[row] = {**inherited, **own}
        if "not_in_paper" in record:
            not_in_paper[row] = str(record["not_in_paper"])
    deviations = _deviations(f"{spec}.deviations", raw.get("deviations")) + everywhere
    return SpecLedger(spec, str(raw.get("paper", "")), settings, not_in_paper, tuple(deviations), not_settings,
                      frozenset(shared))


def load_ledger(path: Path = LEDGER) -> dict[str, SpecLedger]:
    """Every spec's record, keyed by the spec's file name, with the :data:`EVERY_SPEC` section in each."""
    raw = read_yaml(path.read_text(encoding="utf-8"))
    every = raw.get(EVERY_SPEC) or {}
    if not isinstance(every, Mapping) or set(every) - EVERY_SPEC_KEYS:
        raise SpecError([f"{LEDGER}: {EVERY_SPEC}: expected {{{', '.join(sorted(EVERY_SPEC_KEYS))}}}, got {every!r}"])
    shared = _settings(f"{EVERY_SPEC}.settings", every.get("settings") or {})
    everywhere = _deviations(f"{EVERY_SPEC}.deviations", every.get("deviations"), everywhere=True)
    not_settings = every.get(NOT_SETTINGS) or {}
    if not isinstance(not_settings, Mapping) or not all(isinstance(why, str) and why for why in not_settings.values()):
        raise SpecError([f"{LEDGER}: {EVERY_SPEC}.{NOT_SETTINGS}: expected a mapping of knob -> why it is no "
                         f"paper's setting, got {not_settings!r}"])
    return {spec: _record(spec, record, shared, everywhere, not_settings)
            for spec, record in (raw.get("specs") or {}).items()}


def row_configs(spec: SweepSpec) -> list[tuple[Any, Mapping[str, Any], Any]]:
    """(line as the ledger keys it, resolved config, method) of each distinct trial of the spec: a row's first
    trial, keyed by the row's name; for a spec of one row and a grid, each grid point's, keyed by its value on the
    first grid axis (the figure's lines)."""
    by_axis = bool(spec.grid) and len(spec.rows) == 1
    axis = next(iter(spec.grid)) if by_axis else None
    return [(trial.point.axes[axis] if by_axis else trial.point.row, trial.config, spec.method_of(trial.point.row))
            for trial in spec.distinct_trials()]


def ledger_mismatches(spec: SweepSpec, record: SpecLedger) -> tuple[list[Mismatch], list[str]]:
    """Every knob in which a row of ``spec`` (resolved) differs from its ledger record, with the deviation that
    declares it (None: undeclared); and the problems of the record itself (a row without one, a record of no row,
    a knob no row's method has)."""
    problems, found = [], []
    lines = row_configs(spec)
    name = spec.path.name
    methods = [method for _, _, method in lines]
    for line, config, method in lines:
        if line not in record.settings:
            problems.append(f"{name}: row {line!r} has no record in {LEDGER_NAME}")
            continue
        for knob, paper in record.settings[line].items():
            if knob in spec.grid:
                continue  # the figure's lines
            if knob not in config:
                if knob in record.shared or any(knob in m.all_knobs for m in methods):
                    continue  # every spec's setting, or a knob of the spec's other methods: not this row's
                problems.append(f"{name}: row {line!r}: the ledger's knob {knob!r} is no knob of its method "
                                f"{method.name!r}")
                continue
            if config[knob] != paper.value:
                declared = next((d for d in record.deviations if d.knob == knob and d.covers(line, config[knob])),
                                None)
                mismatch = Mismatch(name, line, knob, config[knob], paper, declared)
                if mismatch not in found:
                    found.append(mismatch)
        problems += _untraced(name, line, config, method, record.settings[line], record.not_settings, spec.grid)
    keys = {line for line, _, _ in lines}
    problems += [f"{name}: the ledger's row {row!r} is no row of the spec"
                 for row in record.settings if row not in keys]
    for deviation in record.deviations:
        if not deviation.everywhere and not any(m.deviation is deviation for m in found):
            problems.append(f"{name}: a deviation in {deviation.knob} is declared ({deviation.kind}) but no row "
                            f"{'of ' + str(list(deviation.rows)) + ' ' if deviation.rows else ''}differs there")
    return found, problems


def _untraced(name: str, line: Any, config: Mapping[str, Any], method: Any, settings: Mapping[str, Setting],
              not_settings: Mapping[str, str], grid: Mapping[str, Any]) -> list[str]:
    """A problem for each knob of the row's method that may change its numbers (no bookkeeping one) and that its
    settings leave out, unless :data:`NOT_SETTINGS` excuses it or it is the figure's grid axis."""
    traced = set(settings) | set(not_settings) | set(grid) | method.all_knobs.bookkeeping
    return [f"{name}: row {line!r}: knob {knob!r} (ours {config[knob]!r}) is in none of the row's settings in "
            f"{LEDGER_NAME}: add the paper's value (where it is silent, its authors' code's) with its source, or "
            f"list it under {EVERY_SPEC}.{NOT_SETTINGS} with why it is no paper's setting"
            for knob in config if knob not in traced and knob in method.all_knobs]


def ledger_problems(spec: SweepSpec, record: SpecLedger | None, tables: Sequence[str] = ()) -> list[str]:
    """What is wrong between ``spec`` and its record, each prefixed by the ``tables`` it fills: each undeclared
    mismatch (spec, row, knob, both values, source), each record problem; a spec without a record."""
    where = f"table {', '.join(repr(t) for t in tables)}: " if tables else ""
    if record is None:
        return [f"{where}{spec.path.name}: no record in {LEDGER_NAME}"]
    found, problems = ledger_mismatches(spec, record)
    undeclared = [f"{where}{mismatch.describe()}: undeclared{_declared_otherwise(record, mismatch)}; declare it in "
                  f"{LEDGER_NAME} (forced | budget | open, with its reason) or set the paper's value"
                  for mismatch in found if mismatch.deviation is None]
    return undeclared + [where + problem for problem in problems]


def _declared_otherwise(record: SpecLedger, mismatch: Mismatch) -> str:
    """Where the ledger declares the knob for this row with another value of ours: that value."""
    other = [d for d in record.deviations if d.knob == mismatch.knob and (d.rows is None or mismatch.row in d.rows)]
    return f" (the ledger declares ours {other[0].ours!r})" if other else ""


def rows_on_model(mismatch: Mismatch, record: SpecLedger, ledger: Mapping[str, SpecLedger]) -> str:
    """For a row run on another model than its paper's: the specs whose rows the ledger records on that model for
    the same paper (ConSERT's BERT-large rows are consert_large.yaml's, at its large scripts' settings), if any."""
    if mismatch.knob != "model":
        return ""
    specs = sorted(name for name, other in ledger.items() if other.paper == record.paper and name != record.spec
                   and any("model" in row and row["model"].value == mismatch.ours for row in other.settings.values()))
    return f"; the paper's rows on {mismatch.ours!r}: {', '.join(specs)}" if specs else ""


def declared(spec: SweepSpec, record: SpecLedger, rows: Sequence[Any] | None = None) -> list[Mismatch]:
    """The declared mismatches of ``rows`` of ``spec`` (all by default)."""
    found, _ = ledger_mismatches(spec, record)
    return [m for m in found if m.deviation is not None and (rows is None or m.row in rows)]


def lines_of(spec: SweepSpec) -> list[Any]:
    """The spec's lines as the ledger keys them, in order."""
    return list(dict.fromkeys(line for line, _, _ in row_configs(spec)))


def deviation_notes(mismatches: Sequence[Mismatch], every: Sequence[Any]) -> list[str]:
    """One phrase per declared deviation (the same knob, kind and reason in several specs: one phrase): the knob,
    our values, the paper's, the kind and the reason; the rows named when not all of ``every`` deviate."""
    groups: dict[tuple[str, str, str], list[Mismatch]] = {}
    for mismatch in mismatches:
        deviation = mismatch.deviation
        groups.setdefault((deviation.knob, deviation.kind, deviation.reason), []).append(mismatch)
    notes = []
    for (knob, kind, reason), hits in groups.items():
        ours = " / ".join(dict.fromkeys(repr(m.ours) for m in hits))
        paper = " / ".join(dict.fromkeys(repr(m.paper.value) for m in hits))
        lines = _rows_phrase(list(dict.fromkeys(m.row for m in hits)), every)
        notes.append(f"{knob}{lines}: ours {ours}, paper {paper} ({kind}: {reason})")
    return notes


def _rows_phrase(hit: list[Any], every: Sequence[Any]) -> str:
    """'' when ``hit`` is every row, else the rows (or the one row it leaves out of many)."""
    rest = [row for row in every if row not in hit]
    if not rest:
        return ""
    if len(rest) == 1 and len(hit) > 2:
        return f" [every row but {', '.join(repr(r) for r in rest)}]"
    return f" [{', '.join(repr(r) for r in hit)}]"
