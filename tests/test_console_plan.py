"""What the plans say: ``sweep paper NAME --plan`` names the model each spec loads (not the paper's label),
what the budget caps, the estimated time of the trials to train, and the files that are missing, by name;
``--seeds`` that a budget caps are said to be capped; and ``sweep plan`` computes trial keys without torch,
the same keys as with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from sweep.commands.campaign import plan_lines
from sweep.commands.cli import main
from sweep.commands.estimate import estimate
from sweep.commands.trial_costs import StageTiming, Timing
from sweep.spec import trial_key as keys
from sweep.spec.budget import BUDGETS
from sweep.spec.campaign import load_campaign
from sweep.spec.sweep_spec import load_spec
from tests.conftest import spec_file
from tests.test_sweep_run import ROOT
from trainers.registry import get_method

FAKE = Timing(setup=2.0, stages=(StageTiming("train", 0.0, 0.0, 0.5, 3.0),), dev=3.0, test=10.0)


@pytest.fixture
def campaign_file(tmp_path, tiny_bert):
    """A campaign of a runnable tiny-BERT spec and one whose training corpus is a file that is not there."""
    spec_file(tmp_path, tiny_bert, "runs", seeds=[1, 2])
    spec_file(tmp_path, tiny_bert, "lacks", seeds=[1], base={
        "model": tiny_bert, "batch_size": 8, "max_steps": 4, "eval_every": 2,
        "train_corpus": str(tmp_path / "no-such-corpus.txt")})
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump({"description": "two specs", "specs": ["runs.yaml", "lacks.yaml"]}))
    return path


def test_the_campaign_plan_names_models_budget_caps_and_missing_files(campaign_file, tiny_bert, tmp_path, capsys):
    assert main(["paper", str(campaign_file), "--plan", "--budget", "smoke",
                 "--tracking-uri", f"sqlite:///{tmp_path}/none.db"]) == 0
    out = capsys.readouterr().out
    smoke = BUDGETS["smoke"]
    caps = [f"{field.name} {getattr(smoke, field.name)}" for field in fields(smoke) if field.name != "name"]
    assert f"budget smoke: caps {', '.join(caps)}" in out, out
    runs = next(line for line in out.splitlines() if line.startswith("runs "))
    assert f"  {tiny_bert}" in runs, runs  # the model its trials load
    assert f"missing files: lacks: {tmp_path / 'no-such-corpus.txt'} (train_corpus)" in out, out
    assert "`--plan --estimate`" in out


def test_the_campaign_plan_estimates_the_trials_it_would_train(campaign_file):
    campaign = load_campaign(str(campaign_file), "smoke")
    seen = []

    def timed(spec):
        seen.append(len(spec.trials))
        return estimate(spec, measure_fn=lambda config: FAKE, cpus=2, worker_start=1.0)

    lines = plan_lines(campaign, "smoke", None, timed)
    # The smoke budget keeps seed 1: the untuned row and SimCSE, 2 trials; the same model's estimate as `sweep plan`.
    assert seen == [2]
    expected = estimate(campaign.runnable[0].spec, measure_fn=lambda config: FAKE, cpus=2, worker_start=1.0)[-1]
    assert "time of paper-pair, the 2 distinct trials to train:" in lines and f"  {expected}" in lines, lines


def test_named_seeds_that_a_budget_caps_are_said_to_be_capped(capsys, tmp_path):
    spec = str(ROOT / "search_spaces" / "smoke_temperature.yaml")
    for command in ("plan", "run"):  # run is refused after the line (a misspelt knob): no sweep starts
        main([command, spec, "--seeds", "42,1,2", "--budget", "smoke", "--tracking-uri", f"sqlite:///{tmp_path}/x.db",
              *(["--set", "learning_rat=1e-5"] if command == "run" else [])])
        err = capsys.readouterr().err
        assert err.count("warning: --budget smoke runs at most 1 seed per row: seed 42 of the 3 named with "
                         "--seeds (42, 1, 2); without --budget all 3 run") == 1, err
    main(["plan", spec, "--seeds", "42", "--budget", "smoke", "--tracking-uri", f"sqlite:///{tmp_path}/x.db"])
    assert "warning" not in capsys.readouterr().err


without_gpu = pytest.mark.skipif(
    not Path("/proc/cpuinfo").is_file() or any(Path(path).exists() for path in keys.GPU_DRIVERS),
    reason="a GPU driver or no /proc/cpuinfo: torch is asked for the precision")


@without_gpu
def test_the_precision_read_without_torch_is_torchs():
    for setting in ("auto", "tf32"):
        for graphed in (False, True):
            assert keys._cpu_precision(setting) == keys._torch_precision(setting, graphed), (setting, graphed)


def test_a_trial_keys_precision_on_a_gpu_follows_its_step_mode(monkeypatch):
    """On a card with TF32 and bf16 units, ``auto`` trains a ``cuda_graph`` trial in bf16 and an eager one in
    TF32: their keys' ``precision`` parts say so (evaluation is TF32 in both)."""
    import torch

    monkeypatch.setattr(keys, "_cpu_precision", lambda setting: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    config = {**get_method("simcse").resolve({"train_precision": "auto", "pad_to_max_length": True}),
              "method": "simcse"}
    keys._precision.cache_clear()
    try:
        eager, graphed = (json.loads(keys.trial_key({**config, "cuda_graph": mode}).parts["precision"])
                          for mode in (False, True))
    finally:
        keys._precision.cache_clear()
    assert eager == {"eval_precision": "tf32", "train_precision": "tf32"}
    assert graphed == {"eval_precision": "tf32", "train_precision": "bf16"}


def test_trial_keys_are_the_same_with_and_without_torch(monkeypatch):
    spec = load_spec(ROOT / "search_spaces" / "smoke.yaml")
    configs = [trial.config for trial in spec.trials] + [{**spec.trials[-1].config, "train_precision": "tf32"}]
    keys._precision.cache_clear()
    fast = [keys.trial_key(config).tags() for config in configs]
    keys._precision.cache_clear()
    monkeypatch.setattr(keys, "_cpu_precision", lambda setting: None)
    try:
        slow = [keys.trial_key(config).tags() for config in configs]
    finally:
        keys._precision.cache_clear()
    assert fast == slow


@without_gpu
def test_sweep_plan_computes_trial_keys_without_importing_torch():
    code = ("import sys; from sweep.spec.sweep_spec import load_spec; from sweep.spec.trial_key import trial_key; "
            f"spec = load_spec({str(ROOT / 'search_spaces' / 'smoke.yaml')!r}); "
            "[trial_key(t.config) for t in spec.trials]; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr
