"""Two drivers, one store: processes that open a new SQLite store at the same moment all succeed, and two
real sweeps started together in a fresh folder (the default ``sqlite:///mlflow.db``) both finish, training
the trial they share once (:mod:`sweep.run.claims`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from mlflow import MlflowClient

from tests.conftest import spec_file
from tests.test_sweep_run import ROOT

OPEN_AND_WRITE = textwrap.dedent("""
    import sys
    from sweep.tracking.store import open_client
    print("ready", flush=True)
    sys.stdin.readline()  # every process opens the store at the same moment
    client = open_client(sys.argv[1])
    experiment = client.create_experiment(f"writer {sys.argv[2]}")
    for step in range(20):
        client.log_metric(client.create_run(experiment).info.run_id, "x", step)
""")


def test_sweep_status_opens_the_store_under_its_lock(tmp_path):
    """``sweep status`` waits while another process holds the store's lock (creating it), then reads it."""
    import threading

    from filelock import FileLock

    from sweep.commands.status import trial_rows
    from sweep.spec.sweep_spec import load_spec
    from sweep.tracking.store import open_client
    from sweep.tracking.tracker import ensure_parent_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ensure_parent_run(open_client(uri), load_spec(ROOT / "search_spaces/smoke.yaml"))
    answers = []
    with FileLock(f"{tmp_path}/mlflow.db.lock"):
        reader = threading.Thread(target=lambda: answers.append(trial_rows("smoke", uri)))
        reader.start()
        reader.join(timeout=3)
        assert reader.is_alive() and not answers  # still waiting for the lock
    reader.join(timeout=60)
    assert answers == [[]]  # the sweep's parent run, no trials yet


@pytest.mark.parametrize("reader", ["check_tracking_uri", "read_client"])
def test_a_store_another_process_is_creating_is_checked_and_read_once_it_is_made(tmp_path, reader):
    """A driver's preflight check and its read-only resume check wait while another driver holds the store's
    lock, creating it, rather than refuse or re-create the half-made store they would find."""
    import sqlite3
    import threading

    from filelock import FileLock

    from results.reader import read_client
    from sweep.run.preflight import check_tracking_uri

    path = tmp_path / "mlflow.db"
    uri = f"sqlite:///{path}"
    read = {"check_tracking_uri": check_tracking_uri,
            "read_client": lambda uri: read_client(uri).get_experiment_by_name("made")}[reader]
    answers = []
    with FileLock(f"{path}.lock"):
        with sqlite3.connect(path) as db:  # MLflow's first tables, before its migrations record their version
            db.execute("create table experiments (experiment_id integer)")
        thread = threading.Thread(target=lambda: answers.append(_outcome(read, uri)))
        thread.start()
        thread.join(timeout=3)
        assert thread.is_alive() and not answers
        path.unlink()
        MlflowClient(uri).create_experiment("made")
    thread.join(timeout=60)
    assert answers and not isinstance(answers[0], Exception), answers


def _outcome(call, *args):
    try:
        return call(*args)
    except Exception as error:  # the test shows what was raised
        return error


def test_processes_that_open_a_new_store_together_all_succeed(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", OPEN_AND_WRITE, uri, str(i)], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    assert [writer.stdout.readline().strip() for writer in writers] == ["ready"] * 4
    for writer in writers:
        writer.stdin.write("go\n")
        writer.stdin.flush()
    errors = [writer.communicate(timeout=300)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0] * 4, "\n".join(e[-2000:] for e in errors)
    client = MlflowClient(uri)
    assert len(client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)) == 80


@pytest.mark.slow
def test_two_sweeps_started_together_both_finish_and_train_their_shared_trial_once(tmp_path, tiny_bert,
                                                                                   use_tiny_sts):
    rows = [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}},
            {"name": "simcse", "set": {"max_steps": 2, "eval_every": 1}}]
    path = spec_file(tmp_path, tiny_bert, "together", rows=rows, seeds=[1])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Two variants of one spec: one experiment, created by whichever driver comes first. The learning rate
    # changes the SimCSE trial, not the untuned one: both sweeps would train that trial, which has one key.
    drivers = [
        subprocess.Popen([sys.executable, "-m", "sweep", "run", str(path), "--set", f"learning_rate={lr}"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for lr in (1e-5, 2e-5)
    ]
    outputs = [driver.communicate(timeout=900)[0] for driver in drivers]
    assert [driver.returncode for driver in drivers] == [0, 0], "\n\n".join(o[-3000:] for o in outputs)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (experiment,) = [e for e in client.search_experiments() if e.name == "together"]
    parents = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'parent'")
    trials = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'")
    assert len(parents) == 2 and {p.info.status for p in parents} == {"FINISHED"}
    assert len(trials) == 4 and {t.info.status for t in trials} == {"FINISHED"}
    untuned = [t for t in trials if t.data.tags["sweep.row"] == "untuned"]
    assert len({t.data.tags["sweep.trial_key"] for t in untuned}) == 1
    trained = [t for t in untuned if "sweep.reused_from" not in t.data.tags]
    (reused,) = [t for t in untuned if "sweep.reused_from" in t.data.tags]
    assert len(trained) == 1 and reused.data.tags["sweep.reused_from"] == trained[0].info.run_id
    assert reused.data.metrics["test_avg_spearman"] == trained[0].data.metrics["test_avg_spearman"]
    assert not [m for m in client.search_registered_models() if m.name.startswith("sweep-claim-")]  # released
