"""``reports.importance`` on a real tiny ablation grid: the learning rate (a row each) moves the test average
beyond the seed noise; ``checkpoint_every`` (a grid axis), which changes no number a trial computes, does
not. The table, its bar plot and its CSV land on the sweep's parent run."""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow import MlflowClient

from reports import importance
from results.record import PARENT_FILTER, Summary
from sweep.commands.cli import main
from tests.conftest import spec_file

pytestmark = pytest.mark.slow
NO_OP = "checkpoint_every"
METRIC = "test_avg_spearman"
"""The tiny random BERT's dev Spearman (40 pairs) moves more between seeds than between these learning rates;
its test average over seven sets does not."""


def test_the_learning_rate_stands_above_seed_noise_and_a_no_op_knob_below_it(tmp_path, tiny_bert, tracking_uri,
                                                                           local_ray, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root (./mlruns) lands here
    path = spec_file(tmp_path, tiny_bert, "knobs",
                     rows=[{"name": "lr_low", "set": {"learning_rate": 1e-5, "pooling": "mean"}},
                           {"name": "lr_high", "set": {"learning_rate": 1e-3, "pooling": "mean"}}],
                     grid={NO_OP: [1, 2]}, seeds=[1, 2, 3], metric=METRIC)
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 0
    out = tmp_path / "out"
    assert importance.main(["knobs", "--tracking-uri", tracking_uri, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ANOVA, seeds as replicates" in printed

    effects = pd.read_csv(out / f"knobs-importance-{METRIC}.csv").set_index("name")
    assert list(effects.index) == ["row", NO_OP, f"row x {NO_OP}", "seeds (within point)"]
    assert effects.loc["row", "p"] < 0.05 and effects.loc["row", "f"] > 1
    assert effects.loc[NO_OP, "p"] >= 0.05 and effects.loc[f"row x {NO_OP}", "p"] >= 0.05
    assert effects.loc["row", "share"] > effects.loc["seeds (within point)", "share"] > effects.loc[NO_OP, "share"]
    assert effects["df"].tolist() == [1, 1, 1, 8]  # 2 rows x 2 values x 3 seeds: 12 - 4 points = 8 within

    client = MlflowClient(tracking_uri)
    (parent,) = client.search_runs([client.get_experiment_by_name("knobs").experiment_id], PARENT_FILTER)
    logged = {item.path.split("/")[-1] for item in client.list_artifacts(parent.info.run_id, Summary.IMPORTANCE)}
    assert logged == {f"knobs-importance-{METRIC}{suffix}" for suffix in (".png", ".md", ".tex", ".csv")}

    assert importance.main(["knobz", "--tracking-uri", tracking_uri, "--no-log"]) == 2
    assert importance.main(["knobs", "--tracking-uri", tracking_uri, "--metric", "nope", "--no-log"]) == 2
    refusals = capsys.readouterr().err.strip().splitlines()
    assert len(refusals) == 2 and "no MLflow experiment named 'knobz'" in refusals[0]
    assert refusals[1].startswith("--metric 'nope': not a metric of these trials")
