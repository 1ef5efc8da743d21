"""The ``torch_compile`` knob: a trial whose transformer runs through torch.compile computes what the eager
trial computes (the same dropout draws, its losses and dev scores equal to float rounding), and it does
compile."""

from __future__ import annotations

import pytest

from trainers.training.loop import run_trial


def _trial(model: str, method: str, compiled: bool) -> tuple[list[float], float]:
    reports: list[dict] = []
    final = run_trial({"method": method, "model": model, "max_steps": 6, "eval_every": 3, "batch_size": 8,
                       "train_limit": 100, "eval_max_pairs": 50, "torch_compile": compiled}, reports.append)
    return [report["loss"] for report in reports if "loss" in report], final["best_dev_spearman"]


@pytest.mark.parametrize("method", ["simcse", "consert"])
def test_a_compiled_trial_computes_what_the_eager_one_does(tiny_bert, method):
    """SimCSE's views are two dropout passes (the compiled graph must draw eager's masks: a compiled dropout of
    its own would give other losses); ConSERT's are forward hooks at the embedding layer (run eagerly)."""
    from torch._dynamo.utils import counters

    eager_losses, eager_dev = _trial(str(tiny_bert), method, compiled=False)
    graphs_before = counters["stats"]["unique_graphs"]
    compiled_losses, compiled_dev = _trial(str(tiny_bert), method, compiled=True)
    assert counters["stats"]["unique_graphs"] > graphs_before or counters["stats"]["calls_captured"] > 0
    assert len(compiled_losses) == len(eager_losses) == 2
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-5)
    assert compiled_dev == pytest.approx(eager_dev, abs=1e-4)


def test_the_knob_compiles_the_transformer(tiny_bert):
    """The steps of a compiled trial go through torch.compile's frames (a no-op knob captures none)."""
    from torch._dynamo.utils import counters

    counters.clear()
    _trial(str(tiny_bert), "simcse", compiled=True)
    assert counters["stats"]["calls_captured"] > 0
    counters.clear()
    _trial(str(tiny_bert), "simcse", compiled=False)
    assert counters["stats"]["calls_captured"] == 0


def test_the_mode_reaches_torch_compile_as_its_options(tiny_bert, monkeypatch):
    """``torch_compile_mode`` is handed to torch.compile as the mode's own options (a mode ignored would compile
    every trial as 'default'), with eager's random draws kept."""
    import torch

    from trainers.models import encoder as encoder_module

    seen: list[dict] = []
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.append(kwargs["options"]) or compile_(fn, **kwargs))
    encoder_module._compiled_call.cache_clear()
    reports: list[dict] = []
    run_trial({"method": "simcse", "model": str(tiny_bert), "max_steps": 2, "eval_every": 2, "batch_size": 8,
               "train_limit": 16, "eval_max_pairs": 20, "torch_compile": True,
               "torch_compile_mode": "reduce-overhead"}, reports.append)
    encoder_module._compiled_call.cache_clear()
    assert seen == [{"triton.cudagraphs": True, "fallback_random": True}]


def test_a_mode_without_torch_compile_is_refused():
    """A mode set while torch_compile is off would change the trial's key and compute nothing else: refused,
    naming the knob."""
    from trainers.knobs import ConfigError
    from trainers.registry import get_method

    with pytest.raises(ConfigError, match="torch_compile_mode.*needs torch_compile: true"):
        get_method("simcse").resolve({"torch_compile_mode": "reduce-overhead"})
    assert get_method("simcse").resolve({"torch_compile": True, "torch_compile_mode": "reduce-overhead"})
