"""The MLflow Tune callback on its own (no Ray): run layout, dedup by trial id, end states."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from mlflow import MlflowClient

from sweep.spec.sweep_spec import load_spec
from sweep.tracking.tracker import MLflowTracker

SPEC = {
    "name": "tracking",
    "tags": {"paper": "test", "table": "t9"},
    "method": "simcse",
    "rows": [{"name": "tau = 0.1", "set": {"temperature": 0.1}}],
    "seeds": [3],
    "grid": {"learning_rate": [1e-5]},
}


def trial(trial_id: str, last_result: dict | None = None, error_file: str | None = None) -> SimpleNamespace:
    """A Tune trial as the tracker sees it: its config names its trial point (sweep.run.engine.param_space)."""
    return SimpleNamespace(
        trial_id=trial_id,
        config={"point": 0, "row": "tau = 0.1", "seed": 3, "learning_rate": 1e-5},
        last_result=last_result or {},
        error_file=error_file,
        error_msg=None,
        status="RUNNING",
        num_failures=2 if error_file else 0,
    )


def tracker(tmp_path: Path) -> tuple[MLflowTracker, MlflowClient]:
    path = tmp_path / "tracking.yaml"
    path.write_text(yaml.safe_dump(SPEC), encoding="utf-8")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    callback = MLflowTracker(load_spec(path), uri)
    callback.setup()
    return callback, MlflowClient(uri)


def test_child_run_layout_and_no_duplicate_on_a_second_driver(tmp_path):
    first, client = tracker(tmp_path)
    running = trial("t_0001")
    first.on_trial_start(0, [], running)
    first.on_trial_result(0, [], running, {"step": 10, "loss": 0.5, "dev_spearman": 0.7, "node_id": "n1", "seed": 3})

    run = client.search_runs([first.experiment_id], "tags.`sweep.role` = 'trial'")[0]
    tags, params = run.data.tags, run.data.params
    assert tags["mlflow.parentRunId"] == first.parent_run_id and tags["sweep.trial_id"] == "t_0001"
    assert (tags["sweep.row"], tags["sweep.seed"], tags["sweep.method"]) == ("tau = 0.1", "3", "simcse")
    assert tags["sweep.node_id"] == "n1" and tags["sweep.axes"] == "learning_rate=1e-05"
    assert params["temperature"] == "0.1" and params["method"] == "simcse" and "max_seq_length" in params
    assert run.data.metrics == {"step": 10.0, "loss": 0.5, "dev_spearman": 0.7}  # seed is a tag, not a metric

    # A new driver (after a crash) finds the same parent and the same child run.
    second, _ = tracker(tmp_path)
    assert second.parent_run_id == first.parent_run_id
    final = {"step": 20, "best_dev_spearman": 0.8, "test_avg_spearman": 0.6}
    resumed = trial("t_0001", last_result=final)
    second.on_trial_start(0, [], resumed)
    second.on_trial_result(0, [], resumed, final)
    second.on_trial_complete(0, [], resumed)
    runs = client.search_runs([first.experiment_id], "tags.`sweep.role` = 'trial'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss")] == [10]
    assert "sweep.stopped_by_scheduler" not in runs[0].data.tags

    # A third driver knows the trial is finished and logs nothing more for it.
    third, _ = tracker(tmp_path)
    assert set(third.finished_trials()) == {"t_0001"}
    third.on_trial_result(0, [], resumed, {"step": 20, "test_avg_spearman": 0.1})
    assert client.get_run(runs[0].info.run_id).data.metrics["test_avg_spearman"] == 0.6


def test_scheduler_stopped_and_failed_trials(tmp_path):
    callback, client = tracker(tmp_path)
    stopped = trial("t_stop", last_result={"step": 10, "dev_spearman": 0.2})
    callback.on_trial_start(0, [], stopped)
    callback.on_trial_complete(0, [], stopped)
    error_file = tmp_path / "error.txt"
    error_file.write_text("Traceback ...\nNonFiniteLossError: loss is nan at step 3" + "x" * 6000, encoding="utf-8")
    failed = trial("t_fail", error_file=str(error_file))
    callback.on_trial_start(0, [], failed)
    callback.on_trial_error(0, [], failed)
    callback.on_experiment_end([SimpleNamespace(status="TERMINATED"), SimpleNamespace(status="ERROR")])

    runs = {r.data.tags["sweep.trial_id"]: r
            for r in client.search_runs([callback.experiment_id], "tags.`sweep.role` = 'trial'")}
    assert runs["t_stop"].info.status == "FINISHED" and runs["t_stop"].data.tags["sweep.stopped_by_scheduler"] == "true"
    assert runs["t_fail"].info.status == "FAILED" and runs["t_fail"].data.tags["sweep.failures"] == "2"
    error = runs["t_fail"].data.tags["sweep.error"]
    assert "loss is nan at step 3" in error and len(error) == 5000
    parent = client.get_run(callback.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.failed_trials"] == "1"
    assert parent.data.tags["spec.table"] == "t9" and parent.info.run_name == "tracking"


def test_without_ray_state_unfinished_runs_are_killed_and_finished_ones_refuse_a_rerun(tmp_path):
    from sweep.run.engine import SweepOptions, run
    from sweep.spec.variants import UsageError

    callback, client = tracker(tmp_path)
    orphan = trial("t_orphan")
    callback.on_trial_start(0, [], orphan)
    callback.close_unfinished_runs()
    run_id = callback.runs.run_of(orphan.trial_id)
    assert client.get_run(run_id).info.status == "KILLED"
    assert "Ray kept no state" in client.get_run(run_id).data.tags["sweep.error"]

    done = trial("t_done", last_result={"test_avg_spearman": 0.5})
    callback.on_trial_start(0, [], done)
    callback.on_trial_complete(0, [], done)
    options = SweepOptions(str(tmp_path / "tracking.yaml"), {}, tracking_uri=callback.tracking_uri,
                           storage=str(tmp_path / "empty-ray-results"))
    with pytest.raises(UsageError, match="already holds 1 finished trials of sweep 'tracking'.*no Ray state"):
        run(options)  # refused before Ray starts, so nothing is duplicated
    assert len(client.search_runs([callback.experiment_id], "tags.`sweep.role` = 'trial'")) == 2


def test_the_final_report_tags_shared_outputs_and_the_precisions_used(tmp_path):
    callback, client = tracker(tmp_path)
    running = trial("t_0003")
    callback.on_trial_start(0, [], running)
    callback.on_trial_result(0, [], running, {"step": 2, "loss": 0.5})
    run = client.search_runs([callback.experiment_id], "tags.`sweep.role` = 'trial'")[0]
    assert not {"sweep.shared_frozen_outputs", "sweep.eval_precision"} & set(run.data.tags)
    final = {"step": 4, "test_avg_spearman": 50.0, "frozen_outputs_computed": 0, "frozen_outputs_reused": 96,
             "eval_precision": "bf16", "train_precision": "fp32"}
    callback.on_trial_result(0, [], running, final)
    run = client.get_run(run.info.run_id)
    assert run.data.tags["sweep.shared_frozen_outputs"] == "true"
    assert (run.data.tags["sweep.eval_precision"], run.data.tags["sweep.train_precision"]) == ("bf16", "fp32")
    assert run.data.metrics["frozen_outputs_reused"] == 96 and "eval_precision" not in run.data.metrics


def test_a_report_is_one_log_batch_call_with_its_metrics_and_tags(tmp_path, monkeypatch):
    callback, client = tracker(tmp_path)
    running = trial("t_0004")
    callback.on_trial_start(0, [], running)
    calls = []
    original = callback.client.log_batch
    monkeypatch.setattr(callback.client, "log_batch", lambda *a, **k: calls.append(k) or original(*a, **k))
    many = {f"test_set{i}_spearman": float(i) for i in range(1200)}  # more than one call can take
    callback.on_trial_result(0, [], running, {"step": 2, "loss": 0.5, "dev_spearman": 0.7, "node_id": "n1"})
    assert len(calls) == 1
    assert {m.key for m in calls[0]["metrics"]} == {"step", "loss", "dev_spearman"}
    assert [t.key for t in calls[0]["tags"]] == ["sweep.node_id"]
    callback.on_trial_result(0, [], running, {"step": 4, "test_avg_spearman": 50.0, **many})
    assert len(calls) == 3  # 1202 metrics: MLflow takes at most 1000 per call
    run = client.get_run(client.search_runs([callback.experiment_id], "tags.`sweep.role` = 'trial'")[0].info.run_id)
    assert run.data.metrics["test_set1199_spearman"] == 1199.0 and run.data.tags["sweep.node_id"] == "n1"
