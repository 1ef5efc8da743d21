"""Any collected sweep by name: its variants' trials, and their tables laid out as each sweep recorded.

``reports.tables --sweep NAME`` and ``reports.plots --sweep NAME`` render one
table and one grid plot per variant (spec hash) of the sweep, made of the same
lines as the end-of-sweep summary (:func:`results.lines.sweep_table`). The
order of grid points, the mirror points of symmetric axes and the reference row
come from the layout the sweep recorded on its parent run when it started
(:func:`results.lines.variant_table`), not from its spec file, which may have
changed since; a sweep that recorded none says so under its table.
"""

from __future__ import annotations

import pandas as pd

from results.lines import variant_table
from results.table import Table


class NotCollected(KeyError):
    """A sweep asked for by name that the results file does not hold."""


def sweep_variants(results: pd.DataFrame, name: str) -> list[pd.DataFrame]:
    """The collected trials of sweep ``name``, one frame per variant (spec hash), oldest first."""
    trials = results[results["experiment"] == name] if not results.empty else results
    if trials.empty:
        known = sorted(set(results["experiment"])) if not results.empty else []
        raise NotCollected(
            f"sweep {name!r} is not in the collected results (collected: {', '.join(known) or 'none'}); "
            f"collect it with `python -m reports.collect`, or `python -m sweep status {name}` to see its trials"
        )
    first_start = trials.groupby("spec_hash")["start_time"].min().sort_values()
    return [trials[trials["spec_hash"] == spec_hash] for spec_hash in first_start.index]


def variant_tables(results: pd.DataFrame, name: str) -> list[tuple[pd.DataFrame, Table]]:
    """(trials, table) of each variant of sweep ``name`` (:class:`NotCollected` when it is not in ``results``)."""
    return [(trials, variant_table(trials)) for trials in sweep_variants(results, name)]


def sweep_tables(results: pd.DataFrame, name: str) -> list[Table]:
    return [table for _, table in variant_tables(results, name)]
