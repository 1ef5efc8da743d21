"""A searched sweep on the tiny BERT: Optuna's TPE over SimCSE's temperature and learning rate, each point
run with every seed, its summary naming the best point with its seeds' mean and spread."""

from __future__ import annotations

import pytest

from sweep.cli import main
from tests.conftest import child_runs, spec_file

pytestmark = pytest.mark.slow


def test_an_optuna_search_runs_each_point_with_every_seed(tmp_path, tracking_uri, tiny_bert, local_ray, capsys,
                                                          monkeypatch):
    path = spec_file(tmp_path, tiny_bert, "searched", rows=None, seeds=[1, 2],
                     sample={"temperature": {"loguniform": [0.02, 0.2]},
                             "learning_rate": {"loguniform": [1.0e-5, 1.0e-4]}},
                     search={"algorithm": "optuna", "trials": 2})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 0
    out = capsys.readouterr().out

    runs = child_runs(tracking_uri, "searched")
    assert len(runs) == 4 and {run.info.status for run in runs} == {"FINISHED"}
    points: dict[tuple[str, str], list[str]] = {}
    for run in runs:  # the values Tune's searcher chose reached the trained config
        points.setdefault((run.data.params["temperature"], run.data.params["learning_rate"]), []).append(
            run.data.tags["sweep.seed"])
    assert len(points) == 2 and all(sorted(seeds) == ["1", "2"] for seeds in points.values()), points
    note = next(line for line in out.splitlines() if "search (optuna, 2 points x 2 seeds): best point" in line)
    assert "best_dev_spearman" in note and "± " in note and "(2)" in note, note
