"""Ctrl-C and SIGTERM: a real SIGINT to a real ``python -m sweep run``, then the resume it prints; the
signal handling on its own (second signal exits at once); the tracker's end states."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from mlflow import MlflowClient

from tests.conftest import child_runs, spec_file, wait_for
from tests.test_sweep_run import ROOT, step_history
from tests.test_sweep_tracking import tracker, trial

LONG_TRIAL = {"max_steps": 40, "eval_every": 4, "epochs": 10}


@pytest.mark.slow
def test_ctrl_c_kills_the_runs_prints_the_resume_and_the_resume_finishes_the_same_runs(tmp_path, tiny_bert,
                                                                                       use_tiny_sts):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = spec_file(tmp_path, tiny_bert, "stopped", seeds=[1], max_concurrent_trials=1,
                     rows=[{"name": f"simcse {i}", "set": LONG_TRIAL} for i in range(2)])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", uri,
               "--storage", str(tmp_path / "ray")]
    out = tmp_path / "driver.out"
    with out.open("w") as stdout:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=stdout, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            cut = wait_for(lambda: next((r for r in child_runs(uri, "stopped") if r.info.status == "RUNNING"
                                         and int(r.data.tags.get("sweep.checkpoint_step", 0)) >= 8), None), log=out)
            os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the driver and everything it started
            process.wait(timeout=300)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    printed = out.read_text().strip().splitlines()
    assert process.returncode == 130, "\n".join(printed[-40:])

    # The last lines: the summary so far, then this project's command that continues the sweep.
    resume = printed[-1].strip()
    assert resume.startswith("python -m sweep resume stopped-") and "--storage" in resume, printed[-5:]
    assert printed[-2] == "to continue the sweep from its checkpoints:"
    assert any(line.startswith("stopped by SIGINT: ") and "2 left to run" in line for line in printed)
    assert "| row [grid point] |" in "\n".join(printed) and "Tuner.restore" not in "\n".join(printed)

    client = MlflowClient(uri)
    runs = {r.info.run_id: r for r in child_runs(uri, "stopped")}
    assert runs[cut.info.run_id].info.status == "KILLED"
    assert "RUNNING" not in {r.info.status for r in runs.values()}
    parent = client.get_run(cut.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "KILLED"

    resumed = subprocess.run([sys.executable, *shlex.split(resume)[1:]], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = {r.info.run_id: r for r in child_runs(uri, "stopped")}
    assert set(runs) <= set(after) and len(after) == 2  # the same run, and one for the trial that had not started
    assert {r.info.status for r in after.values()} == {"FINISHED"}
    continued = after[cut.info.run_id]
    assert continued.data.metrics["resumed_from_step"] >= 8  # from its checkpoint
    assert step_history(uri, cut.info.run_id) == list(range(4, 41, 4))  # each step logged once
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


HANDLER = textwrap.dedent("""
    import signal, sys, time
    from sweep.run.interrupt import StopOnSignal

    def tune_stop(number, frame):  # stands for Ray Tune's handler, which Tune installs for SIGUSR1
        print("tune stops", flush=True)

    with StopOnSignal(note=lambda line: print(line, flush=True), before_exit=lambda: print("tidy", flush=True)):
        signal.signal(signal.SIGUSR1, tune_stop)
        print("ready", flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_stops_tune_and_the_second_exits_at_once(first, tmp_path):
    process = subprocess.Popen([sys.executable, "-c", HANDLER], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    os.kill(process.pid, first)
    assert process.stdout.readline().startswith(f"{first.name}: stopping")
    assert process.stdout.readline().strip() == "tune stops"
    started = time.monotonic()
    os.kill(process.pid, signal.SIGINT)
    rest = process.stdout.read()
    assert process.wait(timeout=10) == 130 and time.monotonic() - started < 5
    assert rest.startswith("tidy\nSIGINT again: exiting now")


def test_the_parent_run_is_killed_while_trials_remain_and_interrupted_runs_are_killed(tmp_path):
    callback, client = tracker(tmp_path)
    done, cut = trial("t_done", {"test_avg_spearman": 0.5}), trial("t_cut")
    for started in (done, cut):
        callback.on_trial_start(0, [], started)
    callback.on_trial_complete(0, [], done)
    cut.status = done.status = "TERMINATED"  # what Ray's cleanup makes of an interrupted trial
    callback.on_experiment_end([done, cut])
    runs = {r.data.tags["sweep.trial_id"]: r.info.status for r in client.search_runs([callback.experiment_id])
            if "sweep.trial_id" in r.data.tags}
    assert runs == {"t_done": "FINISHED", "t_cut": "KILLED"}
    assert client.get_run(callback.parent_run_id).info.status == "KILLED" and callback.trials_left == 1

    again, _ = tracker(tmp_path)  # the resume: the interrupted run continues and ends FINISHED
    again.on_trial_start(0, [], cut)
    again.on_trial_complete(0, [], cut)
    again.on_experiment_end([done, cut])
    assert client.get_run(callback.parent_run_id).info.status == "FINISHED" and again.trials_left == 0
    assert {r.info.status for r in client.search_runs([callback.experiment_id])} == {"FINISHED"}
