"""MLflow trial runs -> one Parquet file, one row per trial.

    python -m reports.collect [--tracking-uri URI] [--experiment NAME ...] [--out results.parquet]

Columns (see docs/results_schema.md): identity (``experiment``, ``sweep``,
``spec_hash``, ``spec_file``, ``budget``, ``git_commit``, ``row``, ``axes``, ``seed``, ``seeds``,
``method``, ``trial_id``, ``run_id``, ``parent_run_id``, ``status``,
``error``, ``failures``, ``stopped_by_scheduler``, ``start_time``,
``end_time``), every knob of the trial's method typed back from
MLflow's strings through the knob declarations, and every final metric
(``best_dev_spearman``, ``best_step``, ``steps``, ``wall_seconds``,
``sentences_per_second``, ``test_*``). The file is rewritten whole and sorted,
so collecting twice gives the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from reports.significance import add_p_values
from sweep.status import read_client
from trainers.record import DEFAULT_TRACKING_URI

TAG = "sweep."  # TEMP until the reports branch lands
from sweep.variants import UsageError
from trainers.registry import METHODS

IDENTITY = (
    "experiment", "sweep", "spec_hash", "spec_file", "budget", "git_commit", "row", "axes", "sampled_axes",
    "sweep_metric", "seed", "seeds", "method", "trial_id", "run_id", "parent_run_id", "status", "error", "failures",
    "stopped_by_scheduler", "start_time", "end_time",
)
"""The trial's identity columns (from its tags and run info), first in every results file."""
DEFAULT_OUT = "results.parquet"
IDENTITY_DTYPES = {
    **{name: "string" for name in IDENTITY}, "seed": "Int64", "failures": "Int64", "stopped_by_scheduler": "boolean",
    "start_time": "datetime64[ns, UTC]", "end_time": "datetime64[ns, UTC]",
}
KIND_DTYPES = {bool: "boolean", int: "Int64", float: "Float64", str: "string"}


def _knob_kinds() -> dict[str, set[type]]:
    kinds: dict[str, set[type]] = {}
    for method in METHODS.values():
        for knob in method.all_knobs:
            kinds.setdefault(knob.name, set()).add(knob.kind)
    return kinds


KNOB_KINDS = _knob_kinds()
"""Knob name -> its declared kind(s), over every registered method."""


def param_dtype(name: str) -> str:
    """The column type of a param: from its knob's declared kind (string for a name no knob declares)."""
    kinds = KNOB_KINDS.get(name, set())
    return KIND_DTYPES.get(next(iter(kinds)), "string") if len(kinds) == 1 else "string"


def metric_column(name: str) -> str:
    """A metric's column: its name, or ``<name>_metric`` where a knob has that name (SG's ``loss``)."""
    return f"{name}_metric" if name in KNOB_KINDS or name in IDENTITY else name


def typed_param(method: str, name: str, text: str) -> Any:
    """An MLflow param string back as the knob's declared type."""
    knobs = METHODS[method].all_knobs if method in METHODS else None
    if knobs is None or name not in knobs:
        return text
    knob = knobs[name]
    if text == "None":
        return None
    if knob.kind is bool:
        return text == "True"
    return knob.kind(text)


def _time(milliseconds: int | None) -> pd.Timestamp:
    return pd.Timestamp(milliseconds, unit="ms", tz="UTC") if milliseconds else pd.NaT


def trial_record(experiment: str, run) -> dict[str, Any]:
    """One trial run as a flat record: identity from the tags, typed params, last metrics."""
    tags, params = run.data.tags, run.data.params
    method = tags.get(f"{TAG}method", params.get("method", ""))
    record: dict[str, Any] = {
        "experiment": experiment,
        "sweep": tags.get(f"{TAG}name", experiment),
        "spec_hash": tags.get(f"{TAG}spec_hash", ""),
        "spec_file": tags.get(f"{TAG}spec_file", ""),
        "budget": tags.get(f"{TAG}budget", ""),
        "git_commit": tags.get(f"{TAG}git_commit", ""),
        "row": tags.get(f"{TAG}row", ""),
        "axes": tags.get(f"{TAG}axes", ""),
        "sampled_axes": tags.get(f"{TAG}sampled_axes", ""),
        "sweep_metric": tags.get(f"{TAG}metric", "best_dev_spearman max"),
        "seed": int(tags.get(f"{TAG}seed", params.get("seed", -1))),
        "seeds": tags.get(f"{TAG}seeds", ""),  # a seed-free trial: the seeds its one run stands for
        "method": method,
        "trial_id": tags.get(f"{TAG}trial_id", ""),
        "run_id": run.info.run_id,
        "parent_run_id": tags.get(MLFLOW_PARENT_RUN_ID, ""),
        "status": run.info.status,
        "error": tags.get(f"{TAG}error", ""),
        "failures": int(tags.get(f"{TAG}failures", 0)),
        "stopped_by_scheduler": tags.get(f"{TAG}stopped_by_scheduler") == "true",
        "start_time": _time(run.info.start_time),
        "end_time": _time(run.info.end_time),
    }
    for name, text in params.items():
        if name not in IDENTITY:
            record[name] = typed_param(method, name, text)
    record.update({metric_column(name): value for name, value in run.data.metrics.items()})
    return record


def _all_pages(search: Callable[[str | None], Any]) -> list:
    """Every item of a paginated MLflow search (``search(page_token)`` -> PagedList)."""
    items, token = [], None
    while True:
        page = search(token)
        items.extend(page)
        token = page.token
        if not token:
            return items


def collect(tracking_uri: str = DEFAULT_TRACKING_URI, experiments: Sequence[str] | None = None) -> pd.DataFrame:
    """Every sweep trial in ``experiments`` (all experiments when None) as a frame."""
    client = read_client(tracking_uri)
    if experiments:
        found = [client.get_experiment_by_name(name) for name in experiments]
        missing = [name for name, e in zip(experiments, found) if e is None]
        if missing:
            raise KeyError(f"no MLflow experiment named {missing} at {tracking_uri}")
    else:
        found = _all_pages(lambda token: client.search_experiments(max_results=1000, page_token=token))
    named_runs = []
    for experiment in found:
        runs = _all_pages(lambda token: client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`{TAG}role` = 'trial'", max_results=1000,
            page_token=token,
        ))
        named_runs.extend((experiment.name, run) for run in runs)
    return trials_frame(named_runs)


def trials_frame(named_runs: Sequence[tuple[str, Any]]) -> pd.DataFrame:
    """(experiment name, MLflow trial run) pairs as a typed frame, with each line's p-value
    against its sweep's first line (:func:`reports.significance.add_p_values`)."""
    records = [trial_record(name, run) for name, run in named_runs]
    runs_seen = [run for _, run in named_runs]
    # Columns in a fixed order: identity, the knobs, then the metrics, each alphabetical.
    params = sorted({name for run in runs_seen for name in run.data.params} - set(IDENTITY))
    metrics = sorted({metric_column(name) for run in runs_seen for name in run.data.metrics})
    dtypes = {**IDENTITY_DTYPES, **{name: param_dtype(name) for name in params}, **dict.fromkeys(metrics, "Float64")}
    frame = pd.DataFrame.from_records(records, columns=list(dtypes)).astype(dtypes)
    frame = frame.sort_values(["experiment", "row", "seed", "trial_id", "run_id"], kind="stable")
    return add_p_values(frame.reset_index(drop=True))


def write(frame: pd.DataFrame, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(out, index=False, engine="pyarrow")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.collect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--experiment", action="append", dest="experiments", help="Only these (repeatable).")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        frame = collect(args.tracking_uri, args.experiments)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    path = write(frame, args.out)
    counts = frame.groupby("status").size().to_dict() if not frame.empty else {}
    print(f"{len(frame)} trials -> {path} ({', '.join(f'{n} {s.lower()}' for s, n in sorted(counts.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
