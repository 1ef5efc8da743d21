"""A sweep whose storage is a bucket (``--storage s3://BUCKET/sweeps``), against moto's S3 server on loopback
(:mod:`tests.s3_endpoint`), reached as any S3 endpoint is, through ``AWS_ENDPOINT_URL``:

- the trials' checkpoints and the sweep's record (``sweep.json``) are written to the bucket, none to a local
  folder, and the parent MLflow run names the sweep's folder there;
- a driver killed mid-trial is resumed with ``sweep resume NAME --storage s3://...`` from a fresh working
  folder: the record and the checkpoints are found in the bucket, the trial continues in its own MLflow run
  from the checkpoint of the step it was killed at, and each evaluation step is logged once;
- a bucket that does not exist, credentials the endpoint refuses and an endpoint that does not answer are
  refused before anything runs: exit 2, one line on stderr naming what is wrong and what was expected.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import ray
from mlflow import MlflowClient

from results.record import Tag
from sweep.commands.cli import main
from tests.conftest import child_runs, spec_file, wait_for
from tests.fault_helpers import HOLDING_DRIVER, UNTIL_IT_HAPPENS, held_file, hold_env, release
from tests.s3_endpoint import s3_endpoint
from trainers.training.checkpoint import CHECKPOINT_SEAL

BUCKET = "sweeps"
STORAGE = f"s3://{BUCKET}/sweeps"
ROOT = Path(__file__).resolve().parent.parent
HOLD_STEP, MAX_STEPS = 3, 6


def parent_run(uri: str, name: str):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    (run,) = client.search_runs([experiment.experiment_id], f"tags.`{Tag.ROLE}` = 'parent'")
    return run


def dev_steps(uri: str, run_id: str) -> list[int]:
    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, "dev_spearman"))


def bucket_key(uri: str) -> str:
    """The key (prefix) in the bucket of an ``s3://BUCKET/KEY`` URI."""
    assert uri.startswith(f"s3://{BUCKET}/"), uri
    return uri[len(f"s3://{BUCKET}/"):].rstrip("/")


def local_checkpoints(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("checkpoint_*") if path.is_dir()]


@pytest.mark.slow
def test_a_sweep_on_a_bucket_checkpoints_there_and_its_parent_run_names_it(tmp_path, tiny_bert, local_ray,
                                                                           monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a relative local path the sweep wrote to would land here
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = spec_file(tmp_path, tiny_bert, "on-s3", seeds=[1])
    with s3_endpoint() as endpoint:
        endpoint.create_bucket(BUCKET)
        assert main(["run", str(path), "--storage", STORAGE, "--tracking-uri", uri]) == 0, capsys.readouterr()
        keys = endpoint.keys(BUCKET)

    folder = parent_run(uri, "on-s3").data.tags[Tag.STORAGE]
    assert folder.startswith(f"{STORAGE}/on-s3-")  # the sweep's folder in the bucket: STORAGE/NAME-HASH
    assert f"{bucket_key(folder)}/sweep.json" in keys
    trained = [r for r in child_runs(uri, "on-s3") if r.data.tags[Tag.ROW] == "simcse"]
    assert len(trained) == 1 and trained[0].info.status == "FINISHED"
    checkpoint = trained[0].data.tags[Tag.CHECKPOINT]
    assert checkpoint.startswith(f"{folder}/")  # the trial's last checkpoint, in the sweep's folder there
    assert f"{bucket_key(checkpoint)}/{CHECKPOINT_SEAL}" in keys  # stored whole: its seal is there
    assert not local_checkpoints(tmp_path), "a checkpoint was written to a local folder"


@pytest.mark.slow
def test_a_killed_driver_is_resumed_from_the_bucket_in_a_fresh_folder_and_loses_no_step(tmp_path, tiny_bert,
                                                                                        use_tiny_sts):
    """The trial holds after its checkpoint of step HOLD_STEP (:mod:`tests.fault_helpers`); once Ray's
    experiment state in the bucket was written after the driver recorded that checkpoint, the driver and its
    Ray are killed (SIGKILL). The resume runs in another, empty folder: all it has is the bucket and the
    MLflow store."""
    first, fresh, holds = tmp_path / "first", tmp_path / "fresh", tmp_path / "holds"
    first.mkdir(), fresh.mkdir()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    held = held_file(holds, HOLD_STEP)
    path = spec_file(tmp_path, tiny_bert, "resumed-s3", seeds=[1],
                     rows=[{"name": "simcse", "set": {"max_steps": MAX_STEPS, "eval_every": 1, "checkpoint_every": 1}}])
    with s3_endpoint() as endpoint:
        endpoint.create_bucket(BUCKET)
        env = {**os.environ, **endpoint.env, "PYTHONPATH": str(ROOT)}
        log = first / "driver.log"
        with log.open("w") as output:
            driver = subprocess.Popen([*HOLDING_DRIVER, "run", str(path), "--storage", STORAGE, "--tracking-uri", uri],
                                      cwd=first, env={**env, **hold_env(holds, HOLD_STEP)}, start_new_session=True,
                                      stdout=output, stderr=output)
        try:
            def checkpointed_at_hold():
                (run,) = child_runs(uri, "resumed-s3")
                return run if held.exists() and run.data.tags.get(Tag.CHECKPOINT_STEP) == str(HOLD_STEP) else None

            cut = wait_for(checkpointed_at_hold, UNTIL_IT_HAPPENS, log=log, driver=driver,
                           what=f"the trial held at step {HOLD_STEP}, its checkpoint recorded")
            # What the resume reads is Ray's experiment state in the bucket, uploaded every second or so: kill
            # after two uploads made since the checkpoint was recorded (the first may have been under way).
            recorded = time.time()
            since = wait_for(lambda: state_written_after(endpoint, recorded), UNTIL_IT_HAPPENS, log=log,
                             driver=driver, what="Ray's experiment state uploaded to the bucket")
            wait_for(lambda: state_written_after(endpoint, since), UNTIL_IT_HAPPENS, log=log, driver=driver,
                     what="Ray's experiment state uploaded again")
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray it started die at once
            driver.wait()
            release(holds, HOLD_STEP)
        assert cut.info.status == "RUNNING" and dev_steps(uri, cut.info.run_id) == list(range(1, HOLD_STEP + 1))

        # (the same driver as the run's, without holds: Ray restores a sweep only with the trainable it ran)
        resumed = subprocess.run([*HOLDING_DRIVER, "resume", "resumed-s3", "--storage", STORAGE],
                                 cwd=fresh, env=env, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        keys = endpoint.keys(BUCKET)

    runs = child_runs(uri, "resumed-s3")
    assert [r.info.run_id for r in runs] == [cut.info.run_id], "the trial ran again in a new MLflow run"
    (after,) = runs
    assert after.info.status == "FINISHED"  # the same MLflow run, continued
    assert after.data.metrics["resumed_from_step"] == HOLD_STEP  # from the checkpoint of the killed step
    # read from the bucket (Ray names a checkpoint there by its bucket path, without the scheme)
    assert after.data.tags[Tag.RESTORED_FROM].startswith(f"s3://{BUCKET}/sweeps/resumed-s3-")
    assert dev_steps(uri, after.info.run_id) == list(range(1, MAX_STEPS + 1))  # every evaluation step, once
    assert f"{bucket_key(after.data.tags[Tag.CHECKPOINT])}/{CHECKPOINT_SEAL}" in keys
    assert not local_checkpoints(fresh), "the resume wrote a checkpoint to its local folder"


def state_written_after(endpoint, moment: float) -> float | None:
    """When Ray's experiment state was last uploaded to the bucket, if after ``moment`` (a time.time()). The
    endpoint gives whole seconds, cut down: a time after ``moment`` is one."""
    written = [item["LastModified"].timestamp()
               for page in endpoint.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
               for item in page.get("Contents", []) if "/experiment_state-" in item["Key"]]
    return max(written) if written and max(written) > moment else None


REFUSALS = {
    "no-bucket": ("s3://missing/sweeps", {}, "there is no bucket 'missing' at http://127.0.0.1:"),
    "bad-credentials": (STORAGE, {"AWS_SECRET_ACCESS_KEY": "wrong", "AWS_ACCESS_KEY_ID": "nobody"},
                        f"refused these credentials for bucket '{BUCKET}'"),
    "no-endpoint": (STORAGE, "down", "no storage endpoint answered at http://127.0.0.1:"),
}


@pytest.mark.parametrize("case", REFUSALS)
@pytest.mark.parametrize("command", ["run", "resume"])
def test_storage_that_cannot_be_used_is_refused_before_anything_runs_in_one_line(case, command, tmp_path,
                                                                                tiny_bert, monkeypatch, capsys):
    """Nothing is written: no MLflow store, no object in the bucket, no local folder; Ray never starts."""
    storage, change, expected = REFUSALS[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEP_CHECK_TIMEOUT_S", "30")
    if case == "bad-credentials":  # moto checks credentials only when told to: from its second request on
        monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "1")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    (tmp_path / "spec").mkdir()
    path = spec_file(tmp_path / "spec", tiny_bert, "refused")
    argv = ["run", str(path), "--tracking-uri", uri] if command == "run" else ["resume", "refused"]
    ray.shutdown()
    with s3_endpoint() as endpoint:
        endpoint.create_bucket(BUCKET)  # with credentials checked, the one request made without them
        if change == "down":
            endpoint.relay.down()
        with pytest.MonkeyPatch.context() as credentials:
            for name, value in ({} if change == "down" else change).items():
                credentials.setenv(name, value)
            code = main([*argv, "--storage", storage])
        # (moto refuses every key once it checks them: the bucket cannot be written with any, nor listed)
        objects = None if case == "bad-credentials" else endpoint.keys(BUCKET) if change != "down" else "down"
        if change == "down":
            endpoint.relay.up()
            objects = endpoint.keys(BUCKET)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert err.count("\n") == 1 and "Traceback" not in out + err, err
    assert err.startswith(f"--storage {storage}: ") and expected in err, err
    assert "expected" in err, err  # what would do instead
    assert objects in (None, []) and not ray.is_initialized()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec"]
