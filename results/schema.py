"""The identity columns of a trials frame (``results.parquet``, docs/results_schema.md).

Kept apart from :mod:`results.reader` so that reading a results file needs
neither MLflow nor the knob declarations.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from results.record import SweepLayout
from trainers.metrics import SuiteName

DEFAULT_RESULTS = "results.parquet"
STORED_AS_JSON = ("grid_point", "sampled_point", "seeds", SuiteName.KEY)
"""Columns whose values are a mapping or a list of typed values (a grid point mixes floats, integers, strings;
``evaluations`` lists the suites and their options): Parquet holds them as JSON text, which
:func:`from_stored` reads back to the same types."""
IDENTITY = (
    "experiment", "sweep", "spec_hash", "spec_file", "budget", "git_commit", "row", "axes", "grid_point",
    "sampled_point", "sweep_metric", "sweep_mode", "seed", "seeds", "method", "trial_id", "run_id", "parent_run_id",
    "status", "error", "failures", "stopped_by_scheduler", "start_time", "end_time", "trial_key", "reused_from",
    "reused_sweep", "reused_other_code",
)
"""The trial's identity columns (from its tags and run info), first in every results file."""
IDENTITY_DTYPES = {
    **{name: "string" for name in IDENTITY}, "seed": "Int64", **dict.fromkeys(STORED_AS_JSON, "object"),
    "failures": "Int64", "stopped_by_scheduler": "boolean", "reused_other_code": "boolean",
    "start_time": "datetime64[ns, UTC]", "end_time": "datetime64[ns, UTC]",
}
LAYOUT = "layout"
"""The column of each trial's sweep layout (:class:`results.record.SweepLayout` as JSON), read from its parent
run when collecting; ``<NA>`` for a sweep started before the layout was recorded."""
FINISHED = "FINISHED"
FAILED = "FAILED"
"""MLflow run statuses the reports count: only FINISHED trials make cells; FAILED ones are counted."""


def to_stored(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as ``results.parquet`` holds it."""
    return frame.assign(**{name: frame[name].map(json.dumps) for name in STORED_AS_JSON if name in frame})


def _read_json_cell(name: str, text: Any) -> Any:
    if name == "seeds" and isinstance(text, str) and not text.startswith("["):
        return tuple(int(seed) for seed in text.split(",") if seed)  # a file collected before the JSON column
    if name == SuiteName.KEY:
        return json.loads(text) if isinstance(text, str) else None
    value = json.loads(text) if isinstance(text, str) else (() if name == "seeds" else {})
    return tuple(value) if name == "seeds" else value


def from_stored(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``results.parquet`` frame with its JSON columns back as mappings and tuples."""
    return frame.assign(**{name: frame[name].map(lambda text, name=name: _read_json_cell(name, text))
                           for name in STORED_AS_JSON if name in frame})


def collected_layout(trials: pd.DataFrame) -> SweepLayout | None:
    """The layout a sweep variant's collected trials carry (:data:`LAYOUT`); None where none was recorded."""
    texts = trials[LAYOUT].dropna() if LAYOUT in trials else ()
    return SweepLayout.from_json(str(texts.iloc[0])) if len(texts) else None
