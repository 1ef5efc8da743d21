"""An adaptive-seed sweep on the tiny BERT: a row clearly different from the reference row stops after its
first seeds, a row identical in numbers (it changes only where checkpoints are written) gets every seed,
and the summary says for each row how many seeds it took and why it stopped."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from sweep.commands.cli import main
from tests.conftest import child_runs
from tests.test_seed_rounds import adaptive_spec

pytestmark = pytest.mark.slow


def test_only_the_undecided_row_gets_more_seeds(tmp_path, tracking_uri, tiny_bert, local_ray, capsys, monkeypatch):
    # or_above 1: no p shows "no difference", so only a difference decides a row (identical numbers give p = 1).
    path = adaptive_spec(tmp_path, tiny_bert, {"p": 0.01, "or_above": 1.0})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 0
    out = capsys.readouterr().out

    seeds: dict[str, list[int]] = {}
    for run in child_runs(tracking_uri, "adaptive"):
        assert run.info.status == "FINISHED"
        seeds.setdefault(run.data.tags["sweep.row"], []).append(int(run.data.tags["sweep.seed"]))
    assert {row: sorted(found) for row, found in seeds.items()} == {
        "reference": [1, 2, 3, 4, 5], "clear": [1, 2, 3], "same": [1, 2, 3, 4, 5]}, out
    assert "clear: 3 seeds (1, 2, 3); differs: p = " in out
    assert "same: 5 seeds (1, 2, 3, 4, 5); undecided when the seeds ran out: p = 1" in out
    assert "13 trials finished, 0 failed" in out
    client = MlflowClient(tracking_uri)  # the trials the rows did not need are not left to run
    (parent,) = client.search_runs([client.get_experiment_by_name("adaptive").experiment_id],
                                   "tags.`sweep.role` = 'parent'")
    assert parent.info.status == "FINISHED"
