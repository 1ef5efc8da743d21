"""Any collected sweep by name: its variants' trials, and their grids as their search spaces declare them.

``reports.tables --sweep NAME`` and ``reports.plots --sweep NAME`` render one
table and one grid plot per variant (spec hash) of the sweep, made of the same
lines as the end-of-sweep summary (:func:`results.lines.sweep_table`). The
order of grid points and the mirror points of symmetric axes come from the
search space the trials record (``spec_file``), read as the sweep engine reads
it; where that file is gone, the lines are those that ran, in the plan's order.
"""

from __future__ import annotations

import pandas as pd

from reports.table_specs import PROJECT
from results.lines import Grid, sweep_table
from results.table import Table
from sweep.spec.sweep_spec import SpecError, SweepSpec, load_spec


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


def recorded_spec(trials: pd.DataFrame) -> SweepSpec | None:
    """The search space a variant's trials record (relative paths are from the project); None where it is
    gone or no longer valid."""
    path = PROJECT / str(trials["spec_file"].iloc[0]) if "spec_file" in trials else None
    if path is None or not path.is_file():
        return None
    try:
        return load_spec(path, check_environment=False)
    except SpecError:
        return None


def variant_table(trials: pd.DataFrame) -> Table:
    """A variant's table, its lines laid out by the grid of its recorded spec and tested against that spec's
    reference row (as the end-of-sweep summary does); where the spec is gone, the lines that ran, in the
    plan's order, tested against the first."""
    spec = recorded_spec(trials)
    if spec is None:
        return sweep_table(trials)
    return sweep_table(trials, grid=Grid(spec.grid, spec.symmetric),
                       reference=spec.reference.row if spec.reference else None)


def variant_tables(results: pd.DataFrame, name: str) -> list[tuple[pd.DataFrame, Table]]:
    """(trials, table) of each variant of sweep ``name`` (:class:`NotCollected` when it is not in ``results``)."""
    return [(trials, variant_table(trials)) for trials in sweep_variants(results, name)]


def sweep_tables(results: pd.DataFrame, name: str) -> list[Table]:
    return [table for _, table in variant_tables(results, name)]
