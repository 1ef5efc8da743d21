"""A tracking server that goes away in the middle of a trial: a real ``mlflow server`` on loopback, stopped
and started again on the same port and store.

Gone for less than the bound, the sweep rides through and writes what its trial reported meanwhile once
the server is back. Gone for longer, the sweep stops as Ctrl-C stops it (one line why, the resume
command, exit 75) and ``sweep resume`` finishes it. Either way each evaluation step is logged once, in
one run. MLflow's own retries are shortened by its environment variables, as the bound is by the sweep's.

The trial holds at known steps until the test releases it (:mod:`tests.fault_helpers`): the server stops
while the trial is held after an evaluation the store has, and the trial goes on only once the driver has
seen the outage, so no step of it races a clock. The health check itself is tested on a server that
answers late (live) and on a port where none listens (down).
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from sweep.tracking import journal as pending_writes
from sweep.tracking.journal import PendingWrites, answers
from tests.conftest import wait_for
from tests.fault_helpers import HOLDING_DRIVER, UNTIL_IT_HAPPENS, held_file, hold_env, release, release_all

ROOT = Path(__file__).resolve().parents[1]
STEPS, EVAL_EVERY = 12, 2
SEEN_UP, SEEN_DOWN, AFTER_BOUND = 4, 8, 10
"""The trial holds after these steps' reports: the server stops while it is held at SEEN_UP (that step
written), it is held at SEEN_DOWN until the driver has seen the outage, and (past the bound) at AFTER_BOUND
until the driver stops."""
BOUND_S = 10


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
        while self.process.poll() is None:  # until it answers, however long a loaded machine takes
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=60)
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"mlflow server exited {self.process.returncode} before it answered")

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


def driver_env(tiny_sts_dir: Path, bound_s: int, holds: Path) -> dict[str, str]:
    """The driver's environment: a stopped server refuses connections at once, so MLflow's retries are
    shortened by their count, not by a timeout that a slow but live server would also hit."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "STS_DATA_DIR": str(tiny_sts_dir), "PYTHONUNBUFFERED": "1",
            "SWEEP_TRACKING_OUTAGE_S": str(bound_s), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", **hold_env(holds, SEEN_UP, SEEN_DOWN, AFTER_BOUND)}


def trial_run(store: str, name: str):
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'")
    assert len(runs) == 1, f"{len(runs)} trial runs"
    return runs[0]


def evaluated_steps(store: str, run_id: str) -> list[int]:
    return [m.step for m in MlflowClient(store).get_metric_history(run_id, "dev_spearman")]


def written_up_to(server: Server, name: str, step: int, holds: Path) -> bool:
    """Whether the trial is held at ``step`` and the store has its evaluations up to it."""
    if not held_file(holds, step).exists():
        return False
    return evaluated_steps(server.store, trial_run(server.store, name).info.run_id)[-1:] == [step]


def saw_the_outage(log: Path, holds: Path) -> bool:
    """Whether the trial is held at SEEN_DOWN and the driver has said that the server does not answer."""
    return held_file(holds, SEEN_DOWN).exists() and "does not answer: the trials go on" in log.read_text()


def start_driver(tmp_path: Path, path: Path, server: Server, env: dict[str, str], log: Path) -> subprocess.Popen:
    command = [*HOLDING_DRIVER, "run", str(path), "--tracking-uri", server.url, "--storage", str(tmp_path / "ray")]
    with log.open("w") as output:
        return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_a_short_outage_is_ridden_through_and_what_was_reported_meanwhile_is_written(
        tmp_path, tiny_bert, tiny_sts_dir, server):
    path, holds, log = spec_file(tmp_path, tiny_bert, "outage_short"), tmp_path / "holds", tmp_path / "driver.log"
    process = start_driver(tmp_path, path, server, driver_env(tiny_sts_dir, 600, holds), log)
    try:
        wait_for(lambda: written_up_to(server, "outage_short", SEEN_UP, holds), UNTIL_IT_HAPPENS,
                 f"the trial held at step {SEEN_UP}, written", log, process)
        server.stop()
        release(holds, SEEN_UP)
        wait_for(lambda: saw_the_outage(log, holds), UNTIL_IT_HAPPENS, "the outage seen by the driver", log, process)
        server.start()
        release_all(holds, SEEN_DOWN, AFTER_BOUND)
        assert process.wait() == 0, log.read_text()[-3000:]
    finally:
        release_all(holds, SEEN_UP, SEEN_DOWN, AFTER_BOUND)
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert "does not answer: the trials go on" in output and "answers again after" in output

    run = trial_run(server.store, "outage_short")
    assert run.info.status == "FINISHED"
    assert evaluated_steps(server.store, run.info.run_id) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert "test_avg_spearman" in run.data.metrics
    assert not list((tmp_path / "ray").glob("*/tracking_journal.json"))


@pytest.mark.slow
def test_an_outage_past_the_bound_stops_the_sweep_cleanly_and_a_resume_finishes_it(
        tmp_path, tiny_bert, tiny_sts_dir, server):
    path, holds, log = spec_file(tmp_path, tiny_bert, "outage_long"), tmp_path / "holds", tmp_path / "driver.log"
    storage = tmp_path / "ray"
    env = driver_env(tiny_sts_dir, BOUND_S, holds)
    process = start_driver(tmp_path, path, server, env, log)
    try:
        wait_for(lambda: written_up_to(server, "outage_long", SEEN_UP, holds), UNTIL_IT_HAPPENS,
                 f"the trial held at step {SEEN_UP}, written", log, process)
        first = evaluated_steps(server.store, trial_run(server.store, "outage_long").info.run_id)
        server.stop()
        release(holds, SEEN_UP)
        wait_for(lambda: saw_the_outage(log, holds), UNTIL_IT_HAPPENS, "the outage seen by the driver", log, process)
        time.sleep(BOUND_S + 1)  # the driver's outage began before its note: the bound has passed after this
        release(holds, SEEN_DOWN)  # the trial's next report is the driver's next event: it finds the bound passed
        process.wait()
    finally:
        release_all(holds, SEEN_UP, SEEN_DOWN, AFTER_BOUND)
        if process.poll() is None:
            process.kill()
    output = log.read_text()
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
    # The printed command, by the same driver (Tune resumes a sweep only with the trainable it began with);
    # every hold is past, so nothing holds.
    resumed = subprocess.run([*HOLDING_DRIVER, *resume.split()[3:]], cwd=tmp_path, env=env, capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    run = trial_run(server.store, "outage_long")
    assert run.info.run_id == before.info.run_id and run.info.status == "FINISHED"
    assert evaluated_steps(server.store, run.info.run_id) == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert not journal.exists()


class SlowHealth(http.server.BaseHTTPRequestHandler):
    """A live server slowed down: it takes the connection at once and answers its health check late."""

    delay_s = pending_writes.PROBE_CONNECT_S + 2

    def do_GET(self) -> None:
        time.sleep(self.delay_s)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def slow_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowHealth)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_slow_but_live_server_answers_and_a_gone_one_does_not(slow_server):
    assert answers(slow_server)  # past the connect bound, still live
    assert not answers(f"http://127.0.0.1:{free_port()}")  # nobody listens there: refused at once


def test_the_sweeps_last_event_is_written_at_once_when_the_server_is_back(monkeypatch):
    """A server back since its last probe gets the backlog with the sweep's last event, not at the next
    probe, which would come after the driver has ended."""
    up, written = [False], []

    def apply(event: dict) -> None:
        if not up[0]:
            raise ConnectionError("the server does not answer")
        written.append(event)

    monkeypatch.setattr(pending_writes, "answers", lambda uri: up[0])
    pending = PendingWrites("http://127.0.0.1:9", note=lambda line: None)
    pending.add({"step": 1}, apply)
    up[0] = True
    pending.add({"step": 2}, apply)  # within PROBE_EVERY_S of the failed write: it waits
    assert written == [] and len(pending.events) == 2
    pending.add({"kind": "end"}, apply, at_once=True)
    assert written == [{"step": 1}, {"step": 2}, {"kind": "end"}] and pending.down_since is None
