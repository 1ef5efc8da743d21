"""MLflow trial runs -> one Parquet file, one row per trial.

    python -m reports.collect [--tracking-uri URI] [--experiment NAME ...] [--out results.parquet]

Columns (see docs/results_schema.md): identity (``experiment``, ``sweep``,
``spec_hash``, ``row``, ``seed``, ``method``, ``trial_id``, ``run_id``,
``status``, ``error``), every knob of the trial's method typed back from
MLflow's strings through the knob declarations, and every final metric
(``best_dev_spearman``, ``best_step``, ``steps``, ``wall_seconds``,
``sentences_per_second``, ``test_*``). The file is rewritten whole and sorted,
so collecting twice gives the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from mlflow import MlflowClient

from sweep.engine import absolute_tracking_uri
from sweep.tracking import DEFAULT_TRACKING_URI, TAG
from trainers.registry import METHODS

IDENTITY = (
    "experiment", "sweep", "spec_hash", "row", "seed", "method", "trial_id", "run_id", "status", "error", "start_time",
)
DEFAULT_OUT = "results.parquet"


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


def trial_record(experiment: str, run) -> dict[str, Any]:
    tags, params = run.data.tags, run.data.params
    method = tags.get(f"{TAG}method", params.get("method", ""))
    record: dict[str, Any] = {
        "experiment": experiment,
        "sweep": tags.get(f"{TAG}name", experiment),
        "spec_hash": tags.get(f"{TAG}spec_hash", ""),
        "row": tags.get(f"{TAG}row", ""),
        "seed": int(tags.get(f"{TAG}seed", params.get("seed", -1))),
        "method": method,
        "trial_id": tags.get(f"{TAG}trial_id", ""),
        "run_id": run.info.run_id,
        "status": run.info.status,
        "error": tags.get(f"{TAG}error", ""),
        "start_time": pd.Timestamp(run.info.start_time, unit="ms", tz="UTC"),
    }
    for name, text in params.items():
        if name not in IDENTITY:
            record[name] = typed_param(method, name, text)
    record.update({name: value for name, value in run.data.metrics.items() if name not in record})
    return record


def collect(tracking_uri: str = DEFAULT_TRACKING_URI, experiments: Sequence[str] | None = None) -> pd.DataFrame:
    """Every sweep trial in ``experiments`` (all experiments when None) as a frame."""
    client = MlflowClient(absolute_tracking_uri(tracking_uri))
    if experiments:
        found = [client.get_experiment_by_name(name) for name in experiments]
        missing = [name for name, e in zip(experiments, found) if e is None]
        if missing:
            raise KeyError(f"no MLflow experiment named {missing} at {tracking_uri}")
    else:
        found = client.search_experiments()
    records = []
    for experiment in found:
        token = None
        while True:
            page = client.search_runs(
                [experiment.experiment_id], filter_string=f"tags.`{TAG}role` = 'trial'", max_results=1000,
                page_token=token,
            )
            records.extend(trial_record(experiment.name, run) for run in page)
            token = page.token
            if not token:
                break
    frame = pd.DataFrame.from_records(records, columns=None if records else list(IDENTITY))
    if frame.empty:
        return frame
    frame = frame.sort_values(["experiment", "row", "seed", "trial_id", "run_id"], kind="stable")
    return frame.reset_index(drop=True).convert_dtypes()


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
    path = write(frame, args.out)
    counts = frame.groupby("status").size().to_dict() if not frame.empty else {}
    print(f"{len(frame)} trials -> {path} ({', '.join(f'{n} {s.lower()}' for s, n in sorted(counts.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
