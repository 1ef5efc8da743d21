"""``python -m sweep settings SPEC``: every knob of each row beside its paper's value and that value's source,
read from the settings ledger (:mod:`sweep.spec.ledger`), each difference marked with its declaration.

``sweep plan`` prints the differences alone; this prints what a row trains at in full, so a reader can check a
row against its paper knob by knob without opening the ledger."""

from __future__ import annotations

from typing import Any, Sequence

from sweep.spec.ledger import LEDGER_NAME, SpecLedger, ledger_mismatches, load_ledger, row_configs, rows_on_model
from sweep.spec.problems import SpecError
from sweep.spec.sweep_spec import SweepSpec

MARKS = {"same": " ", "declared": "~", "undeclared": "!"}
"""How a knob's line begins: at the paper's value, a declared deviation, an undeclared one."""


def settings_lines(spec: SweepSpec, rows: Sequence[str] = ()) -> list[str]:
    """Each row's knobs (``rows``: only these, by the ledger's key), one line each: mark, knob, ours, the paper's,
    its source (and the deviation's kind and reason); knobs that are no paper's setting last, with why."""
    ledger = load_ledger()
    record = ledger.get(spec.path.name)
    if record is None:
        raise SpecError([f"{spec.path}: no record in {LEDGER_NAME}: it fills no paper's table, so there is no "
                         f"paper's setting to show (`sweep plan` prints its rows)"])
    lines = row_configs(spec)
    known = [str(line) for line, _, _ in lines]
    unknown = [row for row in rows if row not in known]
    if unknown:
        raise SpecError([f"{spec.path}: --row {unknown[0]!r} is no row of the spec; its rows: {known}"])
    found, _ = ledger_mismatches(spec, record)
    out = [f"{spec.path.name} ({record.paper}), knob by knob: '{MARKS['declared']}' a declared deviation, "
           f"'{MARKS['undeclared']}' an undeclared one ({LEDGER_NAME})"]
    for line, config, method in lines:
        if rows and str(line) not in rows:
            continue
        deviations = {m.knob: m for m in found if m.row == line}
        out.append(f"row {line!r} ({method.name}):")
        out += [_knob_line(knob, config[knob], record, line, deviations, ledger)
                for knob in method.all_knobs.names
                if knob in config and knob in record.settings[line] and knob not in spec.grid]
        out += [f"  {MARKS['same']} {knob}: {config[knob]!r} (no paper's setting: {record.not_settings[knob]})"
                for knob in method.all_knobs.names if knob in config and knob in record.not_settings]
    return out


def _knob_line(knob: str, ours: Any, record: SpecLedger, line: Any, deviations: dict[str, Any],
               ledger: dict[str, SpecLedger]) -> str:
    paper = record.settings[line][knob]
    mismatch = deviations.get(knob)
    if mismatch is None:
        return f"  {MARKS['same']} {knob}: {ours!r} ({paper.source})"
    if mismatch.deviation is None:
        return (f"  {MARKS['undeclared']} {knob}: {ours!r}, the paper's {paper.value!r} ({paper.source}): undeclared"
                f"{rows_on_model(mismatch, record, ledger)}")
    return (f"  {MARKS['declared']} {knob}: {ours!r}, the paper's {paper.value!r} ({paper.source}); "
            f"{mismatch.deviation.kind}: {mismatch.deviation.reason}")
