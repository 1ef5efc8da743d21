"""Reports from a real tiny sweep (the sweep engine, tiny BERT, tiny STS): collect, tables, plots."""

from __future__ import annotations

import shutil
import statistics
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from scipy.stats import ttest_1samp

from reports import collect as collect_module
from reports import plots, tables
from reports.cli import read_results
from reports.collect import collect, write
from reports.paper_tables import MissingResults, build_tables
from reports.plots import curve
from reports.table_specs import parse_table_spec
from results.figures import dev_curves, heatmap
from results.render import layout, legend, to_latex, to_markdown
from sweep.run.engine import SweepOptions, run
from tests.conftest import fresh_ray

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_bert, tiny_sts_dir):
    """Three sweeps through the engine: rows x seeds (baseline, SimCSE, a failing row), a
    layer x pooling grid and a layer curve. The rows sweep runs seeds 1, 2 of its 1, 2, 3 and
    is then resumed."""
    folder = tmp_path_factory.mktemp("reports")
    uri = f"sqlite:///{folder}/mlflow.db"
    broken = folder / "broken-model"
    broken.mkdir()
    shutil.copy(Path(tiny_bert) / "config.json", broken)  # a readable config, no weights
    rows_spec = {
        "name": "tiny_rows",
        "method": "simcse",
        "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 40, "max_steps": 3, "eval_every": 1},
        "reference": "simcse",
        "rows": [
            {"name": "untuned", "changes": ["method", "pooling"], "follows_method": ["eval_max_length"],
             "set": {"method": "none", "pooling": "mean"}},
            {"name": "simcse", "set": {}},
            {"name": "broken", "changes": ["model"], "set": {"model": str(broken)}},
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
    curve_spec = {"name": "tiny_curve", "method": "none", "base": {"model": tiny_bert, "pooling": "mean"},
                  "grid": {"pooling_layer": [0, 1, 2]}}
    paths = {}
    for spec in (rows_spec, grid_spec, curve_spec):
        paths[spec["name"]] = folder / f"{spec['name']}.yaml"
        paths[spec["name"]].write_text(yaml.safe_dump(spec), encoding="utf-8")
    storage = str(folder / "ray")
    rows_options = SweepOptions(str(paths["tiny_rows"]), {}, seeds=[1, 2], tracking_uri=uri, storage=storage)
    mp = pytest.MonkeyPatch()
    mp.setenv("STS_DATA_DIR", str(tiny_sts_dir))
    try:
        with fresh_ray():
            run(rows_options)  # seed 3 never runs: the tables must report it missing
            before_resume = collect(uri)
            run(rows_options)  # the same sweep again: Ray restores it, finished trials are kept
            for name in ("tiny_grid", "tiny_curve"):
                run(SweepOptions(str(paths[name]), {}, tracking_uri=uri, storage=storage))
    finally:
        mp.undo()
    return folder, uri, paths, before_resume


def specs_for(paths, project: Path) -> dict:
    raw = {
        "rows": {
            "title": "tiny rows", "kind": "rows", "spec": str(paths["tiny_rows"]),
            "paper": {"paper": "p", "table": "t", "model": "m", "rows": {"simcse": "SimCSE", "broken": None}},
            "columns": ["STS-B", "Avg", "Delta"], "delta": {"of": "Avg", "from": "untuned"},
            "rows": ["untuned", "simcse", "broken"],
        },
        "grid": {
            "title": "tiny grid", "kind": "grid", "spec": str(paths["tiny_grid"]), "index": "pooling_layer",
            "across": "pooling", "metric": "STS-B",
            "paper": {"paper": "p", "table": "f", "rows": {1: "layer 1"}, "columns": {"mean": "Mean"}},
        },
        "curve": {
            "title": "tiny curve", "kind": "grid", "spec": str(paths["tiny_curve"]), "index": "pooling_layer",
            "columns": ["STS-B"], "paper": {"paper": "p", "table": "f", "rows": {2: "layer 2"}},
        },
    }
    return {name: parse_table_spec(name, spec, project) for name, spec in raw.items()}


NUMBERS = {
    "p": {
        "t": {"rows": [
            {"row": "SimCSE", "model": "m", "values": {"Avg": 50.0, "Delta": 2.5}},
            {"row": "SimCSE", "model": "other", "values": {"Avg": 99.0}},
        ]},
        "f": {"rows": [{"row": "layer 1", "values": {"Mean": 40.0}}, {"row": "layer 2", "values": {"STS-B": 30.0}}]},
    }
}


def mlflow_metrics(uri: str, experiment: str, row: str | None = None) -> list[dict]:
    """Final metrics and params straight from MLflow, independently of reports.collect."""
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    where = "tags.`sweep.role` = 'trial'" + (f" and tags.`sweep.row` = '{row}'" if row else "")
    runs = client.search_runs([experiment_id], where)
    return [{**r.data.params, **r.data.metrics, "status": r.info.status} for r in runs]


def test_collect_types_params_and_keeps_failed_trials(sweep):
    _, uri, _, _ = sweep
    frame = collect(uri, ["tiny_rows"])
    assert len(frame) == 5  # the untuned row ran once for seeds 1 and 2
    assert {row: set(group["status"]) for row, group in frame.groupby("row")} == {
        "untuned": {"FINISHED"}, "simcse": {"FINISHED"}, "broken": {"FAILED"}
    }
    assert "broken-model" in frame.loc[frame["row"] == "broken", "error"].iloc[0]
    assert set(frame["seed"]) == {1, 2} and set(frame["budget"]) == {"none"} and frame["spec_hash"].nunique() == 1
    simcse = frame[frame["row"] == "simcse"].iloc[0]
    assert simcse["temperature"] == 0.05 and bool(simcse["mlp_during_training"])  # typed back
    assert str(frame["mlp_during_training"].dtype) == "boolean" and str(frame["temperature"].dtype) == "Float64"
    assert simcse["batch_size"] == 8 and simcse["steps"] == 3 and simcse["method"] == "simcse"
    assert pd.isna(frame.loc[frame["row"] == "untuned", "batch_size"]).all()  # not a knob of `none`
    parent = MlflowClient(uri).get_run(simcse["parent_run_id"])
    assert parent.data.tags["sweep.role"] == "parent"
    grid = collect(uri, ["tiny_grid"])
    assert "pooling=mean, pooling_layer=1" in set(grid["axes"]) and str(grid["pooling_layer"].dtype) == "Int64"


def test_collecting_twice_and_after_a_resume_gives_the_same_file(sweep, tmp_path):
    _, uri, _, before_resume = sweep
    first = read_results(write(collect(uri), tmp_path / "a.parquet"))
    second = read_results(write(collect(uri), tmp_path / "b.parquet"))
    pd.testing.assert_frame_equal(first, second)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert len(first) == 5 + 6 + 3 and not first.duplicated(["experiment", "trial_id"]).any()
    resumed = first[first["experiment"] == "tiny_rows"].reset_index(drop=True)[before_resume.columns]
    pd.testing.assert_frame_equal(resumed, before_resume.reset_index(drop=True))


def test_table_cells_are_mean_and_std_over_seeds(sweep):
    _, uri, paths, _ = sweep
    runs = {row: mlflow_metrics(uri, "tiny_rows", row) for row in ("untuned", "simcse")}
    avg = {row: [r["test_avg_spearman"] for r in found] for row, found in runs.items()}
    stsb = [r["test_stsb_spearman"] for r in runs["simcse"]]
    with pytest.warns(MissingResults) as caught:
        table = build_tables(collect(uri), ["rows"], specs_for(paths, Path.cwd()), NUMBERS)[0]
    warned = str(caught[0].message)
    assert "row 'simcse': 1 of 3 seeds missing: [3]" in warned and "row 'broken': 3 of 3 seeds missing" in warned
    assert "row 'untuned': 1 of 3 seeds missing: [3]" in warned  # its one run stands for seeds 1 and 2 only

    header, lines, bold = layout(table)
    assert header == ["row", "STS-B", "Avg", "Delta", "p"]
    simcse = next(i for i, line in enumerate(lines) if line[0] == "simcse")
    mean, std = statistics.mean(avg["simcse"]), statistics.stdev(avg["simcse"])
    # Every cell of ours that is not seed-free is over 2 seeds: the legend says so once, the cells do not.
    assert lines[simcse][1] == f"{statistics.mean(stsb):.2f} ± {statistics.stdev(stsb):.2f}"
    assert lines[simcse][2] == f"{mean:.2f} ± {std:.2f}"
    assert "cells: each cell of ours is the mean ± sample std over 2 seeds" in legend(table)
    delta = mean - statistics.mean(avg["untuned"])
    assert lines[simcse][3] == f"{delta:+.2f} ± {std:.2f}"
    untuned = next(line for line in lines if line[0] == "untuned")
    assert untuned[2] == f"{statistics.mean(avg['untuned']):.2f}†" and len(avg["untuned"]) == 1
    # The paper's line (model m, not 'other'): its figure and our difference from it.
    paper_line = ["paper (ours − paper)", "–", f"50.00 ({mean - 50.0:+.2f})", f"+2.50 ({delta - 2.5:+.2f})"]
    # The delta reference ('untuned') is seed-free, one exact value: a one-sample t-test against it.
    welch = ttest_1samp(avg["simcse"], avg["untuned"][0]).pvalue
    assert lines[simcse][4] == f"{welch:.3f}{' *' if welch < 0.05 else ''}"
    assert lines[0][4] == "ref" and lines[simcse + 1][4] == ""
    assert any(note.startswith("p: Welch's two-sided t-test of Avg against 'untuned'") for note in table.notes)
    assert lines[simcse + 1] == paper_line + [""]
    assert lines[-1] == ["broken", "–", "–", "–", "n/a"]  # failed trials are left out
    assert any("row 'broken': left out 2 FAILED" in note for note in table.notes)
    best = max(("untuned", "simcse"), key=lambda row: statistics.mean(avg[row]))
    best_line = next(i for i, line in enumerate(lines) if line[0] == best)
    assert (best_line, 2) in bold and (best_line, 3) in bold
    assert sum(j == 2 for _, j in bold) == 1
    assert f"**{lines[best_line][2]}**" in to_markdown(table)


def test_grid_heatmap_and_curves(sweep, tmp_path):
    _, uri, paths, _ = sweep
    specs = specs_for(paths, Path.cwd())
    grid, one_knob = build_tables(collect(uri), ["grid", "curve"], specs, NUMBERS)
    assert not grid.missing and not one_knob.missing
    assert "pooling_layer=0, pooling=cls: 1 of 1 finished trials logged no test_stsb_spearman" in grid.notes
    assert [line.label for line in grid.lines] == ["0", "1", "2"] and grid.columns == ["cls", "mean"]
    expected = {
        (int(r["pooling_layer"]), r["pooling"]): r.get("test_stsb_spearman") for r in mlflow_metrics(uri, "tiny_grid")
    }
    for line in grid.lines:
        for column in grid.columns:
            value = expected[(int(line.label), column)]
            # A constant vector (layer 0 [CLS]) has no Spearman: MLflow holds no value and the cell is "–".
            assert line.cells[column].values == (() if value is None else (value,))
    assert grid.lines[1].paper == {"mean": 40.0} and one_knob.lines[2].paper == {"STS-B": 30.0}
    curve_values = {int(r["pooling_layer"]): r["test_stsb_spearman"] for r in mlflow_metrics(uri, "tiny_curve")}
    assert [line.cells["STS-B"].values for line in one_knob.lines] == [(curve_values[k],) for k in (0, 1, 2)]
    for path in (heatmap(grid, tmp_path / "grid.png"), curve(one_knob, tmp_path / "curve.png"),
                 dev_curves(collect(uri), uri, "tiny_rows", tmp_path / "dev.png")):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_command_lines_end_to_end(sweep, tmp_path, capsys):
    _, uri, _, _ = sweep
    results = tmp_path / "results.parquet"
    assert collect_module.main(["--tracking-uri", uri, "--out", str(results)]) == 0
    assert "14 trials" in capsys.readouterr().out  # the seed-free row's seeds run once
    # The real table specs: none of their sweeps ran here. With no arguments no empty table is
    # rendered; one line names them, with the command that fills each.
    assert tables.main(["--results", str(results), "--format", "latex", "--out", str(tmp_path / "t")]) == 0
    assert not (tmp_path / "t").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning" not in err
    assert err.startswith("no results yet for: sg-bert-table1 (python -m sweep run search_spaces/sg_main.yaml; "
                          "python -m sweep run search_spaces/sg_bt.yaml)")
    assert ("sct-table4 (python -m sweep run search_spaces/sct_ablation.yaml; python -m sweep run "
            "search_spaces/sct_text_views.yaml; python -m sweep run search_spaces/sct_augmentations.yaml)") in err
    # The analyses of an encoder are named with the command that draws them; asked for by name, they are
    # refused (exit 2) with that command.
    assert "drawn from an encoder: sg-bert-figure5 (python -m reports.analyses tsne --encoder ENC)" in err
    assert "sct-table5 (python -m reports.analyses augmentations --encoder ENC --view synonym)" in err
    assert tables.main(["--results", str(results), "--table", "consert-figure1"]) == 2
    assert "consert-figure1 is drawn from an encoder: python -m reports.analyses gold-cosine" in capsys.readouterr().err
    assert tables.main(["--results", str(results), "--table", "sg-bert-table5"]) == 0
    assert "warning: sg-bert-table5: no finished trial of sweep 'sg_opt_ablation'" in capsys.readouterr().err
    # Any collected sweep by name, in every format.
    assert tables.main(["--results", str(results), "--sweep", "tiny_rows"]) == 0
    out = capsys.readouterr().out
    assert ("| untuned |" in out and "| simcse |" in out and "| broken | – |" in out
            and "broken: left out 2 FAILED" in out)
    assert tables.main(["--results", str(results), "--sweep", "tiny_grid", "--format", "csv",
                        "--out", str(tmp_path / "c")]) == 0
    grid_csv = pd.read_csv(next((tmp_path / "c").glob("tiny_grid-*.csv")))
    assert len(grid_csv) == 6 and "pooling=mean, pooling_layer=1" in set(grid_csv["row [grid point]"])
    assert tables.main(["--results", str(results), "--sweep", "nonesuch"]) == 2
    assert "sweep 'nonesuch' is not in the collected results" in capsys.readouterr().err
    assert plots.main(["--results", str(results), "--tracking-uri", uri, "--out", str(tmp_path / "p")]) == 0
    assert "consert-figure5: no results yet, no figure" in capsys.readouterr().err
    expected = {f"tiny_{name}_dev_curves.png" for name in ("rows", "grid", "curve")}
    assert {p.name for p in (tmp_path / "p").glob("*.png")} == expected
    for name in ("tiny_grid", "tiny_curve"):  # any sweep's plots: dev curves, and a heatmap or a curve of its grid
        assert plots.main(["--results", str(results), "--tracking-uri", uri, "--out", str(tmp_path / name),
                           "--sweep", name]) == 0
        drawn = sorted(p.name.split("_")[-1] for p in (tmp_path / name).glob("*.png"))
        assert drawn == ["curves.png", "grid.png"]
    assert tables.main(["--results", str(tmp_path / "absent.parquet")]) == 2


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_latex_of_a_sweep_table_compiles(sweep, tmp_path):
    _, uri, paths, _ = sweep
    with pytest.warns(MissingResults):
        rendered = [to_latex(t) for t in build_tables(collect(uri), None, specs_for(paths, Path.cwd()), NUMBERS)]
    assert "\\textbf{" in rendered[0] and "\\toprule" in rendered[0]
    preamble = "\\documentclass{article}\\usepackage{booktabs,graphicx}\\begin{document}"
    document = preamble + "".join(rendered) + "\\end{document}"
    (tmp_path / "t.tex").write_text(document, encoding="utf-8")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "t.pdf").is_file()
