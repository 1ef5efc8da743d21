"""``sweep evaluate`` whose tracking server goes away after an evaluation is computed: a real ``mlflow server``
on loopback (:class:`tests.test_tracking_outage.Server`), stopped right after the first trial's evaluation (an
event, not a clock). What was computed is kept in the command's journal, the command says so and exits 75
(EX_TEMPFAIL); the same command, once the server answers, logs it into each trial's run and computes nothing
again."""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient

import sweep.commands.evaluate as evaluate
from sweep.commands.cli import main
from sweep.run.engine import SweepOptions, run
from sweep.tracking.journal import EXIT_TRACKING_GONE
from tests.conftest import child_runs, fresh_ray, spec_file
from tests.test_sweep_evaluate import PEARSON, multilingual_fixture
from tests.test_tracking_outage import Server


@pytest.mark.slow
def test_evaluations_computed_while_the_server_is_gone_are_kept_and_logged_by_the_next_call(
        tmp_path, tiny_bert, tiny_sts_dir, monkeypatch, capsys):
    monkeypatch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
    monkeypatch.setenv(evaluate.EVALUATIONS_DIR_ENV, str(tmp_path / "waiting"))
    # A stopped server refuses at once: MLflow's retries are cut by their count.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    server = Server(tmp_path)
    server.start()
    try:
        path = spec_file(tmp_path, tiny_bert, "kept", rows=[{"name": "simcse", "set": {}}], seeds=[1, 2],
                         keep_models="all", max_concurrent_trials=1)
        with fresh_ray():
            run(SweepOptions(str(path), {}, tracking_uri=server.url, storage=str(tmp_path / "ray")))
        monkeypatch.setenv("MULTILINGUAL_STS_DATA_DIR", str(multilingual_fixture(tmp_path / "ml", tiny_sts_dir)))
        command = ["evaluate", "kept", "--suite", "multilingual_sts", "--tracking-uri", server.url]
        computed, real = [], evaluate.evaluate_run

        def evaluate_then_lose_the_server(trial_run, suite):
            metrics = real(trial_run, suite)
            computed.append((trial_run.info.run_id, metrics))
            if len(computed) == 1:
                server.stop()
            return metrics

        capsys.readouterr()
        with monkeypatch.context() as patch:
            patch.setattr(evaluate, "evaluate_run", evaluate_then_lose_the_server)
            assert main(command) == EXIT_TRACKING_GONE
        out = capsys.readouterr().out
        assert out.count("kept until the server answers") == 2 and "Traceback" not in out
        assert "run the same `sweep evaluate` again to log them (nothing is computed again)" in out
        (journal,) = (tmp_path / "waiting").glob("*.json")
        assert [event["run_id"] for event in json.loads(journal.read_text())] == [r for r, _ in computed]

        server.start()
        with monkeypatch.context() as patch:
            patch.setattr(evaluate, "evaluate_run", lambda trial_run, suite: pytest.fail("computed again"))
            assert main(command) == 0
        assert capsys.readouterr().out.count("not computed again") == 2
        assert not journal.exists()
        client = MlflowClient(server.url)
        for run_id, metrics in computed:
            logged = client.get_run(run_id).data.metrics
            assert logged[PEARSON["sts14_es"]] == metrics[PEARSON["sts14_es"]]
            assert len(client.get_metric_history(run_id, PEARSON["sts14_es"])) == 1  # logged once
        assert len(child_runs(server.url, "kept")) == 2
    finally:
        server.stop()
