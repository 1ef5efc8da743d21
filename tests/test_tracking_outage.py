"""A tracking server that goes away in the middle of a trial: a real ``mlflow server`` on loopback, stopped
and started again on the same port and store.

Gone for less than the bound, the sweep rides through and writes what its trial reported meanwhile once
the server is back. Gone for longer, the sweep stops as Ctrl-C stops it (one line why, the resume
command, exit 75) and ``sweep resume`` finishes it. Either way each evaluation step is logged once, in
one run. MLflow's own retries are shortened by its environment variables, as the bound is by the sweep's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.conftest import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
STEPS, EVAL_EVERY = 2000, 100


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """``mlflow server`` on a SQLite store, which can be stopped and started again on the same port."""

    def __init__(self, folder: Path):
        self.store = f"sqlite:///{folder}/server.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.folder = folder
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.store, "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"], cwd=self.folder, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("mlflow server did not start")

    def stop(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)  # gone at once, as a crashed or partitioned server
            self.process.wait()
            self.process = None


@pytest.fixture
def server(tmp_path):
    running = Server(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def spec_file(tmp_path: Path, tiny_bert: str, name: str) -> Path:
    spec = {"name": name, "method": "simcse",
            "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 48, "epochs": 1000, "max_steps": STEPS,
                     "eval_every": EVAL_EVERY},
            "seeds": [1], "resources": {"cpu": 1}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def driver_env(tiny_sts_dir: Path, bound_s: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "STS_DATA_DIR": str(tiny_sts_dir),
            "SWEEP_TRACKING_OUTAGE_S": str(bound_s), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


def trial_run(store: str, name: str):
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'")
    assert len(runs) == 1, f"{len(runs)} trial runs"
    return runs[0]


def evaluated_steps(store: str, run_id: str) -> list[int]:
    return [m.step for m in MlflowClient(store).get_metric_history(run_id, "dev_spearman")]


def test_a_short_outage_is_ridden_through_and_what_was_reported_meanwhile_is_written(
        tmp_path, tiny_bert, tiny_sts_dir, server):
    path = spec_file(tmp_path, tiny_bert, "outage_short")
    command = [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", server.url,
               "--storage", str(tmp_path / "ray")]
    log = (tmp_path / "driver.log").open("w")
    process = subprocess.Popen(command, cwd=tmp_path, env=driver_env(tiny_sts_dir, 600), stdout=log,
                               stderr=subprocess.STDOUT, text=True)
    wait_for(lambda: evaluated_steps(server.store, trial_run(server.store, "outage_short").info.run_id))
    server.stop()
    time.sleep(8)
    server.start()
    assert process.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    output = (tmp_path / "driver.log").read_text()
    assert "does not answer: the trials go on" in output and "answers again after" in output

    run = trial_run(server.store, "outage_short")
    assert run.info.status == "FINISHED"
    assert evaluated_steps(server.store, run.info.run_id) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert "test_avg_spearman" in run.data.metrics
    assert not list((tmp_path / "ray").glob("*/tracking_journal.json"))


def test_an_outage_past_the_bound_stops_the_sweep_cleanly_and_a_resume_finishes_it(
        tmp_path, tiny_bert, tiny_sts_dir, server):
    path = spec_file(tmp_path, tiny_bert, "outage_long")
    storage = tmp_path / "ray"
    command = [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", server.url,
               "--storage", str(storage)]
    env = driver_env(tiny_sts_dir, 10)
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    first = wait_for(lambda: evaluated_steps(server.store, trial_run(server.store, "outage_long").info.run_id))
    server.stop()
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 75, output[-3000:]
    assert "Traceback" not in output
    stopped = [line for line in output.splitlines() if line.startswith("stopped: ")]
    assert len(stopped) == 1 and f"the tracking server {server.url} has not answered for" in stopped[0]
    resume = output.strip().splitlines()[-1].strip()
    assert resume.startswith("python -m sweep resume outage_long-")
    (journal,) = storage.glob("*/tracking_journal.json")  # what the server did not receive, kept

    server.start()
    before = trial_run(server.store, "outage_long")
    assert evaluated_steps(server.store, before.info.run_id)[: len(first)] == first
    resumed = subprocess.run([sys.executable, "-m", *resume.split()[2:]], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    run = trial_run(server.store, "outage_long")
    assert run.info.run_id == before.info.run_id and run.info.status == "FINISHED"
    assert evaluated_steps(server.store, run.info.run_id) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert not journal.exists()
