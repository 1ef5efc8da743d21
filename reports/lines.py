"""The lines of any sweep's table: one per row and grid point, in the plan's order.

A trial's line is its row and its axes (``sweep.axes``: the grid and sampled
knobs' values), so the seeds of one grid point share a line and a sampled
trial, whose axes are drawn for it alone, has a line of its own. Lines come in
the order of their first trial id, which is the order of the plan (rows, then
grid points), so the first line is the spec's first row at its first grid point.
"""

from __future__ import annotations

import pandas as pd


def line_label(row: str, axes: str) -> str:
    """``row [knob=value, ...]`` (either part alone where the other is empty; no ``|``, which would
    split a Markdown cell)."""
    if row and axes:
        return f"{row} [{axes}]"
    return row or axes or "(all trials)"


def with_lines(trials: pd.DataFrame) -> pd.DataFrame:
    """``trials`` with a ``line`` column, in the plan's order of lines (then by seed)."""
    if trials.empty:
        return trials.assign(line=pd.Series(dtype="string"))
    labelled = trials.assign(line=[line_label(str(r), str(a)) for r, a in zip(trials["row"], trials["axes"])])
    first = labelled.groupby("line")["trial_id"].min()
    order = {line: position for position, line in enumerate(first.sort_values().index)}
    ranked = labelled.assign(_order=labelled["line"].map(order))
    return ranked.sort_values(["_order", "seed", "trial_id"], kind="stable").drop(columns="_order")


def latest_finished(trials: pd.DataFrame) -> pd.DataFrame:
    """The FINISHED trials, the latest run of each (line, seed)."""
    finished = trials[trials["status"] == "FINISHED"]
    latest = finished.sort_values(["start_time", "run_id"]).drop_duplicates(["line", "seed"], keep="last")
    return latest.loc[[i for i in trials.index if i in set(latest.index)]]
