"""End-to-end sweeps on a real local Ray, with the tiny BERT and tiny STS files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
from mlflow import MlflowClient

from sweep.commands.cli import main
from sweep.commands.status import trial_rows
from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, spec_file, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def test_sweep_tracks_every_trial_under_a_parent(tmp_path, tracking_uri, tiny_bert, local_ray):
    path = spec_file(tmp_path, tiny_bert, "e2e")
    run(SweepOptions(str(path), {"learning_rate": 1e-4}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray")))

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("e2e")
    parents = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'parent'")
    assert len(parents) == 1 and parents[0].data.tags["spec.table"] == "e2e"
    children = child_runs(tracking_uri, "e2e")
    assert len(children) == 3  # the untuned row cannot depend on the seed: one run stands for both
    assert {(r.data.tags["sweep.row"], r.data.tags["sweep.seed"]) for r in children} == {
        ("untuned", "1"), ("simcse", "1"), ("simcse", "2")
    }
    assert {r.data.tags["sweep.row"]: r.data.tags.get("sweep.seeds") for r in children} == {
        "untuned": "1,2", "simcse": ""
    }
    for child in children:
        tags, params, metrics = child.data.tags, child.data.params, child.data.metrics
        assert child.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert tags["sweep.spec_hash"] == parents[0].data.tags["sweep.spec_hash"]
        assert {"sweep.spec_file", "sweep.git_commit", "sweep.method", "sweep.trial_id"} <= set(tags)
        assert tags["sweep.eval_precision"] in ("fp32", "bf16")  # what eval_precision 'auto' became on the node
        assert params["model"] == tiny_bert and params["seed"] == tags["sweep.seed"]
        assert {f"test_{n}_spearman" for n in ("stsb", "sickr", "sts12", "sts16", "avg")} <= set(metrics)
        assert "wall_seconds" in metrics
        if tags["sweep.row"] == "simcse":
            # Full resolved config, not only what varied; --set reached the trial.
            assert params["temperature"] == "0.05" and params["learning_rate"] == "0.0001"
            history = client.get_metric_history(child.info.run_id, "dev_spearman")
            assert [m.step for m in history] == [2, 4]
            assert metrics["steps"] == 4 and "sentences_per_second" in metrics
    statuses = trial_rows("e2e", tracking_uri)
    assert len(statuses) == 3 and {s["state"] for s in statuses} == {"FINISHED"}


def test_failing_trial_is_retried_then_failed_and_others_finish(tmp_path, tracking_uri, tiny_bert, local_ray, capsys,
                                                                monkeypatch):
    broken = tmp_path / "broken-model"  # passes validation (a model's config), fails to load in the trial
    broken.mkdir()
    shutil.copy(Path(tiny_bert) / "config.json", broken)  # a readable config, no weights
    path = spec_file(
        tmp_path, tiny_bert, "faults",
        rows=[
            {"name": "broken", "set": {"model": str(broken)}},
            {"name": "simcse", "set": {}},
        ],
        seeds=[1],
        max_failures=1,
    )
    monkeypatch.chdir(tmp_path)
    # Through the command line: exit code 1 for a sweep whose trials failed, and a summary that says so.
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 1
    out = capsys.readouterr().out
    assert "1 trials finished, 1 failed" in out and "| broken | 0 | 1 | – | – |" in out and "| simcse | 1 | 0 |" in out
    runs = {r.data.tags["sweep.row"]: r for r in child_runs(tracking_uri, "faults")}
    assert runs["simcse"].info.status == "FINISHED" and "test_avg_spearman" in runs["simcse"].data.metrics
    assert runs["broken"].info.status == "FAILED"
    assert "broken-model" in runs["broken"].data.tags["sweep.error"]
    assert runs["broken"].data.tags["sweep.failures"] == "2"  # tried, retried once, then failed
    assert len(runs) == 2  # the retry logged into the same run


def driver(path: Path, uri: str, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    command = [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", uri,
               "--storage", str(tmp_path / "ray")]
    return command, {**os.environ, "PYTHONPATH": str(ROOT)}


def step_history(uri: str, run_id: str) -> list[int]:
    return [m.step for m in MlflowClient(uri).get_metric_history(run_id, "dev_spearman")]


def test_killed_driver_resumes_without_duplicates_and_from_checkpoints(tmp_path, tracking_uri, tiny_bert, use_tiny_sts):
    path = spec_file(
        tmp_path, tiny_bert, "killed",
        rows=[{"name": f"simcse {i}", "set": {"max_steps": 60, "eval_every": 4, "epochs": 10}} for i in range(3)],
        seeds=[1, 2],
        max_concurrent_trials=1,
    )
    command, env = driver(path, tracking_uri, tmp_path)
    log = (tmp_path / "driver.log").open("w")
    process = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stdout=log, stderr=log)

    def mid_trial():
        runs = child_runs(tracking_uri, "killed")
        finished = [r for r in runs if r.info.status == "FINISHED"]
        running = [r for r in runs
                   if r.info.status == "RUNNING" and int(r.data.tags.get("sweep.checkpoint_step", 0)) >= 8]
        return (finished, running[0]) if len(finished) >= 2 and running else None

    finished, cut = wait_for(mid_trial, log=tmp_path / "driver.log")
    # Ray writes its experiment state, which names each trial's latest checkpoint, at most every
    # TUNE_GLOBAL_CHECKPOINT_S (1 s, sweep.run.engine): the kill waits for a state written after the checkpoint.
    seen = time.time()
    states = tmp_path / "ray"
    wait_for(lambda: any(state.stat().st_mtime > seen for state in states.glob("*/experiment_state-*.json")), 30)
    os.killpg(process.pid, signal.SIGKILL)  # the driver and the Ray it started die at once
    process.wait()
    before = {r.data.tags["sweep.trial_id"]: r.info.run_id for r in child_runs(tracking_uri, "killed")
              if r.info.status == "FINISHED"}
    assert 2 <= len(before) < 6, f"the sweep should be cut off part way, {len(before)} trials had finished"
    assert cut.data.tags["sweep.trial_id"] not in before

    resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    runs = child_runs(tracking_uri, "killed")
    trial_ids = [r.data.tags["sweep.trial_id"] for r in runs]
    assert len(trial_ids) == len(set(trial_ids)) == 6
    assert all(r.info.status == "FINISHED" for r in runs)
    after = {r.data.tags["sweep.trial_id"]: r for r in runs}
    for trial_id, run_id in before.items():  # finished trials were not run again
        assert after[trial_id].info.run_id == run_id
        assert len(MlflowClient(tracking_uri).get_metric_history(run_id, "test_avg_spearman")) == 1
    continued = after[cut.data.tags["sweep.trial_id"]]
    assert continued.info.run_id == cut.info.run_id  # still one MLflow run
    assert continued.data.metrics["resumed_from_step"] >= 8  # continued from its checkpoint, not from step 0
    assert step_history(tracking_uri, continued.info.run_id) == list(range(4, 61, 4))  # each step once


def test_lost_worker_is_retried_from_its_checkpoint(tmp_path, tracking_uri, tiny_bert, use_tiny_sts):
    path = spec_file(tmp_path, tiny_bert, "lost",
                     rows=[{"name": "simcse", "set": {"max_steps": 60, "eval_every": 4, "epochs": 10}}],
                     seeds=[1], max_failures=1)
    command, env = driver(path, tracking_uri, tmp_path)
    process = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        run = wait_for(lambda: next((r for r in child_runs(tracking_uri, "lost")
                                     if int(r.data.tags.get("sweep.checkpoint_step", 0)) >= 8), None))
        os.kill(int(run.data.tags["sweep.worker_pid"]), signal.SIGKILL)
        _, stderr = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr[-3000:]
    (retried,) = child_runs(tracking_uri, "lost")
    assert retried.info.status == "FINISHED" and retried.data.tags["sweep.failures"] == "1"
    assert retried.data.metrics["resumed_from_step"] >= 8
    assert "checkpoint_" in retried.data.tags["sweep.restored_from"]
    assert step_history(tracking_uri, retried.info.run_id) == list(range(4, 61, 4))


def test_trials_are_placed_on_both_nodes_of_a_cluster(tmp_path, tiny_bert, use_tiny_sts):
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()  # otherwise the first trial actor, reused, may run every trial before node 2 joins
    try:
        uri = f"sqlite:///{tmp_path}/mlflow.db"
        path = spec_file(tmp_path, tiny_bert, "cluster", seeds=[1, 2, 3])
        run(SweepOptions(str(path), {}, address=cluster.address, tracking_uri=uri, storage=str(tmp_path / "ray")))
        runs = child_runs(uri, "cluster")
        assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)  # untuned once, simcse x 3 seeds
        nodes = {r.data.tags["sweep.node_id"] for r in runs}
        assert nodes == {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert len(nodes) == 2
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.parametrize("left", [0, 2])
def test_a_grid_that_ray_ended_short_without_a_signal_exits_1_saying_so(left, monkeypatch, capsys):
    """Trials left at the end with no signal and no store outage: Ray Tune ended the experiment without them
    (the CI once saw a resumed grid end with 3 of its 6 trials). The driver says how many, and exits 1."""
    from sweep.commands.cli import _summarise
    from sweep.run.engine import SweepOutcome
    from sweep.spec.sweep_spec import load_spec

    monkeypatch.setattr("sweep.commands.summary.finish_sweep", lambda spec, uri: "")
    spec = load_spec(ROOT / "search_spaces" / "smoke.yaml")
    outcome = SweepOutcome(results=[], stopped_by=None, trials_left=left, resume_command="python -m sweep resume")
    assert _summarise(outcome, spec, SimpleNamespace(tracking_uri="sqlite:///unused.db")) == (1 if left else 0)
    err = capsys.readouterr().err
    assert (f"error: 2 of the spec's {spec.trials_to_run} trials never ran" in err) == bool(left)
