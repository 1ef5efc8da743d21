"""Every command the README and the docs show in a shell block names a module that exists, spec files that
exist and options its parser accepts; the quick ones (`sweep plan` of a shipped spec, `sweep paper --plan`,
`sweep knobs`, `sweep settings`) run as written, ending with 0 and their output, or with a refusal (2) on stderr and no
traceback: one line, or a spec's problems (``invalid sweep spec:``, then one line per problem, each naming the
spec file)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from sweep.commands.cli import build_parser
from sweep.commands.cli import main as sweep_main
from tests.conftest import wait_for
from tests.fault_helpers import UNTIL_IT_HAPPENS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"SPEC", "NAME", "ENC", "A", "B", "x"}
"""Words a command stands in with (a spec, a sweep, an encoder), as the pages explain."""
PARSE_ONLY = ("reports.tables", "reports.plots", "reports.collect", "reports.analyses", "reports.importance",
              "reports.paper")
"""Reports commands whose parser is checked without running them (they read results a sweep writes)."""


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page, argv after `python -m`) of every command in the pages' bash blocks; `a && b` gives two."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                for command in line.split(" #")[0].split("&&"):
                    words = shlex.split(command.strip())
                    if words[:2] in (["python", "-m"], [".venv/bin/python", "-m"]):
                        found.append((page.name, words[2:]))
    return found


COMMANDS = shown_commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) > 40 and any(argv[:2] == ["sweep", "plan"] for _, argv in COMMANDS)


@pytest.mark.parametrize("page, argv", COMMANDS, ids=[f"{page}: {' '.join(argv)}" for page, argv in COMMANDS])
def test_a_shown_command_names_what_exists_and_options_its_parser_takes(page, argv, monkeypatch):
    module = argv[0]
    assert importlib.util.find_spec(module) is not None, f"{page}: no module {module}"
    for word in argv[1:]:
        if word.startswith("search_spaces/"):
            assert (ROOT / word).is_file(), f"{page}: {word} does not exist"
    if module == "sweep":
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"{page}: `python -m {' '.join(argv)}`: sweep's parser refuses its options")
    elif module in PARSE_ONLY:
        commands = importlib.import_module(module)
        monkeypatch.setattr(commands, "run_command", lambda parser, args, body: parser.parse_args(args) and 0)
        try:
            commands.main(argv[1:])
        except SystemExit:
            pytest.fail(f"{page}: `python -m {' '.join(argv)}`: its parser refuses its options")


QUICK = [(page, argv) for page, argv in COMMANDS
         if (argv[:2] == ["sweep", "plan"] and "--estimate" not in argv and not PLACEHOLDERS & set(argv))
         or argv[:2] in (["sweep", "knobs"], ["sweep", "settings"])
         or (argv[:2] == ["sweep", "paper"] and "--plan" in argv and "--estimate" not in argv)]


@pytest.mark.parametrize("page, argv", QUICK, ids=[f"{page}: {' '.join(argv)}" for page, argv in QUICK])
def test_a_quick_command_runs_as_written(page, argv, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = sweep_main(argv[1:])
    out, err = capsys.readouterr()
    shown = f"{page}: `python -m {' '.join(argv)}` exited {code}:\n{out[-2000:]}{err[-2000:]}"
    assert "Traceback" not in out + err, shown
    if code == 0:
        assert out.strip(), shown
    else:
        assert code == 2 and err.strip(), shown
        first, *problems = err.strip().splitlines()
        if problems:  # a spec the machine cannot run here (a model or data set out of reach): its problems
            spec = str((ROOT / next(word for word in argv if word.endswith(".yaml"))).resolve())
            assert first == "invalid sweep spec:" and all(p.startswith(f"  {spec}: ") for p in problems), shown


CLUSTER_COMMANDS = [(page, argv) for page, argv in COMMANDS
                    if page == "clusters.md" and any(word.startswith("s3://") for word in argv)]
"""docs/clusters.md's commands on a cluster whose storage is a bucket: ``sweep run`` and ``sweep resume``."""


def as_here(argv: list[str], local: dict[str, str]) -> list[str]:
    """``argv`` with its placeholders (SPEC, NAME) and the value of each option ``local`` names
    (``--address``, ``--tracking-uri``) replaced by this test's own; every other word as written."""
    words = [local.get(word, word) if word in PLACEHOLDERS else word for word in argv]
    return [local.get(words[i - 1], word) if i and words[i - 1] in local else word for i, word in enumerate(words)]


@pytest.mark.slow
def test_the_cluster_pages_commands_run_as_written_against_a_bucket(tmp_path, tiny_bert, tiny_sts_dir, monkeypatch):
    """The run and the resume shown in docs/clusters.md, each from a working folder of its own, against a Ray
    cluster (``ray.cluster_utils``: its GCS address for ``ray://head:10001``), an MLflow tracking server on
    loopback (for ``http://mlflow:5000``) and moto's S3 endpoint (tests/s3_endpoint.py), the bucket named as
    written: the run writes its checkpoints and ``sweep.json`` there, and the resume finds the sweep there
    with nothing left to train."""
    import ray
    from ray.cluster_utils import Cluster

    from results.record import Tag
    from tests.conftest import child_runs, spec_file
    from tests.s3_endpoint import free_port, s3_endpoint
    from tests.test_postgres_drivers import stop

    assert [argv[:2] for _, argv in CLUSTER_COMMANDS] == [["sweep", "run"], ["sweep", "resume"]]
    storage = next(word for _, argv in CLUSTER_COMMANDS for word in argv if word.startswith("s3://"))
    bucket = storage.removeprefix("s3://").split("/")[0]
    monkeypatch.setenv("STS_DATA_DIR", str(tiny_sts_dir))  # forwarded by the driver to every trial's worker
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = spec_file(tmp_path, tiny_bert, "docs-s3", seeds=[1])
    port = free_port()
    with s3_endpoint() as endpoint:  # in this process's environment: the Ray nodes started here inherit it
        endpoint.create_bucket(bucket)
        env = {**os.environ, **endpoint.env, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db",
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
             "--artifacts-destination", str(tmp_path / "artifacts")],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        uri = f"http://127.0.0.1:{port}"
        ray.shutdown()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        try:
            wait_for(lambda: urllib.request.urlopen(f"{uri}/health", timeout=60).status == 200, UNTIL_IT_HAPPENS,
                     what="the MLflow server answering", driver=server)
            local = {"SPEC": str(spec), "NAME": "docs-s3", "--address": cluster.address, "--tracking-uri": uri}
            for number, (_, argv) in enumerate(CLUSTER_COMMANDS):
                folder = tmp_path / f"command-{number}"  # a working folder of its own: nothing shared but these
                folder.mkdir()
                done = subprocess.run([sys.executable, "-m", *as_here(argv, local)], cwd=folder, env=env,
                                      capture_output=True, text=True)
                assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
                assert not [p for p in folder.rglob("checkpoint_*") if p.is_dir()], "a checkpoint written here"
            # the resume found the sweep in the bucket, both its trials finished there: nothing to train
            assert f"resuming docs-s3 from {storage}/docs-s3-" in done.stdout, done.stdout
            assert "its 2 finished trials are kept" in done.stdout and "2 trials finished, 0 failed" in done.stdout
            keys = endpoint.keys(bucket)
            (trained,) = [r for r in child_runs(uri, "docs-s3") if r.data.tags[Tag.ROW] == "simcse"]
        finally:
            ray.shutdown()
            cluster.shutdown()
            stop(server)
    prefix = f"{storage.removeprefix(f's3://{bucket}/')}/docs-s3-"
    assert any(key.startswith(prefix) and key.endswith("/sweep.json") for key in keys), keys
    checkpoint = trained.data.tags[Tag.CHECKPOINT]  # the trial's last checkpoint, stored whole in the bucket
    assert checkpoint.startswith(f"{storage}/docs-s3-")
    assert f"{checkpoint.removeprefix(f's3://{bucket}/')}/checkpoint.json" in keys, keys
