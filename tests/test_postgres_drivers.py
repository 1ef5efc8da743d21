"""Many drivers, one tracking server backed by PostgreSQL: four sweeps started at once each record their
parent run and every trial once, and all end FINISHED.

The test starts its own PostgreSQL cluster (``initdb`` and ``pg_ctl`` of Debian's ``postgresql``, as the
``postgres`` user when it runs as root: PostgreSQL refuses root) on loopback, on a free port, in a temporary
folder, and ``mlflow server --backend-store-uri postgresql://...`` on it; four ``python -m sweep run`` drivers,
each its own Ray, write to that server together. It is skipped, with the reason, where PostgreSQL or psycopg2
is missing or will not start.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_sweep_run import ROOT, spec_file

pytestmark = pytest.mark.slow
NAME = "postgres-drivers"
LEARNING_RATES = (1e-5, 2e-5, 3e-5, 4e-5)
"""One driver per value: four variants of one spec, four parent runs in one experiment."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of Debian's PostgreSQL server programs (the newest version installed), or of those on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


@pytest.fixture
def postgres_uri():
    """``postgresql://`` URI of an empty database on a PostgreSQL cluster of this test's own; stopped and
    deleted afterwards."""
    psycopg2 = pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install psycopg2-binary)")
    programs = postgres_bin()
    if programs is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="sweep-postgres-"))  # outside pytest's root-only tmp folders
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as 'postgres'
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder)
            pytest.skip("running as root, and there is no 'postgres' user to run PostgreSQL as")
        os.chown(folder, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]

    def postgres(program: str, *arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([*as_user, str(programs / program), *arguments], capture_output=True, text=True,
                              timeout=120)

    data, port, started = folder / "data", free_port(), False
    try:
        made = postgres("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
                        "--no-sync")
        if made.returncode:
            pytest.skip(f"PostgreSQL's initdb failed: {(made.stderr or made.stdout).strip()[-500:]}")
        server_options = f"-c listen_addresses=127.0.0.1 -p {port} -k {shlex.quote(str(folder))} -c fsync=off"
        start = postgres("pg_ctl", "-D", str(data), "-l", str(folder / "postgres.log"), "-w", "-t", "60",
                         "-o", server_options, "start")
        started = start.returncode == 0
        if not started:
            log = (folder / "postgres.log").read_text() if (folder / "postgres.log").exists() else ""
            pytest.skip(f"PostgreSQL did not start: {(start.stderr + start.stdout + log).strip()[-500:]}")
        connection = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE mlflow")
        connection.close()
        # The driver named: SQLAlchemy 2.1 takes a bare postgresql:// for psycopg 3, which may be absent.
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow"
    finally:
        if started:
            postgres("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tracking_server(postgres_uri, tmp_path):
    """``http://`` URI of an MLflow tracking server on the PostgreSQL database; stopped afterwards."""
    port, log = free_port(), tmp_path / "mlflow-server.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", postgres_uri, "--host", "127.0.0.1",
             "--port", str(port), "--workers", "2", "--artifacts-destination", str(tmp_path / "artifacts")],
            cwd=tmp_path, stdout=output, stderr=output, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        # Until it answers or exits: its first start creates MLflow's tables in the database, as long as a
        # loaded machine takes (pytest's timeout is the only cap).
        while True:
            assert server.poll() is None, f"the MLflow server exited {server.returncode}:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=60) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        yield uri
    finally:
        stop(server)


def stop(server: subprocess.Popen) -> None:
    """End the server and its workers: the process group it leads."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sent)
        except ProcessLookupError:
            pass
        try:
            server.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def test_four_drivers_on_one_postgres_tracking_server_each_record_their_trials_once(
        tmp_path, tiny_bert, use_tiny_sts, postgres_uri, tracking_server):
    import psycopg2
    from mlflow import MlflowClient

    rows = [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}},
            {"name": "simcse", "set": {"max_steps": 2, "eval_every": 1}}]
    path = spec_file(tmp_path, tiny_bert, NAME, rows=rows, seeds=[1])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = [tmp_path / f"driver-{i}.log" for i in range(len(LEARNING_RATES))]
    drivers = []
    for log, rate in zip(logs, LEARNING_RATES):  # all four at once, into one experiment
        with log.open("w") as output:
            drivers.append(subprocess.Popen(
                [sys.executable, "-m", "sweep", "run", str(path), "--tracking-uri", tracking_server,
                 "--set", f"learning_rate={rate}"], cwd=tmp_path, env=env, stdout=output, stderr=output))
    try:
        codes = [driver.wait() for driver in drivers]  # each to its end; pytest's timeout is the only cap
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
    assert codes == [0] * len(drivers), "\n\n".join(log.read_text()[-3000:] for log in logs)

    client = MlflowClient(tracking_server)
    experiment = client.get_experiment_by_name(NAME)
    parents = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'parent'")
    assert len(parents) == len(LEARNING_RATES) and {p.info.status for p in parents} == {"FINISHED"}
    assert len({p.data.tags["sweep.spec_hash"] for p in parents}) == len(LEARNING_RATES)
    trials = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'", max_results=1000)
    assert len(trials) == 2 * len(LEARNING_RATES) and {t.info.status for t in trials} == {"FINISHED"}
    for parent in parents:
        own = [t for t in trials if t.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        assert sorted(t.data.tags["sweep.row"] for t in own) == ["simcse", "untuned"]
        assert len({t.data.tags["sweep.trial_id"] for t in own}) == 2  # one run per trial id
        (trained,) = [t for t in own if t.data.tags["sweep.row"] == "simcse"]
        assert [m.step for m in client.get_metric_history(trained.info.run_id, "dev_spearman")] == [1, 2]
    # The server's store is the PostgreSQL database: every run is a row of its runs table.
    with psycopg2.connect(postgres_uri.replace("+psycopg2", "")) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs WHERE experiment_id = %s", (int(experiment.experiment_id),))
        assert cursor.fetchone()[0] == 3 * len(LEARNING_RATES)
