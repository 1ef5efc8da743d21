"""The end-of-sweep summary tests each line against the spec's reference row (the row a paper's Δ is taken
from), not the first line, and names it: p-values recomputed here with scipy on the same numbers."""

from __future__ import annotations

import pytest
from scipy.stats import ttest_1samp, ttest_ind

from reports.sweeps import sweep_tables
from sweep.commands.summary import summary_markdown, summary_table
from sweep.spec.sweep_spec import load_spec
from tests.conftest import write_spec
from tests.test_results import trials

AVG = {"simcse": (70.0, 71.5, 72.5), "simcse_t": (68.0, 69.0, 69.5)}
UNTUNED = 60.0


def test_each_line_is_tested_against_the_specs_reference_row(tmp_path):
    path = write_spec(tmp_path, {
        "name": "temp", "method": "simcse", "seeds": [1, 2, 3], "reference": "simcse",
        "rows": [{"name": "untuned", "changes": ["method"], "follows_method": ["eval_max_length"],
                  "set": {"method": "none"}},
                 {"name": "simcse"},
                 {"name": "simcse_t", "changes": ["temperature"], "set": {"temperature": 0.1}}]})
    points = [("untuned", {}, 1, "FINISHED", UNTUNED)]
    points += [(row, {}, seed, "FINISHED", avg) for row, avgs in AVG.items() for seed, avg in zip((1, 2, 3), avgs)]
    frame = trials(path, points, seeds=(1, 2, 3))
    table = summary_table(frame, load_spec(path, check_environment=False))

    assert table.p_reference == "simcse"
    welch = ttest_ind(AVG["simcse_t"], AVG["simcse"], equal_var=False).pvalue
    assert table.p_values["simcse_t"] == pytest.approx(welch)
    # The seed-free untuned line is a constant: SimCSE's seeds are tested against its one value.
    assert table.p_values["untuned"] == pytest.approx(ttest_1samp(AVG["simcse"], UNTUNED).pvalue)
    text = summary_markdown(table, sampled=False)
    header = next(line for line in text.splitlines() if line.startswith("| row"))
    assert header.endswith("| p (Avg) vs simcse |")
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    assert rows["simcse"].endswith("| ref |")
    assert "- p: Welch's two-sided t-test of Avg against 'simcse' over seeds" in text
    # The report's table of the sweep (reports.tables --sweep, the paper report) tests by the same rule.
    (report,) = sweep_tables(frame, "temp")
    assert report.p_reference == "simcse" and report.p_values == pytest.approx(table.p_values)
