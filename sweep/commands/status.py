"""``python -m sweep status NAME``: one line per trial from the MLflow store (no torch: it answers at once)."""

from __future__ import annotations

from results.reader import run_identity, trial_tags
from results.record import ModelState, axes_text
from results.schema import FINISHED
from sweep.run.models import export_refusal, trial_runs
from trainers.metrics import Metric


def exportable(run) -> str:
    """Whether ``sweep export`` can write this trial's encoder: yes, no, or why not."""
    tags = trial_tags(run)
    if run.info.status != FINISHED or not tags.checkpoint:
        return "no"
    if export_refusal(run_identity(run).knobs):
        return "no (pooling)"
    return {ModelState.DELETED: "deleted", ModelState.UNTRAINED: "yes (untuned)"}.get(tags.model_state or "", "yes")


def trial_rows(name: str, tracking_uri: str) -> list[dict[str, object]]:
    experiment_id, runs = trial_runs(name, tracking_uri)
    rows = []
    for run in runs:
        tags, metrics, identity = trial_tags(run), run.data.metrics, run_identity(run)
        rows.append(
            {
                "state": run.info.status + (" (reused)" if tags.reused_from else ""),
                "row": identity.row or axes_text(identity.axes),
                "seed": str(identity.seed),
                "best_dev": metrics.get(Metric.BEST_DEV),
                "test_avg": metrics.get(Metric.TEST_AVG),
                "trial": tags.trial_id or "",
                "checkpoint": "-" if tags.checkpoint_step is None else str(tags.checkpoint_step),
                "export": exportable(run),
                "run": f"{tracking_uri} experiment {experiment_id} run {run.info.run_id}",
                "parent": tags.parent_run_id or "",
            }
        )
    return rows


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-"


def print_status(name: str, tracking_uri: str) -> None:
    rows = trial_rows(name, tracking_uri)
    width = max([len("row / grid point"), *(len(str(r["row"])) for r in rows)]) + 2
    print(f"{'state':<10}{'row / grid point':<{width}}{'seed':<6}{'best dev':>9}{'test avg':>9}  {'trial':<13}"
          f"{'ckpt step':>9}  {'export':<15}mlflow run")
    for r in rows:
        print(
            f"{r['state']:<10}{str(r['row']):<{width}}{r['seed']:<6}{_number(r['best_dev']):>9}"
            f"{_number(r['test_avg']):>9}  {r['trial']:<13}{r['checkpoint']:>9}  {r['export']:<15}{r['run']}"
        )
    counts = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    print("trials: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())))
