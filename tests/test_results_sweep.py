"""One p-value rule in every output, through a real tiny sweep (local Ray, tiny BERT, tiny STS files).

The sweep's first row is untuned (`none`: seed-free, one run stands for both
seeds); the two SimCSE rows have two seeds each. The summary, the `--sweep`
table and its CSV, `results.parquet` and a paper table of the same search
space must give each SimCSE row the same p: a one-sample t-test against the
untuned row's exact value.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from mlflow import MlflowClient
from scipy.stats import ttest_1samp

from reports import collect, tables
from reports.cli import read_results
from reports.paper_tables import build_tables
from reports.sweeps import sweep_tables
from reports.table_specs import parse_table_spec
from sweep.commands.cli import main
from tests.conftest import write_spec

pytestmark = pytest.mark.slow
ROWS = ["untuned", "simcse", "simcse_fast"]


def test_every_output_gives_each_line_the_same_p_against_a_seed_free_reference(tmp_path, tracking_uri, tiny_bert,
                                                                                local_ray, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root (./mlruns) lands here
    spec = {
        "name": "pvalues", "method": "simcse",
        "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 24, "max_steps": 2, "eval_every": 1},
        "rows": [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}}, {"name": "simcse", "set": {}},
                 {"name": "simcse_fast", "set": {"learning_rate": 0.001}}],
        "seeds": [1, 2], "resources": {"cpu": 1}, "max_concurrent_trials": 2,
    }
    path = write_spec(tmp_path, spec)
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 0
    summary = capsys.readouterr().out

    # Independently of the reports: the scores straight from MLflow, and scipy's one-sample test.
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("pvalues")
    runs = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'")
    scores = {row: [r.data.metrics["test_avg_spearman"] for r in runs if r.data.tags["sweep.row"] == row]
              for row in ROWS}
    assert [len(scores[row]) for row in ROWS] == [1, 2, 2]
    expected = {row: ttest_1samp(scores[row], scores["untuned"][0]).pvalue for row in ROWS[1:]}
    assert all(math.isfinite(p) for p in expected.values())

    results_file = tmp_path / "results.parquet"
    assert collect.main(["--tracking-uri", tracking_uri, "--out", str(results_file)]) == 0
    results = read_results(results_file)
    assert tables.main(["--results", str(results_file), "--sweep", "pvalues", "--format", "csv",
                        "--out", str(tmp_path / "csv")]) == 0
    sweep_csv = pd.read_csv(next((tmp_path / "csv").glob("pvalues-*.csv"))).set_index("row [grid point]")
    (sweep_table,) = sweep_tables(results, "pvalues")
    paper_spec = parse_table_spec("t", {"kind": "rows", "spec": str(path), "columns": ["Avg"], "rows": ROWS}, tmp_path)
    (paper_table,) = build_tables(results, ["t"], {"t": paper_spec}, {})
    parent = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'parent'")[0]
    summary_csv = pd.read_csv(client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path)))
    summary_csv = summary_csv.set_index("row [grid point]")

    for row in ROWS[1:]:
        found = {
            "summary.csv": summary_csv.loc[row, "p_value"],
            "--sweep table": sweep_table.p_values[row],
            "--sweep csv": sweep_csv.loc[row, "p_value"],
            "results.parquet": results.loc[results["row"] == row, "p_value"].unique().tolist(),
            "paper table": paper_table.p_values[row],
        }
        assert found.pop("results.parquet") == [pytest.approx(expected[row], rel=1e-9)]
        assert found == {name: pytest.approx(expected[row], rel=1e-9) for name in found}, row
        printed = next(line for line in summary.splitlines() if line.startswith(f"| {row} |"))
        assert printed.endswith(f"| {expected[row]:.3f}{' *' if expected[row] < 0.05 else ''} |")
    assert set(results["p_reference"]) == {"untuned"}
    assert "| untuned | 1 | 0 |" in summary and "† | ref |" in summary
    # The significance line says what was tested.
    note = next(line for line in summary.splitlines() if line.startswith("- p: "))
    assert "of Avg against 'untuned' over seeds" in note
    assert "'untuned' is seed-free (one run stands for every seed)" in note and "one-sample t-test" in note
    assert "one seed per row" not in summary
