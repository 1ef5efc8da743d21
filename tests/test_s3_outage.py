"""The sweep's storage (a bucket, ``--storage s3://BUCKET/sweeps``) goes away in the middle of a checkpoint's
write and comes back with its objects, against moto's S3 server on loopback behind a relay
(:mod:`tests.s3_endpoint`).

The outage starts at an event, not at a time: the relay goes down the moment the trial's upload of its
second checkpoint reaches ``training_state.pt`` (``Relay.down_on``), so that checkpoint is left half-written
in the bucket. It lasts until the trial has tried to store it twice and failed (the trial's own lines), then
the endpoint answers again. The trial holds meanwhile and stores that checkpoint again under a new folder
(:func:`sweep.run.trial.with_storage_retries`); the last sealed checkpoint stays the one Ray and MLflow name; the
half-written one is never read back as whole; the trial ends as an uninterrupted trial does, each evaluation
step logged once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import warnings
from pathlib import Path

import pyarrow.fs
import pytest
from mlflow import MlflowClient

import sweep.run.trial as trial_module
from results.record import Tag
from tests.conftest import child_runs, spec_file, wait_for
from tests.fault_helpers import HOLDING_DRIVER, UNTIL_IT_HAPPENS, held_file, hold_env, release
from tests.s3_endpoint import s3_endpoint
from trainers.metrics import Metric, ReportKey
from trainers.training.checkpoint import (
    CHECKPOINT_SEAL,
    TRAINING_STATE,
    CheckpointWarning,
    TrainingState,
    checkpoint_folder,
    incomplete,
    newest_checkpoint,
)

pytestmark = pytest.mark.slow

BUCKET = "sweeps"
STORAGE = f"s3://{BUCKET}/sweeps"
ROOT = Path(__file__).resolve().parent.parent
MAX_STEPS, EVAL_EVERY = 8, 2
CUT = 1
"""The checkpoint cut by the outage: the trial's second (step 4); the first (step 2) is sealed before it."""
HOLD_STEP = 6
"""The trial holds after its report of this step (its checkpoint stored), for the bucket to be looked at."""


def trial_checkpoints(endpoint) -> tuple[str, dict[str, set[str]]]:
    """The trial's folder in the bucket, and each of its checkpoint folders' files."""
    found: dict[str, set[str]] = {}
    folder = ""
    for key in endpoint.keys(BUCKET, "sweeps/"):
        head, marker, tail = key.partition("/checkpoint_")
        if marker:
            folder = head
            name, _, inside = tail.partition("/")
            found.setdefault(f"checkpoint_{name}", set()).update({inside} - {""})
    return folder, found


def trial_output(folder: Path) -> str:
    """What the sweep's trials printed: the driver sends Ray's output to ``sweep.log`` in its Ray folder."""
    return "".join(path.read_text(errors="replace") for path in folder.glob("ray_results/*/sweep.log"))


def downloaded(folder: str, name: str, into: Path) -> Path:
    """A checkpoint folder of the bucket, copied into ``into`` with pyarrow (as Ray downloads one)."""
    target = into / name
    target.mkdir(parents=True)
    pyarrow.fs.copy_files(f"{BUCKET}/{folder}/{name}", str(target), source_filesystem=s3_filesystem(),
                          destination_filesystem=pyarrow.fs.LocalFileSystem())
    return target


def s3_filesystem() -> pyarrow.fs.S3FileSystem:
    return pyarrow.fs.FileSystem.from_uri(STORAGE)[0]


def test_a_checkpoint_write_cut_by_an_outage_is_stored_again_and_the_sealed_one_stays_in_use(tmp_path, tiny_bert,
                                                                                            tiny_sts_dir):
    holds, uri = tmp_path / "holds", f"sqlite:///{tmp_path}/mlflow.db"
    path = spec_file(tmp_path, tiny_bert, "outage", seeds=[1], rows=[{"name": "simcse", "set": {}}],
                     base={"model": tiny_bert, "batch_size": 8, "train_limit": 48, "epochs": 1000,
                           "max_steps": MAX_STEPS, "eval_every": EVAL_EVERY})
    log = tmp_path / "driver.log"
    with s3_endpoint() as endpoint:
        endpoint.create_bucket(BUCKET)
        endpoint.relay.down_on(f"{checkpoint_folder(CUT)}/{TRAINING_STATE}".encode())
        env = {**os.environ, **endpoint.env, "PYTHONPATH": str(ROOT), "STS_DATA_DIR": str(tiny_sts_dir),
               "PYTHONUNBUFFERED": "1", **hold_env(holds, HOLD_STEP)}
        with log.open("w") as output:
            driver = subprocess.Popen([*HOLDING_DRIVER, "run", str(path), "--storage", STORAGE, "--tracking-uri", uri],
                                      cwd=tmp_path, env=env, start_new_session=True, stdout=output, stderr=output)
        try:
            wait_for(endpoint.relay.cut.is_set, UNTIL_IT_HAPPENS, log=log, driver=driver,
                     what="the upload of the step-4 checkpoint's training state, cut by the outage")
            wait_for(lambda: "checkpoint of step 4 not stored (try 2)" in trial_output(tmp_path), UNTIL_IT_HAPPENS,
                     log=log, driver=driver, what="the trial's second failed try to store its step-4 checkpoint")
            endpoint.relay.up()  # the endpoint is back, with every object it had
            wait_for(held_file(holds, HOLD_STEP).exists, UNTIL_IT_HAPPENS, log=log, driver=driver,
                     what=f"the trial held after its step-{HOLD_STEP} checkpoint")

            # In the bucket: the cut checkpoint is half-written (its training state did not arrive; its seal,
            # uploaded beside it in no fixed order, may have); the one stored again after the outage, under a
            # folder of its own (each try is another; a try refused before it wrote left none), and the step-6
            # one are whole. Ray keeps two checkpoints per trial: it deleted step 2's, and never knew of the cut one.
            folder, checkpoints = trial_checkpoints(endpoint)
            assert len(checkpoints) == 3, checkpoints
            cut, again, held = sorted(checkpoints)
            assert cut == checkpoint_folder(CUT) and TRAINING_STATE not in checkpoints[cut], checkpoints
            copies = tmp_path / "copies"
            assert incomplete(downloaded(folder, cut, copies)) is not None
            for name, step in ((again, 4), (held, HOLD_STEP)):
                assert incomplete(downloaded(folder, name, copies)) is None, name
                assert TrainingState.read(copies / name).step == step, name
            # What Ray and MLflow name as the trial's checkpoint was never the half-written one.
            (running,) = child_runs(uri, "outage")
            assert running.data.tags[Tag.CHECKPOINT].endswith(f"/{held}")
            assert running.data.tags[Tag.CHECKPOINT_STEP] == str(HOLD_STEP)

            # A restore handed the half-written folder (from the bucket, as Ray hands a trial its checkpoint)
            # skips it with a warning naming it, and takes nothing from it.
            from ray import tune

            handed = tune.Checkpoint(f"{BUCKET}/{folder}/{cut}", s3_filesystem())
            with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CheckpointWarning)
                patch.setattr(trial_module.tune, "get_checkpoint", lambda: handed)
                assert newest_checkpoint(trial_module.RaySession({})) is None
            said = [str(w.message) for w in caught]
            half_written = (f"has no readable {CHECKPOINT_SEAL}", f"{TRAINING_STATE} is missing, not the")
            assert [text for text in said if text.startswith(f"checkpoint s3://{BUCKET}/{folder}/{cut} is skipped")
                    and any(reason in text for reason in half_written)], said
            release(holds, HOLD_STEP)
            driver.wait()
        finally:
            release(holds, HOLD_STEP)
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
        final_keys = endpoint.keys(BUCKET, "sweeps/")
    output = log.read_text()
    assert driver.returncode == 0, output[-4000:]

    (finished,) = child_runs(uri, "outage")
    assert finished.info.status == "FINISHED" and Metric.TEST_AVG in finished.data.metrics
    steps = [m.step for m in MlflowClient(uri).get_metric_history(finished.info.run_id, "dev_spearman")]
    assert sorted(steps) == list(range(EVAL_EVERY, MAX_STEPS + 1, EVAL_EVERY))  # each evaluation step once
    assert "resumed_from_step" not in finished.data.metrics  # it went on; it never restarted
    # Its end is stored whole; at the sweep's end the half-written folder went with the other resume states.
    final = finished.data.tags[Tag.CHECKPOINT]
    assert f"{final[len(f's3://{BUCKET}/'):]}/{CHECKPOINT_SEAL}" in final_keys
    assert not [key for key in final_keys if f"/{checkpoint_folder(CUT)}/" in key]


STORED = "checkpoint of step 4 not stored"


def test_only_storage_that_may_come_back_is_tried_again_and_only_within_the_bound(monkeypatch, capsys):
    """No Ray, no endpoint: the rule alone. A local disk's error (it carries an errno) fails at once, as ENOSPC
    does today; an object store's (pyarrow's OSError without one) is tried again until it is taken, and past
    the bound its error is raised."""
    import errno

    monkeypatch.setattr(trial_module, "RETRY_PAUSES_S", (0.0,))
    tries: list[int] = []

    def fails(times: int, error: OSError):
        def report_once():
            tries.append(1)
            if len(tries) <= times:
                raise error
        return report_once

    with pytest.raises(OSError, match="No space"):
        trial_module.with_storage_retries(fails(1, OSError(errno.ENOSPC, "No space left on device")), STORED,
                                          bound_s=60)
    assert len(tries) == 1
    tries.clear()
    trial_module.with_storage_retries(fails(3, OSError("AWS Error NETWORK_CONNECTION")), STORED, bound_s=60)
    assert len(tries) == 4 and capsys.readouterr().err.count("checkpoint of step 4 not stored") == 3
    tries.clear()
    with pytest.raises(OSError, match="NETWORK_CONNECTION"):
        trial_module.with_storage_retries(fails(10**6, OSError("AWS Error NETWORK_CONNECTION")), STORED, bound_s=0.3)


def test_a_trial_retried_while_the_storage_is_down_reads_its_checkpoint_once_it_answers(monkeypatch, capsys,
                                                                                       tmp_path):
    """No Ray, no endpoint: a trial that Ray starts again during the outage (one that failed past the bound)
    waits to list and download its checkpoint, instead of failing again or training afresh; the checkpoint
    is named by its address in the bucket."""
    from contextlib import contextmanager

    monkeypatch.setattr(trial_module, "RETRY_PAUSES_S", (0.0,))
    down = {"listing": 1, "download": 2}  # the failed tries left of each

    def answer(what: str) -> None:
        if down[what]:
            down[what] -= 1
            raise OSError("AWS Error NETWORK_CONNECTION during HeadObject")

    class Bucket:
        type_name = "s3"

        def get_file_info(self, selector):
            answer("listing")
            return []

    class StoredCheckpoint:
        filesystem, path = Bucket(), f"{BUCKET}/sweeps/held/checkpoint_000002"

        @contextmanager
        def as_directory(self):
            answer("download")
            yield str(tmp_path)

    monkeypatch.setattr(trial_module.tune, "get_checkpoint", lambda: StoredCheckpoint())
    session = trial_module.RaySession({})
    assert list(session.checkpoints()) == [tmp_path]
    assert session.source(tmp_path) == f"s3://{BUCKET}/sweeps/held/checkpoint_000002"
    assert session.worker[ReportKey.RESTORED_FROM] == f"s3://{BUCKET}/sweeps/held/checkpoint_000002"
    said = capsys.readouterr().err
    assert said.count("not listed (try") == 1 and said.count("not read (try") == 2

