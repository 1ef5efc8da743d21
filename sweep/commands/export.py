"""``python -m sweep export NAME``: a trial's encoder (by default the best) written as a sentence-transformers
folder with a model card (:mod:`sweep.run.models`)."""

from __future__ import annotations

from pathlib import Path

from results.reader import run_identity, trial_tags
from sweep.run.models import chosen_trial, export_trial
from trainers.metrics import Metric


def export_command(name: str, tracking_uri: str, out: str, row: str | None, seed: int | None,
                   trial: str | None) -> None:
    """`python -m sweep export NAME`: the trial asked for (by default the best) written to `out`."""
    run = chosen_trial(name, tracking_uri, row, seed, trial)
    folder = export_trial(run, Path(out))
    metrics, identity = run.data.metrics, run_identity(run)
    print(f"exported trial {trial_tags(run).trial_id} (row {identity.row!r}, seed {identity.seed}, "
          f"best dev {metrics.get(Metric.BEST_DEV, float('nan')):.2f}, test avg "
          f"{metrics.get(Metric.TEST_AVG, float('nan')):.2f}) to {folder}")
