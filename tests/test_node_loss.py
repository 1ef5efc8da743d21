"""A node of a real cluster dies under a running trial: the trial finishes on a node added after it, resumed
from its last checkpoint, in the same MLflow run, each evaluation step logged once.

A :class:`ray.cluster_utils.Cluster` whose head takes no trials (0 CPUs) and one worker node of 1 CPU runs a
sweep of one trial, driven by ``python -m sweep run`` in a process of its own, as on a real cluster. The
trial holds after its second evaluation (:func:`held_sweep_trial`, a hold in the worker only, so that the
node dies at a known step and the test needs no race against a fast trial); once the driver has recorded
that evaluation's checkpoint, the node is removed without grace (its raylet and the trial's process killed)
and a new node is added. Ray retries the trial on the new node (``max_failures: 1``) from the checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for

HOLD_FILE_ENV = "SWEEP_TEST_HOLD_FILE"
"""The file where a held trial says where it is held; the trial goes on once ``<file>.release`` exists."""
HOLD_STEP = 2
MAX_STEPS = 6


def _hold_after_report(report):
    """``RaySession.report`` that, in a trial not restored from a checkpoint, holds after the report of
    evaluation step :data:`HOLD_STEP` (its checkpoint then stored and handed to Ray) until released."""

    def report_and_hold(self, metrics, checkpoint=None):
        import ray

        report(self, metrics, checkpoint)
        if metrics.get("step") != HOLD_STEP or "test_avg_spearman" in metrics or self.worker.get("restored_from"):
            return
        held = Path(os.environ[HOLD_FILE_ENV])
        held.write_text(json.dumps({"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}))
        release = held.with_name(held.name + ".release")
        while not release.exists():  # until the node dies (or the test gives up and releases it)
            time.sleep(0.1)

    report_and_hold.held = True
    return report_and_hold


def held_sweep_trial(params, spec, finished, **given) -> None:
    """The sweep's trainable (:func:`sweep.trial.run_sweep_trial`), with the hold in place in its worker."""
    import sweep.trial as trial

    if not getattr(trial.RaySession.report, "held", False):
        trial.RaySession.report = _hold_after_report(trial.RaySession.report)
    trial.run_sweep_trial(params, spec, finished, **given)


def drive() -> None:
    """``python -m sweep`` with the held trainable: the driver process of this test."""
    import sweep.engine as engine
    from sweep.cli import main

    engine.run_sweep_trial = held_sweep_trial
    sys.exit(main(sys.argv[1:]))


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.slow
def test_a_trial_whose_node_dies_finishes_on_a_new_node_from_its_checkpoint(tmp_path, tiny_bert, use_tiny_sts,
                                                                            monkeypatch):
    import ray
    from mlflow import MlflowClient
    from ray.cluster_utils import Cluster

    from tests.test_sweep_run import ROOT, child_runs, spec_file

    held, log = tmp_path / "held.json", tmp_path / "driver.log"
    # The nodes' processes inherit these: the trial's workers import this module and find the hold file.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(HOLD_FILE_ENV, str(held))
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", tmp_path / "storage"  # storage: a folder every node sees
    path = spec_file(tmp_path, tiny_bert, "node-loss", seeds=[1], max_failures=1,
                     rows=[{"name": "simcse", "set": {"max_steps": MAX_STEPS, "eval_every": 1,
                                                      "checkpoint_every": 1}}])

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})  # the head takes no trial
    driver = None
    try:
        first = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        with log.open("w") as output:
            driver = subprocess.Popen(
                [sys.executable, "-c", "from tests.test_node_loss import drive; drive()", "run", str(path),
                 "--tracking-uri", uri, "--storage", str(storage)],
                cwd=tmp_path, env={**os.environ, "RAY_ADDRESS": cluster.address}, stdout=output, stderr=output)

        def dev_steps(run_id: str) -> list[int]:
            return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, "dev_spearman"))

        def checkpointed_at_hold():  # the driver has recorded the checkpoint of the held step
            (run,) = child_runs(uri, "node-loss")
            return run if held.exists() and run.data.tags.get("sweep.checkpoint_step") == str(HOLD_STEP) else None

        before = wait_for(checkpointed_at_hold, 240, log=log, driver=driver,
                          what=f"the trial held at step {HOLD_STEP}, its checkpoint recorded")
        lost = json.loads(held.read_text())
        assert lost["node_id"] == first.node_id  # not on the head
        assert dev_steps(before.info.run_id) == list(range(1, HOLD_STEP + 1))
        cluster.remove_node(first, allow_graceful=False)
        wait_for(lambda: gone(lost["pid"]), 60, what="the trial's process ended with its node", driver=driver, log=log)
        second = cluster.add_node(num_cpus=1)
        assert driver.wait(timeout=400) == 0, log.read_text()[-4000:]
    finally:
        held.with_name(held.name + ".release").touch()
        if driver is not None and driver.poll() is None:
            driver.kill()
        ray.shutdown()
        cluster.shutdown()

    (after,) = child_runs(uri, "node-loss")  # one MLflow run for the trial, before and after the loss
    assert after.info.run_id == before.info.run_id and after.info.status == "FINISHED"
    tags, metrics = after.data.tags, after.data.metrics
    assert tags["sweep.node_id"] == second.node_id != lost["node_id"]
    assert int(tags["sweep.worker_pid"]) != lost["pid"]
    assert tags["sweep.failures"] == "1"
    assert metrics["resumed_from_step"] == HOLD_STEP  # from the checkpoint of the held step, not from step 0
    assert f"checkpoint_{HOLD_STEP - 1:06d}" in tags["sweep.restored_from"]  # Ray's checkpoints count from 0
    assert metrics["steps"] == MAX_STEPS and "test_avg_spearman" in metrics
    assert dev_steps(after.info.run_id) == list(range(1, MAX_STEPS + 1))  # every evaluation step, each once
