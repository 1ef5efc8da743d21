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
a side with fewer than 2 seeds gives no p. :func:`reference_label` is the one
rule for what every line is tested against: the reference row (a sweep spec's
``reference:``, the row a paper table's Δ is taken from), else the first line.
"""

from __future__ import annotations

import math
import warnings
from typing import Mapping, Sequence

import numpy as np

from results.table import Cell, Line, Table

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
    """A line's p-value against its reference line. A seed-free side is an exact constant: a seed-free
    reference's value is what the line's seeds are tested against, and a seed-free line's value is what the
    reference's seeds are tested against (the same one-sample t-test)."""
    if cell.exact and not reference.exact:
        return welch_p(reference.values, cell.values, reference_exact=True)
    return welch_p(cell.values, reference.values, reference.exact)


def is_significant(p_value: float) -> bool:
    return not math.isnan(p_value) and p_value < ALPHA


def p_text(p_value: float) -> str:
    """``0.012 *`` (significant at 5%), ``0.41``, or ``n/a`` where no test was possible."""
    if math.isnan(p_value):
        return "n/a"
    return f"{p_value:.3f}{' *' if is_significant(p_value) else ''}"


def _testable(cell: Cell, reference: Cell) -> bool:
    """Whether a line can be tested against the reference: >= 2 seeds against >= 2 or a seed-free reference,
    or seed-free against a reference of >= 2 seeds."""
    return (cell.n >= 2 and (reference.n >= 2 or reference.exact)) or (cell.exact and reference.n >= 2)


def _tested(cells: Mapping[str, Cell], reference: str) -> bool:
    """Whether any line can be tested against the reference (:func:`_testable`)."""
    return any(_testable(cell, cells[reference]) for label, cell in cells.items() if label != reference)


def _seeds(label: str, cell: Cell) -> str:
    return f"{label!r} seed-free" if cell.exact else f"{label!r} {cell.n}"


def note(column: str, reference: str, cells: Mapping[str, Cell]) -> str:
    """The line under a table: what was tested against what, or why nothing was, with the seeds of
    each line (label -> its cell in ``column``) where that is the reason."""
    if _tested(cells, reference):
        exact = (f"; {reference!r} is seed-free (one run stands for every seed), so each line is tested against "
                 f"its exact value with a one-sample t-test") if cells[reference].exact else ""
        seed_free = [label for label, cell in cells.items()
                     if label != reference and cell.exact and _testable(cell, cells[reference])]
        exact += (f"; seed-free lines ({', '.join(map(repr, seed_free))}) are tested the other way round, the "
                  f"reference's seeds against their exact value with a one-sample t-test") if seed_free else ""
        short = [_seeds(label, cell) for label, cell in cells.items()
                 if label != reference and not _testable(cell, cells[reference])]
        untested = f"; n/a where a line has fewer than 2 seeds ({', '.join(short)})" if short else ""
        return (f"p: {TEST_NAME} of {column} against {reference!r} over seeds, * = significant at "
                f"{ALPHA:.0%} ({WHY}){exact}{untested}")
    if all(cell.n <= 1 for cell in cells.values()):
        return "significance: one seed per row, so no test was possible (p needs >= 2 seeds per row)"
    counts = ", ".join(_seeds(label, cell) for label, cell in cells.items())
    return (f"significance: no test was possible: p needs >= 2 seeds on a line and on the reference {reference!r} "
            f"(or a seed-free reference); seeds per line: {counts}")


def reference_label(lines: Sequence[Line], reference: str | None = None) -> str:
    """The line every other line is tested against: the first line of the ``reference`` row (by row or
    label: a sweep spec's ``reference:``, the row a paper table's Δ is taken from) where ``lines`` hold
    it, else the first line (a spec without a reference, or whose reference row is another spec's)."""
    named = (line.label for line in lines if reference is not None and reference in (line.row, line.label))
    return next(named, lines[0].label)


def add_significance(table: Table, column: str | None = None, reference: str | None = None) -> None:
    """Test each line's ``column`` (default: Avg, else the first column) against the ``reference`` row's
    line (:func:`reference_label`) over seeds (:func:`line_p`), and say under the table what was tested."""
    column = column or ("Avg" if "Avg" in table.columns else table.columns[0])
    reference = reference_label(table.lines, None if reference is None else str(reference))
    cells = {line.label: line.cells[column] for line in table.lines}
    if _tested(cells, reference):
        table.p_reference = reference
        table.p_values = {label: line_p(cell, cells[reference]) for label, cell in cells.items() if label != reference}
    if any(cell.n for cell in cells.values()):
        table.notes.append(note(column, reference, cells))
