"""Reports from a real tiny sweep: collect, tables, plots."""

from __future__ import annotations

import shutil
import statistics
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import ray
import yaml
from mlflow import MlflowClient

from reports.collect import collect, write
from reports.plots import dev_curves, heatmap
from reports.tables import MissingResults, build_tables, to_latex, to_markdown
from sweep.engine import SweepOptions, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_bert, tiny_sts_dir):
    """Two sweeps: rows x seeds of SimCSE/baseline, and a layer x pooling grid."""
    folder = tmp_path_factory.mktemp("reports")
    uri = f"sqlite:///{folder}/mlflow.db"
    broken = folder / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}", encoding="utf-8")
    rows_spec = {
        "name": "tiny_rows",
        "method": "simcse",
        "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 40, "max_steps": 3, "eval_every": 3},
        "rows": [
            {"name": "untuned", "set": {"method": "none", "pooling": "mean"}},
            {"name": "simcse", "set": {}},
            {"name": "broken", "set": {"model": str(broken)}},
        ],
        "seeds": [1, 2, 3],
        "max_failures": 0,
    }
    grid_spec = {
        "name": "tiny_grid",
        "method": "none",
        "base": {"model": tiny_bert},
        "grid": {"pooling_layer": [0, 1, 2], "pooling": ["cls", "mean"]},
    }
    paths = {}
    for spec in (rows_spec, grid_spec):
        paths[spec["name"]] = folder / f"{spec['name']}.yaml"
        paths[spec["name"]].write_text(yaml.safe_dump(spec), encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("STS_DATA_DIR", str(tiny_sts_dir))
    ray.shutdown()
    try:
        # Seed 3 is never run: the table must report it missing.
        run(SweepOptions(str(paths["tiny_rows"]), {}, seeds=[1, 2], tracking_uri=uri, storage=str(folder / "ray")))
        run(SweepOptions(str(paths["tiny_grid"]), {}, tracking_uri=uri, storage=str(folder / "ray")))
    finally:
        ray.shutdown()
        mp.undo()
    return folder, uri, paths


def table_specs(paths):
    return {
        "rows": {
            "title": "tiny rows", "spec": str(paths["tiny_rows"]), "kind": "rows", "columns": ["STS-B", "Avg"],
            "paper": {"paper": "p", "table": "t"},
            "rows": [{"row": "untuned"}, {"row": "simcse", "paper_row": "SimCSE"}, {"row": "broken"}],
        },
        "grid": {"title": "tiny grid", "spec": str(paths["tiny_grid"]), "kind": "grid", "metric": "STS-B",
                 "index": "pooling_layer", "columns": "pooling"},
    }


NUMBERS = {"p": {"t": {"rows": [{"row": "SimCSE", "values": {"Avg": 50.0}}]}}}


def test_collect_types_params_and_keeps_failed_trials(sweep):
    folder, uri, _ = sweep
    frame = collect(uri, ["tiny_rows"])
    assert len(frame) == 6
    assert {row: set(group["status"]) for row, group in frame.groupby("row")} == {
        "untuned": {"FINISHED"}, "simcse": {"FINISHED"}, "broken": {"FAILED"}
    }
    assert "broken-model" in frame.loc[frame["row"] == "broken", "error"].iloc[0]
    simcse = frame[frame["row"] == "simcse"].iloc[0]
    assert simcse["temperature"] == 0.05 and bool(simcse["mlp_during_training"])  # typed back
    assert str(frame["mlp_during_training"].dtype) == "boolean" and str(frame["temperature"].dtype) == "Float64"
    assert simcse["batch_size"] == 8 and simcse["steps"] == 3
    assert pd.isna(frame.loc[frame["row"] == "untuned", "batch_size"]).all()  # not a knob of `none`


def test_collecting_twice_gives_the_same_file(sweep, tmp_path):
    _, uri, _ = sweep
    first = write(collect(uri), tmp_path / "a.parquet")
    second = write(collect(uri), tmp_path / "b.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(first), pd.read_parquet(second))
    frame = pd.read_parquet(first)
    assert len(frame) == 6 + 6 and not frame.duplicated(["experiment", "trial_id"]).any()


def test_table_cells_are_mean_and_std_over_seeds(sweep):
    _, uri, paths = sweep
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny_rows")
    runs = client.search_runs([experiment.experiment_id], "tags.`sweep.row` = 'simcse'")
    values = [r.data.metrics["test_avg_spearman"] for r in runs]
    with pytest.warns(MissingResults, match=r"row 'simcse': 1 of 3 seeds missing: \[3\]"):
        table = build_tables(collect(uri), ["rows"], table_specs(paths), NUMBERS)[0]
    simcse_line = table.lines[2]
    assert simcse_line[0] == "simcse"
    assert simcse_line[2] == f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} (2)"
    assert table.lines[3][2] == f"50.00 ({statistics.mean(values) - 50.0:+.2f})"
    assert table.lines[4][1:] == ["–", "–"]  # failed trials are left out of the tables
    assert any("row 'broken': 3 of 3 seeds missing" in note for note in table.notes)
    markdown = to_markdown(table)
    best = max(range(0, 6, 2), key=lambda i: float(table.lines[i][2].split()[0]) if table.lines[i][2] != "–" else -1e9)
    assert f"**{table.lines[best][2]}**" in markdown


def test_grid_table_and_heatmap(sweep, tmp_path):
    _, uri, paths = sweep
    table = build_tables(collect(uri), ["grid"], table_specs(paths), NUMBERS)[0]
    assert [line[0] for line in table.lines] == ["0", "1", "2"] and table.header[1:] == ["cls", "mean"]
    frame = collect(uri, ["tiny_grid"])
    expected = frame[(frame["pooling_layer"] == 1) & (frame["pooling"] == "mean")]["test_stsb_spearman"].iloc[0]
    assert table.lines[1][2] == f"{expected:.2f} ± 0.00 (1)"
    png = heatmap(table, tmp_path / "grid.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = dev_curves(collect(uri), uri, "tiny_rows", tmp_path / "curves.png")
    assert curves.stat().st_size > 1000


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_latex_compiles(sweep, tmp_path):
    _, uri, paths = sweep
    with pytest.warns(MissingResults):
        table = build_tables(collect(uri), ["rows"], table_specs(paths), NUMBERS)[0]
    document = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}" + to_latex(table) + "\\end{document}"
    (tmp_path / "t.tex").write_text(document, encoding="utf-8")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "t.tex"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "t.pdf").is_file()
