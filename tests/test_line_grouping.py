"""Lines are grouped by their row and typed grid point, and paper tables compare their keys as values: two points
that print alike but differ (``1`` and ``"1"``) are two lines, each with its own seeds, never one."""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.paper_tables import build_table, texts
from reports.table_specs import parse_table_spec
from results.lines import label_lines, sweep_table
from results.reader import identity_columns
from results.record import TrialIdentity
from results.table import DELTA
from tests.conftest import write_spec


def trials(points: list[tuple[str, dict[str, Any], int, float]]) -> pd.DataFrame:
    """One FINISHED trial per (row, grid point, seed, test avg), in plan order."""
    return pd.DataFrame.from_records([{
        "experiment": "own", "spec_hash": "h1", "budget": "none", "model": "m",
        **identity_columns(TrialIdentity("simcse", row, seed, grid_point=point)), **point,
        "trial_id": f"t_{i:05d}", "run_id": f"r{i}", "status": "FINISHED",
        "start_time": pd.Timestamp(i, unit="s", tz="UTC"), "best_dev_spearman": avg + 10, "test_avg_spearman": avg,
    } for i, (row, point, seed, avg) in enumerate(points)])


def test_points_that_print_alike_are_lines_of_their_own():
    frame = trials([("r", {"x": 1}, 1, 60.0), ("r", {"x": 1}, 2, 61.0),
                    ("r", {"x": "1"}, 1, 70.0), ("r", {"x": "1"}, 2, 71.0), ("r", {"x": 2}, 1, 80.0)])
    assert set(frame["axes"]) == {"x=1", "x=2"}  # the runs' readable tag cannot tell them apart
    table = sweep_table(frame, ("Avg",))
    cells = {line.label: line.cells["Avg"].values for line in table.lines}
    assert cells == {"r [x=1]": (60.0, 61.0), "r [x='1']": (70.0, 71.0), "r [x=2]": (80.0,)}
    assert [line.point for line in table.lines][:2] == [{"x": 1}, {"x": "1"}]
    assert list(label_lines(frame)["line"]) == ["r [x=1]"] * 2 + ["r [x='1']"] * 2 + ["r [x=2]"]


def test_lines_that_differ_in_print_keep_their_plain_labels():
    frame = trials([("r", {"lr": 0.1}, 1, 60.0), ("r", {"lr": 0.10000001}, 1, 70.0), ("r", {"lr": 1}, 1, 75.0),
                    ("r", {"lr": 1.0}, 1, 80.0)])
    labels = [line.label for line in sweep_table(frame, ("Avg",)).lines]
    assert labels == ["r [lr=0.1]", "r [lr=0.10000001]", "r [lr=1]", "r [lr=1.0]"]


def test_paper_table_labels_and_delta_lines_compare_as_values():
    assert texts([1, "1", 2]) == ["1", "'1'", "2"] and texts([0.1, 0.10000001]) == ["0.1", "0.10000001"]


def test_a_delta_line_of_a_numeric_grid_is_found_by_its_value(tmp_path):
    """delta.rows names lines by their grid values (numbers here): each line's Delta is taken from its own
    reference line, found by value (a text compare found none and fell back to the table's reference)."""
    path = write_spec(tmp_path, {"name": "g", "method": "simcse", "seeds": [1], "grid": {"batch_size": [16, 32, 64]}})
    spec = parse_table_spec("g", {"kind": "grid", "spec": str(path), "index": "batch_size", "columns": ["Avg", DELTA],
                                  "delta": {"of": "Avg", "from": 16, "rows": {64: 32}}}, tmp_path)
    frame = trials([("", {"batch_size": size}, 1, avg) for size, avg in ((16, 60.0), (32, 70.0), (64, 75.0))])
    frame["experiment"] = "g"
    table = build_table(spec, frame, {})
    assert {line.label: line.cells[DELTA].values for line in table.lines} == {
        "16": (0.0,), "32": (10.0,), "64": (5.0,)}


def test_consert_table4_sets_each_batch_sizes_best_step_beside_its_steps_trained(tmp_path):
    """ConSERT Table 4's 'training steps' are not defined by the paper: the table gives the steps trained and the
    kept dev-best state's step, each read from its own trial's metric."""
    path = write_spec(tmp_path, {"name": "g", "method": "consert", "seeds": [1], "grid": {"batch_size": [16, 96]}})
    spec = parse_table_spec("g", {"kind": "grid", "spec": str(path), "index": "batch_size",
                                  "columns": ["Avg", "Steps", "Best step"]}, tmp_path)
    frame = trials([("", {"batch_size": size}, 1, avg) for size, avg in ((16, 60.0), (96, 70.0))])
    frame["experiment"], frame["steps"], frame["best_step"] = "g", [6200, 1600], [5800, 1400]
    table = build_table(spec, frame, {})
    assert {line.label: (line.cells["Steps"].values, line.cells["Best step"].values) for line in table.lines} == {
        "16": ((6200,), (5800,)), "96": ((1600,), (1400,))}
