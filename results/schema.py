"""The identity columns of a trials frame (``results.parquet``, docs/results_schema.md).

Kept apart from :mod:`results.reader` so that reading a results file needs
neither MLflow nor the knob declarations.
"""

from __future__ import annotations

DEFAULT_RESULTS = "results.parquet"
IDENTITY = (
    "experiment", "sweep", "spec_hash", "spec_file", "budget", "git_commit", "row", "axes", "sampled_axes",
    "sweep_metric", "seed", "seeds", "method", "trial_id", "run_id", "parent_run_id", "status", "error", "failures",
    "stopped_by_scheduler", "start_time", "end_time",
)
"""The trial's identity columns (from its tags and run info), first in every results file."""
IDENTITY_DTYPES = {
    **{name: "string" for name in IDENTITY}, "seed": "Int64", "failures": "Int64", "stopped_by_scheduler": "boolean",
    "start_time": "datetime64[ns, UTC]", "end_time": "datetime64[ns, UTC]",
}
FINISHED = "FINISHED"
FAILED = "FAILED"
"""MLflow run statuses the reports count: only FINISHED trials make cells; FAILED ones are counted."""
