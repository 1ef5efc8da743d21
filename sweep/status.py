"""``python -m sweep status NAME`` (one line per trial from the MLflow store) and ``export``."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from sweep.engine import absolute_tracking_uri
from sweep.export import export_trial, select_run

TAG = "sweep."  # TEMP
from sweep.variants import UsageError, split_name


def read_client(tracking_uri: str) -> MlflowClient:
    """A client for reading: refuses a SQLite store that does not exist (MLflow would create it)."""
    uri = absolute_tracking_uri(tracking_uri)
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not Path(uri[len(prefix):]).is_file():
        raise UsageError(f"no MLflow store at {tracking_uri} ({uri[len(prefix):]} does not exist)")
    return MlflowClient(uri)


def choose_parent(client: MlflowClient, text: str, tracking_uri: str):
    """(experiment, parent run) of the sweep variant ``text`` names: NAME when the spec has one variant,
    NAME-HASH (a unique prefix of the spec hash) among several."""
    experiment = client.get_experiment_by_name(text)
    name, prefix = (text, "") if experiment else split_name(text, set())
    experiment = experiment or client.get_experiment_by_name(name)
    if experiment is None:
        raise UsageError(f"no MLflow experiment named {text!r} at {tracking_uri}")
    parents = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{TAG}role` = 'parent'", max_results=1000,
        order_by=["attributes.start_time ASC"],
    )
    found = [p for p in parents if p.data.tags.get(f"{TAG}spec_hash", "").startswith(prefix)]
    if len(found) == 1:
        return experiment, found[0]
    if not found:
        hashes = ", ".join(p.data.tags.get(f"{TAG}spec_hash", "?") for p in parents) or "none: it never ran"
        raise UsageError(f"sweep {name!r} at {tracking_uri} has no variant {text!r} (its spec hashes: {hashes})")
    choices = "\n  ".join(
        f"{name}-{p.data.tags.get(f'{TAG}spec_hash', '')}  ({p.data.tags.get(f'{TAG}options', 'options not recorded')})"
        for p in found
    )
    raise UsageError(f"sweep {name!r} has {len(found)} variants at {tracking_uri}; choose one:\n  {choices}")


def trial_runs(name: str, tracking_uri: str) -> tuple[str, list]:
    """(experiment id, trial runs) of the sweep variant ``name`` names, in the plan's order."""
    client = read_client(tracking_uri)
    experiment, parent = choose_parent(client, name, tracking_uri)
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{TAG}role` = 'trial' and tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent.info.run_id}'",
        max_results=50000,
    )
    return experiment.experiment_id, sorted(runs, key=lambda run: run.data.tags.get(f"{TAG}trial_id", ""))


def exportable(run) -> str:
    """Whether ``sweep export`` can write this trial's encoder: yes, no, or why not."""
    tags = run.data.tags
    if run.info.status != "FINISHED" or not tags.get(f"{TAG}checkpoint"):
        return "no"
    return {"deleted": "deleted", "untrained": "yes (untuned)"}.get(tags.get(f"{TAG}model", ""), "yes")


def export(name: str, tracking_uri: str, out: str, row: str | None, seed: int | None, trial: str | None) -> None:
    _, runs = trial_runs(name, tracking_uri)
    finished = [run for run in runs if run.info.status == "FINISHED"]
    tags = finished[0].data.tags if finished else {}
    metric, mode = tags.get(f"{TAG}metric", "best_dev_spearman max").split()
    run = select_run(finished, metric, mode, row, seed, trial)
    folder = export_trial(run, Path(out))
    tags, metrics = run.data.tags, run.data.metrics
    print(f"exported trial {tags.get(f'{TAG}trial_id')} (row {tags.get(f'{TAG}row')!r}, seed {tags.get(f'{TAG}seed')}, "
          f"best dev {metrics.get('best_dev_spearman', float('nan')):.2f}, test avg "
          f"{metrics.get('test_avg_spearman', float('nan')):.2f}) to {folder}")


def trial_rows(name: str, tracking_uri: str) -> list[dict[str, object]]:
    experiment_id, runs = trial_runs(name, tracking_uri)
    rows = []
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        rows.append(
            {
                "state": run.info.status,
                "row": tags.get(f"{TAG}row") or tags.get(f"{TAG}axes", ""),
                "seed": tags.get(f"{TAG}seed", ""),
                "best_dev": metrics.get("best_dev_spearman"),
                "test_avg": metrics.get("test_avg_spearman"),
                "trial": tags.get(f"{TAG}trial_id", ""),
                "checkpoint": tags.get(f"{TAG}checkpoint_step", "-"),
                "export": exportable(run),
                "run": f"{tracking_uri} experiment {experiment_id} run {run.info.run_id}",
                "parent": tags.get(MLFLOW_PARENT_RUN_ID, ""),
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
