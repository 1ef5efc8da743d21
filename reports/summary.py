"""When a sweep ends: its summary on stdout, and on its MLflow parent run.

``sweep run`` and ``sweep resume`` call :func:`finish_sweep`. It reads the
variant's trials back from MLflow (so trials kept from before a resume count),
prints one line per row x grid point (seeds finished and failed, best dev and
test average as mean ± std (n), Welch's p against the first line; for sampled
axes the top trials by the spec's metric) and the next commands with the real
names, and gives the parent run summary metrics, the best trial's tags, and
artifacts: the resolved spec (YAML), the summary (Markdown, CSV) and the plots.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import yaml
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from reports.collect import trials_frame
from reports.lines import latest_finished, with_lines
from reports.plots import dev_curves, sweep_grid_plot
from reports.significance import p_text
from reports.tables import Table, cell_text, sweep_table
from sweep.spec import SweepSpec
from sweep.status import choose_parent, read_client
from sweep.tracking import runs_view_url
from trainers.record import TRIAL_FILTER, Tag

EXPERIMENT_KIND = Tag.EXPERIMENT_KIND  # TEMP
TAG = "sweep."  # TEMP

SUMMARY_COLUMNS = ("Dev", "Avg")
TOP_SAMPLED = 5
"""Lines shown for a sweep with sampled axes (the best by the spec's metric)."""


def variant_trials(client: MlflowClient, experiment, parent) -> pd.DataFrame:
    """Every trial run of one sweep variant (its parent run), as reports.collect types them."""
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"{TRIAL_FILTER} and tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent.info.run_id}'",
        max_results=50000,
    )
    return trials_frame([(experiment.name, run) for run in runs])


def summary_frame(trials: pd.DataFrame, table: Table) -> pd.DataFrame:
    """One record per line of ``table``: seeds finished and failed, dev and test average, p-value."""
    lined = with_lines(trials)
    finished = latest_finished(lined)
    records = []
    for line in table.lines:
        dev, avg = line.cells["Dev"], line.cells["Avg"]
        records.append({
            "line": line.label,
            "finished": int((finished["line"] == line.label).sum()),
            "failed": int(((lined["line"] == line.label) & (lined["status"] == "FAILED")).sum()),
            "best_dev_mean": dev.mean, "best_dev_std": dev.std, "best_dev_n": dev.n,
            "test_avg_mean": avg.mean, "test_avg_std": avg.std, "test_avg_n": avg.n,
            "p_value": table.p_values.get(line.label, math.nan),
            "p_reference": table.p_reference or "",
        })
    return pd.DataFrame.from_records(records)


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def summary_markdown(table: Table, frame: pd.DataFrame, sampled: bool) -> str:
    header = ["row [grid point]", "seeds finished", "failed", "best dev", "test avg"]
    header += ["p (Avg)"] if table.p_values else []
    shown = table.lines[:TOP_SAMPLED] if sampled else table.lines
    rows = []
    for line, record in zip(shown, frame.to_dict("records")):
        cells = [line.label, str(record["finished"]), str(record["failed"]),
                 cell_text(line.cells["Dev"], table.formats["Dev"]), cell_text(line.cells["Avg"], table.formats["Avg"])]
        if table.p_values:
            cells.append("ref" if line.label == table.p_reference else p_text(record["p_value"]))
        rows.append(cells)
    text = markdown(header, rows)
    if sampled and len(table.lines) > TOP_SAMPLED:
        text += f"\n(top {TOP_SAMPLED} of {len(table.lines)} sampled trials)\n"
    return text + "".join(f"- {note}\n" for note in table.notes)


def best_trial(trials: pd.DataFrame, spec: SweepSpec) -> pd.Series | None:
    """The finished trial that is best by the spec's metric and mode."""
    scored = trials[(trials["status"] == "FINISHED")]
    if spec.metric not in scored or scored[spec.metric].isna().all():
        return None
    scored = scored.dropna(subset=[spec.metric])
    index = scored[spec.metric].astype(float).idxmax() if spec.mode == "max" else scored[spec.metric].astype(float).idxmin()
    return scored.loc[index]


def resolved_spec(spec: SweepSpec) -> dict[str, Any]:
    """The spec as it ran: base with the --set overrides, the seeds and samples after the budget."""
    return {
        "name": spec.name, "description": spec.description, "method": spec.method, "tags": dict(spec.tags),
        "base": dict(spec.base), "rows": [{"name": r.name, "set": dict(r.overrides)} for r in spec.rows],
        "seeds": list(spec.seeds), "grid": dict(spec.grid), "sample": dict(spec.sample),
        "num_samples": spec.num_samples, "metric": spec.metric, "mode": spec.mode,
        "budget": spec.budget.name if spec.budget else None, "spec_hash": spec.spec_hash,
        "spec_file": str(spec.path),
    }


def log_to_parent(client: MlflowClient, tracking_uri: str, spec: SweepSpec, experiment, parent_run_id: str,
                  trials: pd.DataFrame, summary_md: str, frame: pd.DataFrame) -> None:
    """Summary metrics, the best trial's tags and the artifacts on the variant's parent run."""
    finished = int((trials["status"] == "FINISHED").sum())
    failed = int((trials["status"] == "FAILED").sum())
    client.log_metric(parent_run_id, "trials_finished", finished)
    client.log_metric(parent_run_id, "trials_failed", failed)
    best = best_trial(trials, spec)
    if best is not None:
        for metric in ("best_dev_spearman", "test_avg_spearman"):
            if metric in best and not pd.isna(best[metric]):
                client.log_metric(parent_run_id, f"best_trial_{metric}", float(best[metric]))
        client.set_tag(parent_run_id, f"{TAG}best_row", str(best["row"]))
        client.set_tag(parent_run_id, f"{TAG}best_seed", str(best["seed"]))
        client.set_tag(parent_run_id, f"{TAG}best_axes", str(best["axes"]))
        client.set_tag(parent_run_id, f"{TAG}best_run_id", str(best["run_id"]))
    if EXPERIMENT_KIND not in experiment.tags:  # an experiment created before the tag existed
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND, "custom_model_development")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        (out / "spec.yaml").write_text(yaml.safe_dump(resolved_spec(spec), sort_keys=False), encoding="utf-8")
        (out / "summary.md").write_text(summary_md, encoding="utf-8")
        frame.to_csv(out / "summary.csv", index=False)
        for name in ("spec.yaml", "summary.md", "summary.csv"):
            client.log_artifact(parent_run_id, str(out / name))
        plots = out / "plots"
        plots.mkdir()
        drawn = [dev_curves(trials, tracking_uri, spec.name, plots / f"{spec.name}_dev_curves.png"),
                 sweep_grid_plot(trials, plots / f"{spec.name}_grid.png")]
        for path in drawn:
            if path is not None:
                client.log_artifact(parent_run_id, str(path), "plots")


def next_steps(spec: SweepSpec, experiment_id: str, tracking_uri: str, several_variants: bool) -> str:
    name = f"{spec.name}-{spec.spec_hash}" if several_variants else spec.name
    return "\n".join([
        "next:",
        f"  python -m sweep status {name}",
        f"  python -m reports.collect && python -m reports.tables --sweep {spec.name}",
        f"  python -m reports.plots --sweep {spec.name}",
        f"  mlflow ui --backend-store-uri {tracking_uri}    then open {runs_view_url(experiment_id)}",
    ])


def finish_sweep(spec: SweepSpec, tracking_uri: str) -> str:
    """Log the variant's summary to its parent run and return the text to print."""
    client = read_client(tracking_uri)
    experiment, parent = choose_parent(client, f"{spec.name}-{spec.spec_hash}", tracking_uri)
    trials = variant_trials(client, experiment, parent)
    if trials.empty:
        return f"{spec.name}: no trials recorded in MLflow ({tracking_uri})\n"
    sampled = bool(spec.sample)
    table = sweep_table(trials, SUMMARY_COLUMNS, title=f"{spec.name} (spec hash {spec.spec_hash})")
    frame = summary_frame(trials, table)
    summary_md = f"{table.title}\n\n" + summary_markdown(table, frame, sampled)
    try:
        log_to_parent(client, tracking_uri, spec, experiment, parent.info.run_id, trials, summary_md, frame)
    except (MlflowException, OSError) as error:  # the trials are recorded; only the parent's extras are lost
        summary_md += f"\nwarning: the summary could not be logged to the parent run: {error}\n"
    variants = client.search_runs([experiment.experiment_id], f"tags.`{TAG}role` = 'parent'", max_results=2)
    return summary_md + "\n" + next_steps(spec, experiment.experiment_id, tracking_uri, len(variants) > 1) + "\n"
