"""Is a row's difference from its reference row more than seed noise?

Welch's two-sided t-test (``scipy.stats.ttest_ind(equal_var=False)``) on the
per-seed scores of a row and of its reference row, at the 5% level. Why this
test (docs/significance.md): sweeps run a handful of seeds (2-8); rank tests
cannot reach 5% with so few (Mann-Whitney's smallest two-sided p with 3 and 3
seeds is 0.10), and an ablation may change the spread across seeds, which
Welch's test does not assume equal. It assumes each row's seed scores are
roughly normal, which is what seed-to-seed noise of an average over seven
test sets looks like.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import ttest_1samp, ttest_ind

from reports.lines import latest_finished, with_lines

ALPHA = 0.05
TEST_NAME = "Welch's two-sided t-test"
WHY = ("unequal variances allowed; valid with a handful of seeds, where rank tests cannot reach 5%; "
       "see docs/significance.md")


def welch_p(values: Sequence[float], reference: Sequence[float], reference_exact: bool = False) -> float:
    """Two-sided p-value of Welch's t-test; NaN when either side has fewer than 2 seeds.

    A seed-free reference (``reference_exact``: one run of a configuration that no seed changes) is
    a known constant, not a sample: the row is then tested against it with a one-sample t-test.
    When both sides have no spread at all the t statistic is undefined: equal means give p = 1
    (nothing differs), different means NaN (no test is possible)."""
    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    if reference_exact and len(a) >= 2 and len(b) == 1:
        if np.ptp(a) == 0:
            return 1.0 if a[0] == b[0] else math.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(ttest_1samp(a, b[0]).pvalue)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0 if a[0] == b[0] else math.nan
    with warnings.catch_warnings():
        # Nearly identical seeds make scipy warn of precision loss; p is then near 1, as it should be.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_ind(a, b, equal_var=False).pvalue)


def is_significant(p_value: float) -> bool:
    return not math.isnan(p_value) and p_value < ALPHA


def p_text(p_value: float) -> str:
    """``0.012 *`` (significant at 5%), ``0.41``, or ``n/a`` where no test was possible."""
    if math.isnan(p_value):
        return "n/a"
    return f"{p_value:.3f}{' *' if is_significant(p_value) else ''}"


def note(metric: str, reference: str, tested: bool) -> str:
    """The line under a table that says which test was run (or why none was)."""
    if not tested:
        return "significance: one seed per row, so no test was possible (p needs >= 2 seeds per row)"
    return (f"p: {TEST_NAME} of {metric} against {reference!r} over seeds, * = significant at "
            f"{ALPHA:.0%} ({WHY}; against a seed-free reference, a one-sample t-test against its exact value)")


def add_p_values(frame: pd.DataFrame, metric: str = "test_avg_spearman") -> pd.DataFrame:
    """``p_value`` and ``p_reference`` columns for collected trials: each line of a sweep variant (its
    row and grid point, :mod:`reports.lines`) against the variant's first line, on ``metric`` over the
    latest FINISHED run of each seed. NaN where a side has fewer than 2 seeds."""
    frame = frame.assign(p_value=pd.Series(np.nan, index=frame.index, dtype="float64"),
                         p_reference=pd.Series(pd.NA, index=frame.index, dtype="string"))
    if frame.empty or metric not in frame.columns:
        return frame
    for _, variant in frame.groupby(["experiment", "spec_hash"], sort=False):
        variant = with_lines(variant)
        finished = latest_finished(variant)
        scores = {line: group[metric].dropna().astype(float).tolist() for line, group in finished.groupby("line")}
        lines = list(dict.fromkeys(variant["line"]))
        for line in lines:
            where = variant.index[variant["line"] == line]
            frame.loc[where, "p_value"] = welch_p(scores.get(line, []), scores.get(lines[0], []))
            frame.loc[where, "p_reference"] = lines[0]
    return frame
