"""Is a line's difference from its reference line more than seed noise?

Welch's two-sided t-test (``scipy.stats.ttest_ind(equal_var=False)``) on the
per-seed scores of a line and of its reference line, at the 5% level. Why this
test (docs/significance.md): sweeps run a handful of seeds (2-8); rank tests
cannot reach 5% with so few (Mann-Whitney's smallest two-sided p with 3 and 3
seeds is 0.10), and an ablation may change the spread across seeds, which
Welch's test does not assume equal. It assumes each line's seed scores are
roughly normal, which is what seed-to-seed noise of an average over seven
test sets looks like.

:func:`line_p` is the one rule every output uses (paper tables, any sweep's
table and its CSV, ``results.parquet``, the end-of-sweep summary): a
seed-free reference is an exact constant (one-sample t-test against it), and
a side with fewer than 2 seeds gives no p.
"""

from __future__ import annotations

import math
import warnings
from typing import Mapping, Sequence

import numpy as np

from results.table import Cell, Table

ALPHA = 0.05
TEST_NAME = "Welch's two-sided t-test"
WHY = ("unequal variances allowed; valid with a handful of seeds, where rank tests cannot reach 5%; "
       "see docs/significance.md")


def welch_p(values: Sequence[float], reference: Sequence[float], reference_exact: bool = False) -> float:
    """Two-sided p-value of Welch's t-test; NaN when either side has fewer than 2 seeds.

    A seed-free reference (``reference_exact``: one run of a configuration that no seed changes) is
    a known constant, not a sample: the line is then tested against it with a one-sample t-test.
    When both sides have no spread at all the t statistic is undefined: equal means give p = 1
    (nothing differs), different means NaN (no test is possible)."""
    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    if reference_exact and len(a) >= 2 and len(b) == 1:
        if np.ptp(a) == 0:
            return 1.0 if a[0] == b[0] else math.nan
        from scipy.stats import ttest_1samp  # here: scipy.stats takes ~1 s to import, and most tables test nothing

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(ttest_1samp(a, b[0]).pvalue)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] == b[0] else math.nan
    from scipy.stats import ttest_ind

    with warnings.catch_warnings():
        # Nearly identical seeds make scipy warn of precision loss; p is then near 1, as it should be.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_ind(a, b, equal_var=False).pvalue)


def line_p(cell: Cell, reference: Cell) -> float:
    """A line's p-value against its reference line: the seed-free rule decided from the reference cell."""
    return welch_p(cell.values, reference.values, reference.exact)


def is_significant(p_value: float) -> bool:
    return not math.isnan(p_value) and p_value < ALPHA


def p_text(p_value: float) -> str:
    """``0.012 *`` (significant at 5%), ``0.41``, or ``n/a`` where no test was possible."""
    if math.isnan(p_value):
        return "n/a"
    return f"{p_value:.3f}{' *' if is_significant(p_value) else ''}"


def _tested(cells: Mapping[str, Cell], reference: str) -> bool:
    """Whether any line can be tested: a reference of >= 2 seeds or seed-free, and another line of >= 2."""
    base = cells[reference]
    return (base.n >= 2 or base.exact) and any(cell.n >= 2 for label, cell in cells.items() if label != reference)


def _seeds(label: str, cell: Cell) -> str:
    return f"{label!r} seed-free" if cell.exact else f"{label!r} {cell.n}"


def note(column: str, reference: str, cells: Mapping[str, Cell]) -> str:
    """The line under a table: what was tested against what, or why nothing was, with the seeds of
    each line (label -> its cell in ``column``) where that is the reason."""
    if _tested(cells, reference):
        exact = (f"; {reference!r} is seed-free (one run stands for every seed), so each line is tested against "
                 f"its exact value with a one-sample t-test") if cells[reference].exact else ""
        short = [_seeds(label, cell) for label, cell in cells.items() if label != reference and cell.n < 2]
        untested = f"; n/a where a line has fewer than 2 seeds ({', '.join(short)})" if short else ""
        return (f"p: {TEST_NAME} of {column} against {reference!r} over seeds, * = significant at "
                f"{ALPHA:.0%} ({WHY}){exact}{untested}")
    if all(cell.n <= 1 for cell in cells.values()):
        return "significance: one seed per row, so no test was possible (p needs >= 2 seeds per row)"
    counts = ", ".join(_seeds(label, cell) for label, cell in cells.items())
    return (f"significance: no test was possible: p needs >= 2 seeds on a line and on the reference {reference!r} "
            f"(or a seed-free reference); seeds per line: {counts}")


def add_significance(table: Table, column: str | None = None, reference: str | None = None) -> None:
    """Test each line's ``column`` (default: Avg, else the first column) against the ``reference`` line
    (default: the first) over seeds (:func:`line_p`), and say under the table what was tested."""
    column = column or ("Avg" if "Avg" in table.columns else table.columns[0])
    reference = str(reference) if reference is not None else table.lines[0].label
    cells = {line.label: line.cells[column] for line in table.lines}
    if _tested(cells, reference):
        table.p_reference = reference
        table.p_values = {label: line_p(cell, cells[reference]) for label, cell in cells.items() if label != reference}
    if any(cell.n for cell in cells.values()):
        table.notes.append(note(column, reference, cells))
