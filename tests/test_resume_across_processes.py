"""Resume is exact across processes, and inside Ray an unreadable checkpoint falls back to the older one
(docs/checkpoints.md).

One sweep of two trials on the tiny BERT, SG (whose BERT_F a resumed trial rebuilds) and SCT distilled
from a teacher (rebuilt too), is killed with its driver and Ray after a few checkpoints. Before it is run
again, the folder of shared frozen outputs is emptied, so the resumed processes compute BERT_F's views
and the teacher's vectors afresh, and the newest checkpoint of the SG trial is cut in half. The SG trial
must fall back to its previous checkpoint; both must log what an uninterrupted sweep of the same spec,
run beside it, logs: every loss, learning rate and dev score, and the test metrics.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, fresh_ray, spec_file, wait_for
from tests.test_sweep_run import ROOT
from trainers.training.checkpoint import TRAINING_STATE

pytestmark = pytest.mark.slow
NAME = "across"
EVAL_EVERY = 2
STEPS = 80  # no early stopping: each trial runs them all, long enough to be caught part way
PROGRESS = ("loss", "lr", "dev_spearman", "best_dev_spearman")
FINAL = ("best_dev_spearman", "best_step", "steps")


@dataclass(frozen=True)
class Scenario:
    reference_uri: str  # the uninterrupted sweep
    resumed_uri: str  # the killed and resumed sweep
    truncated: Path  # the SG trial's newest checkpoint that Ray registered, cut in half before the resume
    truncated_step: int
    previous: Path  # the checkpoint Ray kept before it
    log: str  # what the resumed driver printed, its workers' warnings included


def rows(teacher: str) -> list[dict]:
    return [
        {"name": "sg", "set": {"projection_hidden": 16, "bert_f_dropout": False}},  # BERT_F's views tabled
        {"name": "sct distillation", "set": {"method": "sct", "distillation": "cd", "teacher": teacher,
                                             "queue_size": 10, "projector_expansion": 2}},
    ]


def runs_by_row(uri: str) -> dict:
    return {r.data.tags["sweep.row"]: r for r in child_runs(uri, NAME)}


def history(uri: str, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in MlflowClient(uri).get_metric_history(run_id, key)}


def tag_step(run) -> int:
    return int(run.data.tags.get("sweep.checkpoint_step", 0))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tiny_bert, tiny_teacher, tiny_sts_dir) -> Scenario:
    folder = tmp_path_factory.mktemp("across")
    path = spec_file(
        folder, tiny_bert, NAME, method="sg", rows=rows(tiny_teacher), seeds=[1], max_concurrent_trials=2,
        base={"model": tiny_bert, "batch_size": 4, "train_limit": 48, "max_steps": STEPS, "eval_every": EVAL_EVERY,
              "epochs": 10, "learning_rate": 1e-3, "patience": 0},
    )
    reference_uri, resumed_uri = (f"sqlite:///{folder}/{name}.db" for name in ("reference", "resumed"))

    with pytest.MonkeyPatch.context() as patch:  # the uninterrupted sweep, with its own cold frozen outputs
        patch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
        patch.setenv("SWEEP_FROZEN_OUTPUTS_DIR", str(folder / "frozen-reference"))
        with fresh_ray():
            run(SweepOptions(str(path), {}, tracking_uri=reference_uri, storage=str(folder / "ray-reference")))

    frozen = folder / "frozen-resumed"
    command = [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", resumed_uri,
               "--storage", str(folder / "ray")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STS_DATA_DIR": str(tiny_sts_dir),
           "SWEEP_FROZEN_OUTPUTS_DIR": str(frozen)}
    with (folder / "killed.log").open("w") as log:
        process = subprocess.Popen(command, cwd=folder, env=env, start_new_session=True, stdout=log, stderr=log)
    workers: list[int] = []
    try:
        def both_checkpointed():
            found = runs_by_row(resumed_uri)
            running = all(r.info.status == "RUNNING" for r in found.values()) and len(found) == 2
            return found if running and tag_step(found["sg"]) >= 3 * EVAL_EVERY and \
                tag_step(found["sct distillation"]) >= EVAL_EVERY else None

        caught = wait_for(both_checkpointed, log=folder / "killed.log")
        workers = [int(run.data.tags["sweep.worker_pid"]) for run in caught.values()]
        # Freeze both trials, so that the checkpoints Ray's state names are their newest, then kill everything.
        for worker in workers:
            os.kill(worker, signal.SIGSTOP)
        time.sleep(3)
        sg = runs_by_row(resumed_uri)["sg"]
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for worker in workers:
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert all(r.info.status == "RUNNING" for r in runs_by_row(resumed_uri).values()), "a trial ended before the kill"

    shutil.rmtree(frozen)  # the resumed processes find no frozen output computed before
    # The newest checkpoint Ray registered (a frozen worker may have written a later one Ray never heard of).
    newest = Path(sg.data.tags["sweep.checkpoint"])
    previous = sorted(p for p in newest.parent.glob("checkpoint_*") if p.name < newest.name)
    assert previous, "Ray kept no older checkpoint"
    state = newest / TRAINING_STATE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])

    with (folder / "resumed.log").open("w") as log:
        code = subprocess.run(command, cwd=folder, env=env, stdout=log, stderr=log, timeout=600).returncode
    output = (folder / "resumed.log").read_text()
    assert code == 0, output[-5000:]
    # The driver's console shows the progress view; Ray's and the trials' own lines go to the sweep's log.
    (sweep_log,) = (folder / "ray").glob("*/sweep.log")
    return Scenario(reference_uri, resumed_uri, newest, tag_step(sg), previous[-1], output + sweep_log.read_text())


def test_a_killed_sweep_resumes_in_new_processes_exactly(scenario):
    reference, resumed = runs_by_row(scenario.reference_uri), runs_by_row(scenario.resumed_uri)
    assert set(reference) == set(resumed) == {"sg", "sct distillation"}
    for row in reference:
        before, after = reference[row], resumed[row]
        assert after.info.status == "FINISHED"
        assert after.data.metrics["resumed_from_step"] > 0  # it continued from a checkpoint...
        # ...in a process whose frozen outputs (BERT_F's views, the teacher's vectors) were all computed again
        assert after.data.metrics["frozen_outputs_computed"] > 0
        for key in PROGRESS:  # every evaluation, before the kill and after it
            expected = history(scenario.reference_uri, before.info.run_id, key)
            assert sorted(expected) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
            assert history(scenario.resumed_uri, after.info.run_id, key) == expected, (row, key)
        tests = sorted(k for k in before.data.metrics
                       if k.startswith("test_") and k.endswith(("_spearman", "_pearson")))
        assert "test_avg_spearman" in tests and len(tests) > 7
        for key in (*tests, *FINAL):
            assert after.data.metrics[key] == before.data.metrics[key], (row, key)


def test_a_truncated_checkpoint_inside_ray_falls_back_to_the_older_one(scenario):
    sg = runs_by_row(scenario.resumed_uri)["sg"]
    assert sg.data.tags["sweep.restored_from"] == str(scenario.previous)  # the previous checkpoint, not afresh
    assert sg.data.metrics["resumed_from_step"] == scenario.truncated_step - EVAL_EVERY
    assert "CheckpointWarning" in scenario.log and str(scenario.truncated) in scenario.log
