"""The progress view: a sweep's console output is short, Ray's goes to the sweep's log, and a failed
trial's error is shown with the path of its full traceback."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from sweep.run.progress import SweepProgress
from sweep.spec.sweep_spec import load_spec
from tests.conftest import spec_file
from tests.test_sweep_run import ROOT


def fake_trial(point: int, status: str, **result) -> SimpleNamespace:
    return SimpleNamespace(trial_id=f"t{point}", config={"point": point}, status=status, last_result=result,
                           error_file=None, error_msg=None, num_failures=0)


def test_the_view_counts_trials_and_estimates_the_time_left(tmp_path, tiny_bert):
    spec = load_spec(spec_file(tmp_path, tiny_bert, "view"))  # untuned once, simcse seeds 1 and 2; 4 steps each
    out = io.StringIO()
    progress = SweepProgress(spec, Console(file=out, width=200), live=False, log=tmp_path / "sweep.log")
    progress.setup()
    done = fake_trial(0, "TERMINATED", time_total_s=10.0, best_dev_spearman=71.234)
    running = fake_trial(1, "RUNNING", time_total_s=5.0, step=2, dev_spearman=60.0, best_dev_spearman=61.0)
    progress.on_step_end(0, [done, running])
    progress.on_trial_complete(0, [done, running], done)

    assert str(progress.counts()) == "1 finished · 1 running · 1 pending · 0 failed"
    # The running trial needs 5 s more (2 of 4 steps in 5 s), the pending one a mean trial (10 s).
    assert progress.time_left() == pytest.approx(15.0)
    assert progress.step_text(running) == "2/4" and progress.trial_name(running) == "simcse (seed 1)"
    assert "finished  untuned (seed 1): best dev 71.23 in 0:00:10" in out.getvalue()
    assert "about 0:00:15 left" in progress.status_line()

    # A trial that has just started and reported no step yet: a mean trial (10 s) left, beside the other.
    starting = fake_trial(2, "RUNNING")
    progress.on_trial_start(0, [done, running, starting], starting)
    assert progress.time_left() == pytest.approx((5.0 + 10.0) / 2, abs=0.5)

    # Once it has run longer than the mean trial, without a step, its time left is unknown: no estimate.
    progress._trial_started[starting.trial_id] -= 11.0
    assert progress.time_left() is None
    assert "left" not in progress.status_line()

    # A scheduler pauses the running trial (PBT, HyperBand): paused, not pending, a mean trial left; then it resumes.
    running.status = "PAUSED"
    progress.on_step_end(0, [done, running])
    assert str(progress.counts()) == "1 finished · 0 running · 1 paused · 1 pending · 0 failed"
    assert progress.time_left() == pytest.approx(20.0)
    running.status = "RUNNING"
    progress.on_trial_start(0, [done, running, starting], starting)
    assert out.getvalue().splitlines()[-1].endswith("] resumed   simcse (seed 2)")
    assert out.getvalue().count("started   simcse (seed 2)") == 1


@pytest.mark.slow
def test_a_sweep_prints_a_short_view_and_its_failures_and_logs_the_rest(tmp_path, tiny_bert, use_tiny_sts):
    broken = tmp_path / "broken-model"  # passes validation (a model's config), fails to load in the trial
    broken.mkdir()
    shutil.copy(Path(tiny_bert) / "config.json", broken)  # a readable config, no weights
    path = spec_file(tmp_path, tiny_bert, "quiet", seeds=[1], rows=[
        {"name": "broken", "set": {"model": str(broken)}},
        {"name": "untuned", "set": {"method": "none", "pooling": "mean"}},
        {"name": "simcse", "set": {"max_steps": 6, "eval_every": 2}},
    ])
    command = [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
               "--storage", str(tmp_path / "ray")]
    driver = subprocess.run(command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                            text=True, timeout=900)
    printed = (driver.stdout + driver.stderr).splitlines()
    assert driver.returncode == 1, "\n".join(printed[-60:])  # a trial failed, the others finished
    assert len(printed) <= 40, "\n".join(printed)

    log = Path(printed[0].rsplit(" go to ", 1)[1])
    assert log.name == "sweep.log" and log.parent.parent == tmp_path / "ray"
    failure = next(i for i, line in enumerate(printed) if "] failed    broken (seed 1): " in line)
    assert "broken-model" in printed[failure]
    error_file = Path(printed[failure + 1].split("full error: ", 1)[1].split(";", 1)[0])
    assert error_file.is_relative_to(tmp_path / "ray") and "broken-model" in error_file.read_text()
    assert any("] finished  simcse (seed 1): best dev " in line for line in printed)
    assert "1 trials finished" not in driver.stdout and "2 trials finished, 1 failed" in driver.stdout

    # What the console no longer shows is in the log.
    quiet = "\n".join(printed)
    logged = log.read_text()
    for noise in ("Started a local Ray instance", "Checkpoint successfully created", "== Status =="):
        assert noise in logged and noise not in quiet
