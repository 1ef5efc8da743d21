"""What a valid spec needs that this machine may lack (a model, data files, the hub), asked of each
method for every trial the spec runs, each problem said once and attributed to ``--set``, every row, or
the rows it holds for."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any, Mapping

from sweep.spec.resources import gpu_problem
from sweep.spec.search import SEARCH_ALGORITHMS, SEARCH_EXTRA
from trainers.data.glue_tasks import GLUE
from trainers.knobs import Problem
from trainers.metrics import Glue, SuiteName
from trainers.suites import SUITES

if TYPE_CHECKING:
    from sweep.spec.sweep_spec import SweepSpec


def environment_problems(spec: SweepSpec, overrides: Mapping[str, Any], address: str | None = None) -> list[str]:
    """Ask each row's method what this machine lacks for the trials the spec runs (their configs were
    resolved once, at load); seeds and samples cannot change that, so each row and grid point is asked
    once. Each problem is said once (:func:`attribute`)."""
    rows_with: dict[str, list[str]] = {}
    for trial in spec.distinct_trials():
        for problem in spec.method_of(trial.point.row).environment_problems(trial.config):
            holds_for(rows_with, problem, trial.point.row)
    said = attribute(spec, rows_with, overrides)
    problem = cluster_gpu_problem(spec, address)
    return said + ([f"{spec.path}: {problem}"] if problem else []) + suite_problems(spec) + search_problems(spec)


def search_problems(spec: SweepSpec) -> list[str]:
    """The modules the spec's searcher needs that are not installed (the ``search`` extra)."""
    if spec.search is None:
        return []
    algorithm = spec.search.algorithm
    missing = [name for name in SEARCH_ALGORITHMS[algorithm] if importlib.util.find_spec(name) is None]
    return [f"{spec.path}: search.algorithm: {algorithm} needs {', '.join(missing)}, not installed: "
            f"{SEARCH_EXTRA}"] if missing else []


def local_gpus() -> int:
    """GPUs of this machine (what a local Ray gives its trials); torch is imported only when a spec asks."""
    import torch

    return torch.cuda.device_count()


def cluster_gpu_problem(spec: SweepSpec, address: str | None = None) -> str | None:
    """A fractional (or whole) GPU per trial that ``max_concurrent_trials`` and this machine's GPUs cannot
    honour. Not asked for a cluster the sweep joins (``--address`` or $RAY_ADDRESS): its GPUs are not known
    here."""
    if spec.resources.gpu <= 0 or address or os.environ.get("RAY_ADDRESS"):
        return None
    return gpu_problem(spec.resources.gpu, spec.max_concurrent_trials, local_gpus())


def suite_problems(spec: SweepSpec) -> list[str]:
    """Each chosen evaluation suite, and GLUE for a GLUE spec, whose data this machine lacks (its folder is
    read here, at plan time)."""
    problems = []
    for entry in spec.evaluations:
        if problem := SUITES[entry["suite"]].data_problem():  # STS's: the methods' environment checks
            problems.append(f"{spec.path}: {SuiteName.KEY}: {entry['suite']}: {problem}")
    if spec.glue is not None and (problem := GLUE.data_problem(spec.glue[Glue.TASKS_KEY])):
        problems.append(f"{spec.path}: {Glue.KEY}: GLUE {problem}")
    return problems


def holds_for(rows_with: dict[Problem, list[str]], problem: Problem, row: str) -> None:
    """Record that ``problem`` holds for ``row`` (each row once, in the order found), for :func:`attribute`."""
    rows = rows_with.setdefault(problem, [])
    if row not in rows:
        rows.append(row)


def attribute(spec: SweepSpec, rows_with: Mapping[Problem, list[str]], overrides: Mapping[str, Any]) -> list[str]:
    """Problems -> the rows they hold for, each said once: against ``--set`` when the knob's value came from
    there, as "every row" when all rows share it, else naming its rows."""
    said = []
    for message, rows in rows_with.items():
        knob = message.key
        if knob in overrides and not any(knob in spec.row(name).overrides for name in rows):
            said.append(f"--set {knob}={overrides[knob]}: {message.message}")
        elif len(spec.rows) > 1 and len(rows) == len(spec.rows):
            said.append(f"{spec.path}: every row: {message}")
        elif rows == [""]:  # a spec without rows
            said.append(f"{spec.path}: {message}")
        else:
            said.append(f"{spec.path}: rows[{', '.join(map(repr, rows))}]: {message}")
    return said
