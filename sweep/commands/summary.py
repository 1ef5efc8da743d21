"""When a sweep ends: its summary on stdout, and on its MLflow parent run.

``sweep run`` and ``sweep resume`` call :func:`finish_sweep`. It reads the
variant's trials back from MLflow (so trials kept from before a resume count)
and builds the variant's lines once (:func:`results.lines.sweep_table`: a line
per row x grid point, mirror points of symmetric axes included, seed-free rows
marked). From those lines come the printed table (seeds finished and failed,
best dev and test average as mean ± std (n), p against the reference row's line
(:func:`results.significance.reference_label`); for
sampled axes the top trials by the spec's metric), the parent run's
``summary.md`` and ``summary.csv`` (the renderer of every table) and its grid
plot; then the next commands with the real names. The parent run also gets
summary metrics, the best trial's tags and the resolved spec.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from mlflow.exceptions import MlflowException

from results.figures import DEV_CURVES, GRID_PLOT, dev_curves, row_colours, sweep_grid_plot, trial_labels
from results.lines import COUNTS, Grid, sweep_table
from results.ranking import best
from results.reader import absolute_tracking_uri, choose_parent, existing_store_uri, variant_trials
from results.record import DEFAULT_TRACKING_URI, PARENT_FILTER, Summary, Tag, runs_view_url
from results.render import cell_text, markdown_table, note_lines, to_csv
from results.schema import FAILED, FINISHED
from results.table import P_COLUMN, Table
from sweep.run.seed_rounds import METRIC as ROUNDS_METRIC
from sweep.run.seed_rounds import verdicts
from sweep.spec.sweep_spec import SweepSpec
from sweep.tracking.store import SharedStoreClient, open_client
from trainers.metrics import Metric

SUMMARY_COLUMNS = ("Dev", "Avg")
HEADERS = {"Dev": "best dev", "Avg": "test avg", P_COLUMN: "p (Avg)"}
TOP_SAMPLED = 5
"""Lines shown for a sweep with sampled axes (the best by the spec's metric)."""


def summary_table(trials: pd.DataFrame, spec: SweepSpec) -> Table:
    """The variant's lines with the seeds each finished and the trials that failed; no bold."""
    table = sweep_table(trials, SUMMARY_COLUMNS, f"{spec.name} (spec hash {spec.spec_hash})",
                        Grid(spec.grid, spec.symmetric), spec.reference.row if spec.reference else None)
    table.lead, table.headers = list(COUNTS), summary_headers(table)
    table.formats = {column: replace(form, best=None) for column, form in table.formats.items()}
    reused = trials[(trials["reused_from"] != "") & (trials["status"] == FINISHED)] if "reused_from" in trials else []
    if len(reused):
        sources = ", ".join(f"{name}: {n}" for name, n in reused["reused_sweep"].value_counts().items())
        table.notes.append(f"reused: {len(reused)} of {len(trials)} trials were not trained here but taken from "
                           f"finished runs with the same trial key ({sources}); `sweep status` marks them")
        other = reused[reused["reused_other_code"]] if "reused_other_code" in reused else reused.iloc[:0]
        if len(other):
            table.notes.append("reused from runs of other training code (--reuse-other-code): " + ", ".join(
                f"{row} seed {seed} <- {source}" for row, seed, source in
                zip(other["row"], other["seed"], other["reused_from"])))
    if spec.search is not None and table.lines:
        table.notes.append(best_point_note(table, spec))
    if spec.seed_rounds is not None:
        table.notes += seed_round_notes(trials, spec)
    return table


def summary_headers(table: Table) -> dict[str, str]:
    """:data:`HEADERS`, the p column's naming the line it tests the others against (``p (Avg) vs SimCSE``)."""
    tested = f"{HEADERS[P_COLUMN]} vs {table.p_reference}" if table.p_reference else HEADERS[P_COLUMN]
    return {**HEADERS, P_COLUMN: tested}


def seed_round_notes(trials: pd.DataFrame, spec: SweepSpec) -> list[str]:
    """For each row of adaptive seeds: the seeds it took and why it stopped (:func:`sweep.run.seed_rounds.verdicts`
    on the recorded trials, the rule the sweep ran by)."""
    scores: dict[str, dict[int, float]] = {}
    for (row, seed), group in trials.groupby(["row", "seed"], sort=False):
        done = group[group["status"] == FINISHED]
        if len(done) or (group["status"] == FAILED).any():
            value = done.iloc[-1].get(ROUNDS_METRIC) if len(done) else None
            scores.setdefault(str(row), {})[int(seed)] = math.nan if value is None or pd.isna(value) else float(value)
    rounds = spec.seed_rounds
    lines = [f"adaptive seeds: first {list(rounds.first)}, then one of {list(rounds.more)} a round while Welch's p "
             f"({ROUNDS_METRIC}) against {spec.reference.row!r} lies in [{rounds.p:g}, {rounds.or_above:g}]"]
    for row, found in verdicts(spec, scores).items():
        seeds = ", ".join(map(str, found.seeds))
        lines.append(f"{row or 'trial'}: {len(found.seeds)} seeds ({seeds}); {found.reason or 'seeds still to run'}")
    return lines


def best_point_note(table: Table, spec: SweepSpec) -> str:
    """The best point a searcher suggested, with the mean and spread of its seeds: the first line, as
    :func:`results.lines.sweep_table` sorts the lines of sampled axes by the spec's metric."""
    best = table.lines[0]
    said = (f"search ({spec.search.algorithm}, {spec.num_samples} points x {len(spec.trials)} seeds): "
            f"best point {best.label}")
    column = next((name for name, form in table.formats.items() if form.metric == spec.metric), None)
    if column is None:
        return said
    return f"{said}: {spec.metric} {cell_text(best.cells[column], table.formats[column])} (mean ± std over seeds)"


def summary_markdown(table: Table, sampled: bool) -> str:
    shown = replace(table, lines=table.lines[:TOP_SAMPLED]) if sampled else table
    text = f"{table.title}\n\n{markdown_table(shown)}"
    if sampled and len(table.lines) > TOP_SAMPLED:
        text += f"\n(top {TOP_SAMPLED} of {len(table.lines)} sampled trials)\n"
    return text + note_lines(table)


def best_trial(trials: pd.DataFrame, spec: SweepSpec) -> pd.Series | None:
    """The finished trial that is best by the spec's metric and mode (:func:`results.ranking.best`)."""
    finished = trials[trials["status"] == FINISHED]
    if spec.metric not in finished:
        return None
    return best([trial for _, trial in finished.iterrows()],
                lambda trial: None if pd.isna(trial[spec.metric]) else float(trial[spec.metric]), spec.mode)


def resolved_spec(spec: SweepSpec) -> dict[str, Any]:
    """The spec as it ran: base with the --set overrides, the seeds and samples after the budget."""
    return {
        "name": spec.name, "description": spec.description, "method": spec.method, "tags": dict(spec.tags),
        "base": dict(spec.base), "rows": [{"name": r.name, "set": dict(r.overrides)} for r in spec.rows],
        "seeds": list(spec.seeds), "grid": dict(spec.grid), "sample": dict(spec.sample),
        "num_samples": spec.num_samples, "search": dataclasses.asdict(spec.search) if spec.search else None,
        "seed_rounds": dataclasses.asdict(spec.seed_rounds) if spec.seed_rounds else None,
        "metric": spec.metric, "mode": spec.mode,
        "budget": spec.budget.name if spec.budget else None, "spec_hash": spec.spec_hash,
        "spec_file": str(spec.path),
    }


def log_to_parent(client: SharedStoreClient, tracking_uri: str, spec: SweepSpec, parent_run_id: str,
                  trials: pd.DataFrame, table: Table, summary_md: str) -> None:
    """Summary metrics, the best trial's tags and the artifacts on the variant's parent run."""
    client.log_metric(parent_run_id, Summary.TRIALS_FINISHED, int((trials["status"] == FINISHED).sum()))
    client.log_metric(parent_run_id, Summary.TRIALS_FAILED, int((trials["status"] == FAILED).sum()))
    best = best_trial(trials, spec)
    if best is not None:
        for metric in (Metric.BEST_DEV, Metric.TEST_AVG):
            if metric in best and not pd.isna(best[metric]):
                client.log_metric(parent_run_id, Summary.best_trial(metric), float(best[metric]))
        for tag, column in ((Tag.BEST_ROW, "row"), (Tag.BEST_SEED, "seed"), (Tag.BEST_AXES, "axes"),
                            (Tag.BEST_RUN_ID, "run_id")):
            client.set_tag(parent_run_id, tag, str(best[column]))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        (out / Summary.SPEC).write_text(yaml.safe_dump(resolved_spec(spec), sort_keys=False), encoding="utf-8")
        (out / Summary.MARKDOWN).write_text(summary_md, encoding="utf-8")
        (out / Summary.CSV).write_text(to_csv(table), encoding="utf-8")
        for name in (Summary.SPEC, Summary.MARKDOWN, Summary.CSV):
            client.log_artifact(parent_run_id, str(out / name))
        plots = out / Summary.PLOTS
        plots.mkdir()
        colours = row_colours(trial_labels(trials))  # a row's colour the same in both figures
        drawn = [dev_curves(trials, tracking_uri, spec.name, plots / DEV_CURVES.format(spec.name), colours),
                 sweep_grid_plot(table, plots / GRID_PLOT.format(spec.name), colours=colours)]
        for path in drawn:
            if path is not None:
                client.log_artifact(parent_run_id, str(path), Summary.PLOTS)


def next_steps(spec: SweepSpec, experiment_id: str, tracking_uri: str, several_variants: bool) -> str:
    name = f"{spec.name}-{spec.spec_hash}" if several_variants else spec.name
    default = absolute_tracking_uri(tracking_uri) == absolute_tracking_uri(DEFAULT_TRACKING_URI)
    store = "" if default else f" --tracking-uri {tracking_uri}"  # the commands find the store the sweep wrote
    if tracking_uri.startswith(("http://", "https://")):  # a tracking server is its own UI
        ui = f"  open {runs_view_url(experiment_id, tracking_uri.rstrip('/'))}"
    else:
        ui = f"  mlflow ui --backend-store-uri {tracking_uri}    then open {runs_view_url(experiment_id)}"
    return "\n".join([
        "next:",
        f"  python -m sweep status {name}{store}",
        f"  python -m reports.collect{store} && python -m reports.tables --sweep {spec.name}",
        f"  python -m reports.plots --sweep {spec.name}{store}",
        ui,
    ])


def _variant(spec: SweepSpec, tracking_uri: str):
    """The store's client, the spec variant's experiment and parent run, and its trials frame."""
    client = open_client(existing_store_uri(tracking_uri))
    experiment, parent = choose_parent(client, f"{spec.name}-{spec.spec_hash}", tracking_uri)
    return client, experiment, parent, variant_trials(client, experiment, parent)


def trial_counts(spec: SweepSpec, tracking_uri: str) -> str:
    """``N trials finished (R reused, T trained by SWEEP), F failed`` of the variant's trial runs: the trained ones
    by this spec's sweep, now or in an earlier run of it."""
    *_, trials = _variant(spec, tracking_uri)
    finished = trials[trials["status"] == FINISHED] if not trials.empty else trials
    reused = int((finished["reused_from"] != "").sum()) if "reused_from" in finished else 0
    failed = int((trials["status"] == FAILED).sum()) if not trials.empty else 0
    return (f"{len(finished)} trials finished ({reused} reused, {len(finished) - reused} trained by {spec.name}), "
            f"{failed} failed")


def finish_sweep(spec: SweepSpec, tracking_uri: str) -> str:
    """Log the variant's summary to its parent run and return the text to print."""
    client, experiment, parent, trials = _variant(spec, tracking_uri)
    if trials.empty:
        return f"{spec.name}: no trials recorded in MLflow ({tracking_uri})\n"
    table = summary_table(trials, spec)
    summary_md = summary_markdown(table, bool(spec.sample))
    try:
        log_to_parent(client, tracking_uri, spec, parent.info.run_id, trials, table, summary_md)
    except (MlflowException, OSError) as error:  # the trials are recorded; only the parent's extras are lost
        summary_md += f"\nwarning: the summary could not be logged to the parent run: {error}\n"
    variants = client.search_runs([experiment.experiment_id], PARENT_FILTER, max_results=2)
    return summary_md + "\n" + next_steps(spec, experiment.experiment_id, tracking_uri, len(variants) > 1) + "\n"
