"""``python -m sweep export NAME``: a trial's encoder (by default the best) written as a sentence-transformers
folder with a model card (:mod:`sweep.run.models`)."""

from __future__ import annotations

from pathlib import Path

from results.reader import run_identity
from results.record import Tag, TrialIdentity
from results.schema import FINISHED
from sweep.commands.status import trial_runs
from sweep.run.models import export_trial, select_run
from trainers.metrics import Metric


def finished_runs(name: str, tracking_uri: str) -> list:
    """The finished trial runs of sweep ``name`` (a refusal naming what exists when the sweep is unknown)."""
    _, runs = trial_runs(name, tracking_uri)
    return [run for run in runs if run.info.status == FINISHED]


def chosen_trial(name: str, tracking_uri: str, row: str | None, seed: int | None, trial: str | None):
    """The finished trial of sweep ``name`` asked for, or the best of those that match by the sweep's metric."""
    finished = finished_runs(name, tracking_uri)
    identity = run_identity(finished[0]) if finished else TrialIdentity("", "", 0)  # the spec's metric and mode
    return select_run(finished, identity.metric, identity.mode, row, seed, trial)


def export_command(name: str, tracking_uri: str, out: str, row: str | None, seed: int | None,
                   trial: str | None) -> None:
    """`python -m sweep export NAME`: the trial asked for (by default the best) written to `out`."""
    run = chosen_trial(name, tracking_uri, row, seed, trial)
    folder = export_trial(run, Path(out))
    tags, metrics, identity = run.data.tags, run.data.metrics, run_identity(run)
    print(f"exported trial {tags.get(Tag.TRIAL_ID)} (row {identity.row!r}, seed {identity.seed}, "
          f"best dev {metrics.get(Metric.BEST_DEV, float('nan')):.2f}, test avg "
          f"{metrics.get(Metric.TEST_AVG, float('nan')):.2f}) to {folder}")
