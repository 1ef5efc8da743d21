"""eval_precision / train_precision: what 'auto' picks, that autocast really runs, and the record."""

from __future__ import annotations

import pytest
import torch

from trainers.knobs import ConfigError
from trainers.models.encoder import SentenceEncoder
from trainers.registry import get_method
from trainers.training import precision
from trainers.training.loop import run_trial

CPU = torch.device("cpu")


@pytest.mark.parametrize("fast", [True, False])
def test_auto_on_a_cpu_is_bf16_only_where_the_hardware_runs_it_fast(monkeypatch, fast):
    monkeypatch.setattr(precision, "cpu_runs_bf16_fast", lambda: fast)
    assert precision.resolve("auto", CPU) == ("bf16" if fast else "fp32")
    assert precision.resolve("fp32", CPU) == "fp32" and precision.resolve("bf16", CPU) == "bf16"
    assert precision.resolve("tf32", CPU) == "fp32"  # no TF32 units on a CPU


@pytest.mark.parametrize("major", [7, 8, 9])
def test_tf32_and_auto_on_cuda_follow_the_tensor_cores(monkeypatch, major):
    """TF32 from compute capability 8 (Ampere) on; before it, 'auto' falls back to the bf16 rule."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: major >= 8)
    cuda = torch.device("cuda")
    assert precision.resolve("tf32", cuda) == ("tf32" if major >= 8 else "fp32")
    assert precision.resolve("auto", cuda) == (precision.CUDA_AUTO if major >= 8 else "fp32")
    assert precision.resolve("bf16", cuda) == "bf16"


@pytest.mark.parametrize("bf16", [True, False])
def test_auto_for_replayed_steps_on_cuda_is_bf16_where_the_card_runs_it(monkeypatch, bf16):
    """With ``cuda_graph`` the casts of bf16 autocast cost no host time: ``auto`` trains in bf16 on such a card,
    evaluates in TF32 still, and the trial's record says so; without bf16 units it stays TF32."""
    from trainers.metrics import ReportKey
    from trainers.training.loop import _settings_used

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16)
    cuda, replayed = torch.device("cuda"), "bf16" if bf16 else precision.CUDA_AUTO
    assert precision.resolve("auto", cuda, graphed=True) == replayed
    assert precision.resolve("tf32", cuda, graphed=True) == "tf32"  # only auto follows the step mode
    config = {"eval_precision": "auto", "train_precision": "auto"}
    assert precision.of_training(config, cuda) == precision.CUDA_AUTO
    assert precision.of_training({**config, "cuda_graph": True}, cuda) == replayed
    assert _settings_used({**config, "cuda_graph": True, "eval_batch_size": 0}, cuda) == {
        ReportKey.EVAL_PRECISION: precision.CUDA_AUTO, ReportKey.TRAIN_PRECISION: replayed,
        ReportKey.EVAL_BATCH_SIZE: 512}
    assert precision.of_training({**config, "cuda_graph": True}, CPU) == precision.resolve("auto", CPU)


def test_tf32_allows_tf32_products_inside_its_block_only():
    before = torch.get_float32_matmul_precision()
    with precision.autocast("tf32", torch.device("cuda")):
        assert torch.get_float32_matmul_precision() == "high"
        assert not torch.is_autocast_enabled("cuda")
        with precision.autocast("fp32", torch.device("cuda")):  # an fp32 evaluation inside tf32 training
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


@pytest.mark.parametrize("graph", [{}, {"pad_to_max_length": True, "cuda_graph": True}], ids=["eager", "graphed"])
def test_a_tf32_trial_runs_its_backward_passes_in_tf32_too(tiny_bert, use_tiny_sts, monkeypatch, graph):
    """The products of the gradients are two thirds of a step's: a TF32 trial whose backward pass ran in full
    fp32 was slower than fp32 itself on an H100."""
    from trainers.training import graphs

    monkeypatch.setattr(precision, "has_tf32", lambda device: True)  # this CPU stands in for a TF32 device
    seen = []
    original = graphs.update
    monkeypatch.setattr(graphs, "update",
                        lambda *args: seen.append(torch.get_float32_matmul_precision()) or original(*args))
    final = run_trial({"method": "simcse", "model": tiny_bert, "device": "cpu", "train_precision": "tf32",
                       "batch_size": 8, "train_limit": 40, "max_steps": 5, **graph})
    assert seen == ["high"] * 5 and final["train_precision"] == "tf32"


def test_this_cpu_is_read_from_its_instruction_sets():
    flags = open("/proc/cpuinfo").read().split() if __import__("os").path.exists("/proc/cpuinfo") else None
    if flags is None:
        pytest.skip("no /proc/cpuinfo")
    assert precision.cpu_runs_bf16_fast() == bool({"amx_bf16", "amx_tile", "avx512_bf16"} & set(flags))


def test_precision_knobs_are_validated():
    with pytest.raises(ConfigError, match="eval_precision: expected one of"):
        get_method("none").resolve({"eval_precision": "half"})
    with pytest.raises(ConfigError, match="train_precision: expected one of"):
        get_method("simcse").resolve({"train_precision": "half"})
    assert "train_precision" not in get_method("none").resolve({})  # nothing to train


@pytest.mark.parametrize("setting", ["fp32", "bf16", "fp16"])
def test_evaluation_and_training_run_in_the_precision_asked_and_report_it(tiny_bert, use_tiny_sts, monkeypatch,
                                                                          setting):
    seen = {"eval": set(), "train": set()}
    forward = SentenceEncoder.forward

    def recording(self, features, **kwargs):
        autocast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        seen["eval" if torch.is_inference_mode_enabled() else "train"].add(autocast)
        return forward(self, features, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "forward", recording)
    final = run_trial({"method": "simcse", "model": tiny_bert, "device": "cpu", "eval_precision": setting,
                       "train_precision": setting, "batch_size": 8, "train_limit": 16, "max_steps": 2})
    autocast = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[setting]
    assert seen == {"eval": {autocast}, "train": {autocast}}
    assert final["eval_precision"] == final["train_precision"] == setting


def two_parameter_step(scaler: torch.amp.GradScaler | None, loss_factor: float = 1.0) -> tuple[torch.Tensor, ...]:
    """One step of plain SGD (lr 1) on w = (3, 4) for the loss factor * (w . x) with x = (1, 1), clipped at norm
    1, through ``update``; returns w after it."""
    from trainers.training.optimization import update

    weights = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    optimizer = torch.optim.SGD([weights], lr=1.0)
    loss = loss_factor * (weights * torch.ones(2)).sum()
    update(loss, optimizer, max_grad_norm=1.0, scaler=scaler)
    return weights.detach()


def test_fp16s_loss_scaler_unscales_before_clipping_and_skips_an_overflowed_step():
    """The gradient (1, 1), scaled by 2^16, is unscaled before it is clipped to norm 1: the update is
    -(1, 1) / sqrt(2), as without a scaler (clipping the scaled gradient, then unscaling, would move w by 2^-16 of
    that). A loss whose scaled gradient overflows leaves w as it was and halves the scale, as torch's and
    apex's scalers do."""
    scaler = precision.loss_scaler("fp16", CPU)
    assert scaler.get_scale() == 2.0**16
    assert torch.equal(two_parameter_step(scaler), two_parameter_step(None))
    assert torch.allclose(two_parameter_step(scaler), torch.tensor([3.0, 4.0]) - 1 / 2**0.5)
    assert torch.equal(two_parameter_step(scaler, loss_factor=1e35), torch.tensor([3.0, 4.0]))  # 1e35 x 2^16: inf
    assert scaler.get_scale() == 2.0**15
    assert precision.loss_scaler("bf16", CPU) is None and precision.loss_scaler("fp32", CPU) is None


def test_fp16_steps_are_not_recorded_in_a_cuda_graph():
    with pytest.raises(ConfigError, match="cuda_graph: .*fp16's loss scaler reads whether the gradients overflowed"):
        get_method("simcse").resolve({"train_precision": "fp16", "cuda_graph": True, "pad_to_max_length": True})


def test_auto_never_picks_fp16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for bf16 in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16)
        for graphed in (True, False):
            assert precision.resolve("auto", torch.device("cuda"), graphed) != "fp16"
    assert precision.resolve("fp16", CPU) == precision.resolve("fp16", torch.device("cuda")) == "fp16"



def test_frozen_outputs_computed_with_tf32_products_are_another_table():
    from trainers.models.frozen_outputs import _autocast_state

    plain = _autocast_state("cuda")
    with precision.autocast("tf32", torch.device("cuda")):
        assert _autocast_state("cuda") != plain
    assert _autocast_state("cuda") == plain == "none"


@pytest.mark.parametrize("fp16_schedule, rates", [("hold", [1e-3] * 4), ("advance", [7.5e-4, 5e-4, 2.5e-4, 0.0])])
def test_an_fp16_step_whose_update_overflowed_holds_or_advances_the_schedule(tiny_bert, use_tiny_sts, monkeypatch,
                                                                             fp16_schedule, rates):
    """With a loss scale so large that every step's gradients overflow, no update is made, so every dev evaluation
    scores the untrained model. 'hold', as sentence-transformers' fit(use_amp=True) (the SCT authors'): the
    learning rate stays at its first value (SimCSE: no warm-up, linear decay over 4 steps). 'advance', as Hugging
    Face's Trainer at 4.2.1 and apex (the SimCSE and ConSERT authors'): it decays as if the steps were taken."""
    monkeypatch.setattr(precision, "loss_scaler",
                        lambda used, device: torch.amp.GradScaler(device.type, init_scale=2.0**126, growth_interval=1))
    reports = []
    run_trial({"method": "simcse", "model": tiny_bert, "train_precision": "fp16", "batch_size": 8,
               "train_limit": 16, "epochs": 2, "eval_every": 1, "learning_rate": 1e-3, "fp16_schedule": fp16_schedule},
              reports.append)
    progress = reports[:-1]
    assert [r["lr"] for r in progress] == pytest.approx(rates)
    assert len({r["dev_spearman"] for r in progress}) == 1
