"""Welch's t-test of a row against its reference row, in tables, CSV and collected results
(synthetic frames in reports.collect's schema; no Ray, no MLflow)."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest

from results.lines import add_p_values, sweep_table
from results.reader import identity_columns
from results.record import TrialIdentity
from results.render import to_csv, to_markdown
from results.significance import welch_p
from results.table import COLUMNS, SWEEP_COLUMNS


def trials(scores: dict[str, list[float]], sampled: dict[str, dict[str, float]] | None = None) -> pd.DataFrame:
    """One FINISHED trial per (row, seed) with ``test_avg_spearman`` = the given score (other metrics
    derived from it), trial ids in the rows' order as the plan gives them; ``sampled``: each row's sampled
    axes."""
    records, number = [], 0
    for row, values in scores.items():
        for seed, value in enumerate(values, start=1):
            record = {
                "experiment": "own", "spec_hash": "h1",
                **identity_columns(TrialIdentity("simcse", row, seed, sampled=(sampled or {}).get(row, {}))),
                "trial_id": f"t_{number:05d}", "run_id": f"r{number}", "status": "FINISHED",
                "start_time": pd.Timestamp(number, unit="s", tz="UTC"), "budget": "none", "model": "m",
            }
            record.update({COLUMNS[c].metric: value + i for i, c in enumerate(SWEEP_COLUMNS)})
            record["test_avg_spearman"] = value
            records.append(record)
            number += 1
    return pd.DataFrame.from_records(records)


def hand_p_three_vs_three() -> float:
    """[1, 2, 3] against [4, 5, 6]: t = -3 / sqrt(2/3), Welch's df = 4, and Student's t CDF for 4 degrees
    of freedom in closed form: F(x) = 1/2 + 3/8 * u * (1 - u^2 / 12), u = x / sqrt(1 + x^2 / 4)."""
    x = 3 / math.sqrt(2 / 3)
    u = x / math.sqrt(1 + x * x / 4)
    return 2 * (1 - (0.5 + 3 / 8 * u * (1 - u * u / 12)))


def test_hand_computed_p_value_on_a_small_frame():
    expected = hand_p_three_vs_three()
    assert welch_p([4, 5, 6], [1, 2, 3]) == pytest.approx(expected, rel=1e-9)
    frame = add_p_values(trials({"reference": [1, 2, 3], "other": [4, 5, 6]}))
    other = frame[frame["row"] == "other"]
    assert other["p_value"].tolist() == pytest.approx([expected] * 3, rel=1e-9)
    assert set(other["p_reference"]) == {"reference"}
    assert frame.loc[frame["row"] == "reference", "p_value"].tolist() == [1.0] * 3

    table = sweep_table(trials({"reference": [1, 2, 3], "other": [4, 5, 6]}))
    assert table.p_values["other"] == pytest.approx(expected, rel=1e-9)
    assert "| other | " in to_markdown(table) and f"{expected:.3f} *" in to_markdown(table)


def test_identical_seeds_are_not_significant_and_separated_rows_are():
    table = sweep_table(trials({"ref": [70.1, 70.9, 71.6], "same": [70.1, 70.9, 71.6],
                                "far": [80.2, 80.4, 80.1], "noisy": [69.0, 72.5, 71.0]}))
    assert table.p_values["same"] == pytest.approx(1.0)
    assert table.p_values["far"] < 0.01
    assert table.p_values["noisy"] > 0.05
    text = to_markdown(table)
    line = {row.split(" |")[0][2:]: row for row in text.splitlines() if row.startswith("| ")}
    assert line["ref"].endswith("| ref |")  # the reference line is marked
    assert line["same"].endswith("| 1.000 |") and line["far"].endswith(" * |") and not line["noisy"].endswith("* |")
    assert "Welch's two-sided t-test of Avg against 'ref'" in text  # under the table: which test, why


def test_one_seed_says_no_test_was_possible():
    table = sweep_table(trials({"a": [70.0], "b": [75.0]}))
    assert table.p_values == {}
    text = to_markdown(table)
    assert "one seed per row, so no test was possible" in text and "| p |" not in text.splitlines()[2]


def test_csv_carries_the_p_values():
    table = sweep_table(trials({"reference": [1, 2, 3], "other": [4, 5, 6]}))
    frame = pd.read_csv(io.StringIO(to_csv(table)))
    assert list(frame["row [grid point]"]) == ["reference", "other"]
    assert frame.loc[1, "p_value"] == pytest.approx(hand_p_three_vs_three(), rel=1e-9)
    assert bool(frame.loc[1, "significant"]) and math.isnan(frame.loc[0, "p_value"])
    assert frame.loc[1, "Avg mean"] == 5.0 and frame.loc[1, "Avg n"] == 3 and frame.loc[1, "Avg std"] == 1.0


def test_sampled_trials_are_lines_sorted_by_the_metric():
    sampled = {"a": {"learning_rate": 1e-05}, "b": {"learning_rate": 3e-05}, "c": {"learning_rate": 2e-05}}
    table = sweep_table(trials({"a": [60.0], "b": [70.0], "c": [65.0]}, sampled))
    assert [line.label for line in table.lines] == [f"{r} [learning_rate={sampled[r]['learning_rate']}]"
                                                    for r in ("b", "c", "a")]
    assert "sampled axes (learning_rate): one line per trial" in " ".join(table.notes)
    assert table.best_line("Dev") == 0
    assert "**70.00**" in to_markdown(table) and "- cells: each cell of ours is one seed's score" in to_markdown(table)


def test_a_seed_free_reference_is_an_exact_value_tested_with_one_sample():
    """Seeds 1, 2, 3 against the constant 2.5: t = (2 - 2.5) / (1 / sqrt 3); with 2 degrees of freedom the
    two-sided p has the closed form 1 - |t| / sqrt(t^2 + 2)."""
    t = -0.5 * math.sqrt(3)
    assert welch_p([1.0, 2.0, 3.0], [2.5], reference_exact=True) == pytest.approx(1 - abs(t) / math.sqrt(t * t + 2))
    assert math.isnan(welch_p([1.0, 2.0, 3.0], [2.5]))  # without the flag one value is no sample
