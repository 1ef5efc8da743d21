"""What a valid spec needs that this machine may lack (a model, data files, the hub), asked of each
method for every trial the spec runs, each problem said once and attributed to ``--set``, every row, or
the rows it holds for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from trainers.evaluations import SUITES
from trainers.record import Suite

if TYPE_CHECKING:
    from sweep.spec import SweepSpec


def environment_problems(spec: SweepSpec, overrides: Mapping[str, Any]) -> list[str]:
    """Ask each row's method what this machine lacks for the trials the spec runs (their configs were
    resolved once, at load); seeds and samples cannot change that, so each row and grid point is asked
    once. Each problem is said once (:func:`attribute`)."""
    rows_with: dict[str, list[str]] = {}
    for trial in spec.distinct_trials():
        for problem in spec.method_of(trial.point.row).environment_problems(trial.config):
            holds_for(rows_with, problem, trial.point.row)
    return attribute(spec, rows_with, overrides) + suite_problems(spec)


def suite_problems(spec: SweepSpec) -> list[str]:
    """Each chosen evaluation suite whose data this machine lacks (its folder is read here, at plan time)."""
    problems = []
    for entry in spec.evaluations:
        if entry["suite"] != Suite.STS and (problem := SUITES[entry["suite"]].data_problem()):
            problems.append(f"{spec.path}: {Suite.KEY}: {entry['suite']}: {problem}")
    return problems


def holds_for(rows_with: dict[str, list[str]], message: str, row: str) -> None:
    """Record that ``message`` holds for ``row`` (each row once, in the order found), for :func:`attribute`."""
    rows = rows_with.setdefault(message, [])
    if row not in rows:
        rows.append(row)


def attribute(spec: SweepSpec, rows_with: Mapping[str, list[str]], overrides: Mapping[str, Any]) -> list[str]:
    """Messages (``knob: text``) -> the rows they hold for, each said once: against ``--set`` when the
    knob's value came from there, as "every row" when all rows share it, else naming its rows."""
    said = []
    for message, rows in rows_with.items():
        knob = message.split(":", 1)[0]
        if knob in overrides and not any(knob in spec.row(name).overrides for name in rows):
            said.append(f"--set {knob}={overrides[knob]}: {message.split(':', 1)[1].strip()}")
        elif len(spec.rows) > 1 and len(rows) == len(spec.rows):
            said.append(f"{spec.path}: every row: {message}")
        elif rows == [""]:  # a spec without rows
            said.append(f"{spec.path}: {message}")
        else:
            said.append(f"{spec.path}: rows[{', '.join(map(repr, rows))}]: {message}")
    return said
