"""A node of a real cluster dies under a running trial: the trial finishes on a node added after it, resumed
from its last checkpoint, in the same MLflow run, each evaluation step logged once.

A :class:`ray.cluster_utils.Cluster` whose head takes no trials (0 CPUs) and one worker node of 1 CPU runs a
sweep of one trial, driven by ``python -m sweep run`` in a process of its own, as on a real cluster. The
trial holds after its second evaluation (:mod:`tests.fault_helpers`, a hold in the worker only, so that the
node dies at a known step and the test needs no race against a fast trial); once the driver has recorded
that evaluation's checkpoint, the node is removed without grace (its raylet and the trial's process killed)
and a new node is added. Ray retries the trial on the new node (``max_failures: 1``) from the checkpoint.

It runs twice: with the storage a folder every node sees (as NFS is), and with a bucket (``s3://``, moto's S3
server on loopback, :mod:`tests.s3_endpoint`), where the new node reads the checkpoint the lost one stored.
"""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import ExitStack

import pytest

from tests.conftest import wait_for
from tests.fault_helpers import HOLDING_DRIVER, UNTIL_IT_HAPPENS, gone, held_file, hold_env, release
from tests.s3_endpoint import s3_endpoint

HOLD_STEP = 2
MAX_STEPS = 6


@pytest.mark.slow
@pytest.mark.parametrize("shared", ["folder", "bucket"])
def test_a_trial_whose_node_dies_finishes_on_a_new_node_from_its_checkpoint(shared, tmp_path, tiny_bert, use_tiny_sts,
                                                                            monkeypatch):
    import ray
    from mlflow import MlflowClient
    from ray.cluster_utils import Cluster

    from tests.test_sweep_run import ROOT, child_runs, spec_file

    holds, log = tmp_path / "holds", tmp_path / "driver.log"
    held = held_file(holds, HOLD_STEP)
    # The nodes' processes inherit these: the trial's workers import tests.fault_helpers and find the holds.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    for name, value in hold_env(holds, HOLD_STEP).items():
        monkeypatch.setenv(name, value)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # The endpoint's variables are in this process's environment while it runs: the driver and the nodes get them.
    endpoint = ExitStack()
    if shared == "bucket":
        endpoint.enter_context(s3_endpoint()).create_bucket("sweeps")
    storage = "s3://sweeps/sweeps" if shared == "bucket" else str(tmp_path / "storage")  # what every node sees
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
                [*HOLDING_DRIVER, "run", str(path),
                 "--tracking-uri", uri, "--storage", str(storage)],
                cwd=tmp_path, env={**os.environ, "RAY_ADDRESS": cluster.address}, stdout=output, stderr=output)

        def dev_steps(run_id: str) -> list[int]:
            return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, "dev_spearman"))

        def checkpointed_at_hold():  # the driver has recorded the checkpoint of the held step
            (run,) = child_runs(uri, "node-loss")
            return run if held.exists() and run.data.tags.get("sweep.checkpoint_step") == str(HOLD_STEP) else None

        before = wait_for(checkpointed_at_hold, UNTIL_IT_HAPPENS, log=log, driver=driver,
                          what=f"the trial held at step {HOLD_STEP}, its checkpoint recorded")
        lost = json.loads(held.read_text())
        assert lost["node_id"] == first.node_id  # not on the head
        assert dev_steps(before.info.run_id) == list(range(1, HOLD_STEP + 1))
        cluster.remove_node(first, allow_graceful=False)
        wait_for(lambda: gone(lost["pid"]), UNTIL_IT_HAPPENS, what="the trial's process ended with its node",
                 driver=driver, log=log)
        second = cluster.add_node(num_cpus=1)
        assert driver.wait() == 0, log.read_text()[-4000:]
    finally:
        release(holds, HOLD_STEP)
        if driver is not None and driver.poll() is None:
            driver.kill()
        ray.shutdown()
        cluster.shutdown()
        endpoint.close()

    (after,) = child_runs(uri, "node-loss")  # one MLflow run for the trial, before and after the loss
    assert after.info.run_id == before.info.run_id and after.info.status == "FINISHED"
    tags, metrics = after.data.tags, after.data.metrics
    assert tags["sweep.node_id"] == second.node_id != lost["node_id"]
    assert int(tags["sweep.worker_pid"]) != lost["pid"]
    assert tags["sweep.failures"] == "1"
    assert metrics["resumed_from_step"] == HOLD_STEP  # from the checkpoint of the held step, not from step 0
    assert f"checkpoint_{HOLD_STEP - 1:06d}" in tags["sweep.restored_from"]  # Ray's checkpoints count from 0
    # Read from the shared storage (Ray names a checkpoint in a bucket by its path there, without the scheme).
    assert tags["sweep.restored_from"].startswith(f"{storage}/node-loss-")
    assert metrics["steps"] == MAX_STEPS and "test_avg_spearman" in metrics
    assert dev_steps(after.info.run_id) == list(range(1, MAX_STEPS + 1))  # every evaluation step, each once
