"""A GPU per trial (whole or a fraction) that the spec's max_concurrent_trials and the machine cannot honour is
refused before a sweep starts, with its file and key (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweep.commands.cli import main
from sweep.spec import environment as spec_environment
from sweep.spec.resources import gpu_problem

SMOKE = Path(__file__).resolve().parent.parent / "search_spaces" / "smoke.yaml"


def smoke_with(tmp_path: Path, **changes) -> Path:
    raw = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump({**raw, **changes}), encoding="utf-8")
    return path


@pytest.mark.parametrize("gpu, concurrency, gpus, at_once", [
    (0.25, 4, 1, 4), (0.25, 8, 2, 8), (0.3, 3, 1, 3), (1, 2, 2, 2), (2, 1, 2, 1),  # honoured
    (0.25, 5, 1, 4), (0.3, 4, 1, 3), (0.5, 5, 2, 4), (1, 3, 2, 2), (2, 2, 3, 1),  # not: the rest would wait
])
def test_trials_at_once_are_floor_one_over_the_fraction_per_gpu(gpu, concurrency, gpus, at_once):
    problem = gpu_problem(gpu, concurrency, gpus)
    assert (problem is None) == (concurrency <= at_once)
    if problem:
        assert f"{at_once} trials fit at once on the cluster's {gpus} GPU(s)" in problem
        assert f"expected max_concurrent_trials <= {at_once}" in problem


def test_plan_refuses_a_fraction_the_machine_cannot_honour(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(spec_environment, "local_gpus", lambda: 1)
    path = smoke_with(tmp_path, resources={"cpu": 1, "gpu": 0.25}, max_concurrent_trials=5)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path.resolve()}: resources.gpu: 0.25 with max_concurrent_trials 5: 4 trials fit at once" in err
    assert "or resources.gpu <= 0.2" in err and "Traceback" not in err
    assert main(["plan", str(smoke_with(tmp_path, resources={"cpu": 1, "gpu": 0.25}, max_concurrent_trials=4))]) == 0
    monkeypatch.setattr(spec_environment, "local_gpus", lambda: 0)
    assert main(["plan", str(smoke_with(tmp_path, resources={"cpu": 1, "gpu": 0.25}, max_concurrent_trials=1))]) == 2
    assert "resources.gpu: 0.25 asks for a GPU, and the cluster has none" in capsys.readouterr().err


def test_more_than_one_gpu_in_parts_is_refused(tmp_path, capsys):
    assert main(["plan", str(smoke_with(tmp_path, resources={"cpu": 1, "gpu": 1.5}))]) == 2
    assert "resources.gpu: expected a fraction of one GPU (such as 0.25) or a whole number of GPUs, got 1.5" in (
        capsys.readouterr().err)
