"""``--address`` and ``--tracking-uri`` are checked before anything is written; ``resume NAME`` finds
sweeps whose Ray storage is a URI."""

from __future__ import annotations

import socket
import sqlite3
import time

import pytest
import ray

from sweep.commands.cli import main
from sweep.spec.variants import choose_variant, write_record
from tests.conftest import spec_file

UNTUNED_ONLY = [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}}]


@pytest.mark.parametrize("option", [["--address", "127.0.0.1:1"], ["--tracking-uri", "http://127.0.0.1:1"],
                                    ["--address", "ray://127.0.0.1:1"]])
def test_an_unreachable_cluster_or_server_is_refused_at_once_and_nothing_is_written(option, tmp_path, tiny_bert,
                                                                                    monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = spec_file(tmp_path, tiny_bert, "checked", rows=UNTUNED_ONLY)
    started = time.monotonic()
    assert main(["run", str(path), *option]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{option[0]} {option[1]}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked.yaml"]  # no mlflow.db, no ray_results
    assert not ray.is_initialized()


def test_a_server_that_never_answers_is_given_up_after_the_bound(tmp_path, tiny_bert, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEP_CHECK_TIMEOUT_S", "2")
    path = spec_file(tmp_path, tiny_bert, "checked", rows=UNTUNED_ONLY)
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        assert main(["run", str(path), "--tracking-uri", f"http://127.0.0.1:{silent.getsockname()[1]}"]) == 2
        assert 2 <= time.monotonic() - started < 15
    assert "within 2 s" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


def test_a_sqlite_file_that_is_not_an_mlflow_store_is_refused_unchanged(tmp_path, tiny_bert, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("create table notes (text)")
    before = other.read_bytes()
    path = spec_file(tmp_path, tiny_bert, "checked", rows=UNTUNED_ONLY)
    assert main(["run", str(path), "--tracking-uri", f"sqlite:///{other}"]) == 2
    assert "is a SQLite database but not an MLflow store" in capsys.readouterr().err
    assert other.read_bytes() == before


@pytest.mark.parametrize("store", ["file:{tmp}/mlruns", "{tmp}/mlruns"])
def test_a_file_store_that_mlflow_refuses_is_refused_at_once_in_one_line(store, tmp_path, tiny_bert, monkeypatch,
                                                                         capsys):
    """MLflow 3 opens no file store (``file:`` or a bare path) unless MLFLOW_ALLOW_FILE_STORE is true: `sweep run`,
    `sweep paper --plan` and the readers say so in one line (exit 2) instead of MLflow's traceback."""
    from reports.collect import main as collect

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = store.format(tmp=tmp_path)
    path = spec_file(tmp_path, tiny_bert, "checked", rows=UNTUNED_ONLY)
    for command, run in ((["run", str(path), "--tracking-uri", uri], main),
                         (["paper", "smoke-paper", "--plan", "--tracking-uri", uri], main),
                         (["--tracking-uri", uri], collect)):
        assert run(command) == 2, command
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{uri} is a file store" in err[0] and "MLFLOW_ALLOW_FILE_STORE=true" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked.yaml"]
    assert not ray.is_initialized()

    from results.reader import file_store_problem

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert file_store_problem(uri) is None
    assert file_store_problem(f"sqlite:///{tmp_path}/mlflow.db") is None


def test_variants_are_recorded_and_found_through_a_uri(tmp_path):
    root = f"file://{tmp_path}/storage"
    write_record(f"{root}/sweep-1a2b3c", {"spec_hash": "1a2b3c", "overrides": {}})
    write_record(f"{root}/sweep-9f8e7d", {"spec_hash": "9f8e7d", "overrides": {"lr": 1}})
    assert (tmp_path / "storage" / "sweep-1a2b3c" / "sweep.json").is_file()
    assert choose_variant(root, "sweep-9f").record["overrides"] == {"lr": 1}
    assert choose_variant(root, "sweep-1a2b3c").name == "sweep-1a2b3c"  # the folder's full name, as resume prints it
    with pytest.raises(ValueError, match="names 2 variants"):
        choose_variant(root, "sweep")


@pytest.mark.slow
def test_resume_by_name_finds_a_sweep_on_uri_storage(tmp_path, tiny_bert, local_ray, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    storage = f"file://{tmp_path}/shared"
    path = spec_file(tmp_path, tiny_bert, "on_uri", rows=UNTUNED_ONLY, seeds=[1])
    assert main(["run", str(path), "--storage", storage]) == 0
    (folder,) = (tmp_path / "shared").iterdir()
    assert (folder / "sweep.json").is_file() and folder.name.startswith("on_uri-")
    capsys.readouterr()
    assert main(["resume", "on_uri", "--storage", storage]) == 0  # found, restored, nothing left to run
    assert "1 trials finished, 0 failed" in capsys.readouterr().out


def test_the_store_opens_while_ray_starts_and_its_error_is_raised(monkeypatch):
    """A new SQLite store takes seconds to create: it is opened in a thread while Ray starts in the main
    thread (where Ray must start), and an error of the store still reaches the caller."""
    from sweep.run import engine
    from sweep.spec.options import SweepOptions
    from sweep.spec.variants import UsageError

    calls = []

    def slow_store(uri):
        time.sleep(0.5)
        calls.append(("store", uri))
        raise UsageError(f"{uri}: cannot be opened")

    monkeypatch.setattr(engine, "open_client", slow_store)
    monkeypatch.setattr(engine, "init_ray", lambda address: calls.append(("ray", address)))
    with pytest.raises(UsageError, match="sqlite:///x.db: cannot be opened"):
        engine.start_ray_and_store(SweepOptions("spec.yaml", {}, tracking_uri="sqlite:///x.db", address="auto"))
    assert calls == [("ray", "auto"), ("store", "sqlite:///x.db")]  # Ray started before the store was open
