"""A trial's config is resolved once per ``sweep run``: when the spec is loaded, in the driver.

A probe (``sitecustomize.py`` on ``PYTHONPATH``, so it is loaded by the driver and by every Ray worker
the driver starts) wraps :meth:`trainers.method.Method.resolve` and logs each call with its process id.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from results.record import TRIAL_FILTER

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import importlib.abc, importlib.machinery, os, sys

class _ResolveProbe(importlib.abc.MetaPathFinder):
    """Wrap Method.resolve once trainers.method is imported: each call appends a line to $RESOLVE_LOG."""

    def find_spec(self, name, path, target=None):
        if name != "trainers.method":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            original = module.Method.resolve

            def resolve(self, overrides):
                with open(os.environ["RESOLVE_LOG"], "a", encoding="utf-8") as log:
                    log.write(f"{os.getpid()} {self.name}\\n")
                return original(self, overrides)

            module.Method.resolve = resolve

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _ResolveProbe())
'''


def test_sweep_run_of_the_smoke_spec_resolves_each_trial_config_once(tmp_path, tiny_bert, use_tiny_sts):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE, encoding="utf-8")
    log = tmp_path / "resolve.log"
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "RESOLVE_LOG": str(log), "PYTHONPATH": os.pathsep.join([str(probe), str(ROOT)])}
    command = [sys.executable, "-m", "sweep", "run", str(ROOT / "search_spaces/smoke.yaml"), "--set",
               f"model={tiny_bert}", "--set", "max_steps=4", "--set", "eval_every=2", "--set", "batch_size=8",
               "--tracking-uri", uri, "--storage", str(tmp_path / "ray")]
    finished = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]

    client = MlflowClient(uri)
    trials = client.search_runs([client.get_experiment_by_name("smoke").experiment_id], TRIAL_FILTER)
    assert len(trials) == 3 and all(run.info.status == "FINISHED" for run in trials)
    calls = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    # One resolution per trial, all in the driver (while the spec is loaded): none in the workers, none
    # in the tracker, none for the summary.
    assert sorted(method for _, method in calls) == ["none", "none", "simcse"]
    assert {pid for pid, _ in calls} == {calls[0][0]}
    for run in trials:  # and the tracker logged what the worker ran: the resolved config, every knob
        assert run.data.params["model"] == tiny_bert and run.data.params["eval_max_pairs"] == "500"
    (simcse,) = [run for run in trials if run.data.params["method"] == "simcse"]
    assert simcse.data.params["max_steps"] == "4" and simcse.data.params["temperature"] == "0.05"
