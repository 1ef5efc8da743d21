"""``cuda_graph``: the step recorded once and replayed on every batch's inputs, checked on a CPU.

A CPU records no CUDA graph; there the graphed step runs what the graph replays, on the recorded batch's tensors
with each batch copied into them, with its learning rate in a tensor and its gradients zeroed in place after the
recording. These tests hold that path to the eager loop's numbers: everything but the capture itself, which only
a GPU can check (``python -m benchmarks.gpu``, docs/gpu.md).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_structure

from tests.conftest import build_objective
from trainers.knobs import ConfigError
from trainers.metrics import Metric
from trainers.registry import get_method
from trainers.training import graphs
from trainers.training.loop import run_trial
from trainers.training.optimization import make_optimizer, make_schedule

FIXED = {"method": "simcse", "batch_size": 8, "train_limit": 44, "epochs": 2, "eval_every": 1,
         "max_seq_length": 16, "pad_to_max_length": True, "learning_rate": 3e-4, "warmup_ratio": 0.2,
         "max_grad_norm": 1.0}
"""44 examples in batches of 8: five full batches and a short one per epoch, so that eager steps of another
shape come between the replays, before and after the recording (the warm-up and the record fall in epoch one)."""


def sentences(count: int) -> list[str]:
    words = "a dog cat runs sleeps on the mat in rain two men play music".split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 9)) for i in range(count)]


GRAPHED_METHODS = {
    "simcse": {},
    "sg-opt": {"method": "sg", "loss": "opt3", "reg_lambda": 0.1, "projection_hidden": 16},
    "sg-opt2": {"method": "sg", "loss": "opt2", "projection_hidden": 16},  # a layer drawn per sentence
    "consert": {"method": "consert"},  # shuffle + feature cutoff, drawn on the host
    "consert-cutoffs": {"method": "consert", "aug1": "token_cutoff", "aug2": "dropout"},
    "consert-span": {"method": "consert", "aug1": "none", "aug2": "span_cutoff", "remove_bert_dropout": False},
    "dclr": {"method": "dclr", "complementary_model": "tiny_bert", "noise_steps": 2, "phi": 1.0},  # noise on the device
    # Queues of 16 that 8 vectors a step fill and wrap, in the step (after_update); views drawn on the host.
    "sct": {"method": "sct", "queue_size": 16, "projector_expansion": 2},
    "sct-momentum": {"method": "sct", "queue_size": 16, "projector_expansion": 2, "reference": "momentum",
                     "momentum": 0.9, "view1": "span_cutoff", "view2": "dropout_mask"},
    "sct-distilled": {"method": "sct", "queue_size": 16, "projector_expansion": 2, "queues": "one",
                      "distillation": "cd", "teacher": "tiny_bert", "view1": "token_cutoff", "view2": "dropout"},
}
"""The methods whose step a CUDA graph records (STEP_GRAPH_KNOBS), with the settings each test trains ("tiny_bert":
the test's tiny BERT)."""


def graphed_settings(method: str, tiny_bert: str) -> dict:
    """:data:`GRAPHED_METHODS`' settings of ``method``, the tiny BERT's folder in place of "tiny_bert"."""
    return {knob: tiny_bert if value == "tiny_bert" else value for knob, value in GRAPHED_METHODS[method].items()}


def steps_and_weights(step_kind, tiny_bert: str, **knobs) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Two epochs of 44 sentences in batches of 8 through ``step_kind``, with the loop's optimiser (its rate in a
    tensor) and its linear schedule: each step's loss, and the objective's state after the last (its weights, and
    what its steps update besides: SCT's queues and momentum encoder)."""
    settings = {**FIXED, **knobs}
    method = settings.pop("method")
    config = get_method(method).resolve({**settings, "model": tiny_bert})
    objective = build_objective(method, tiny_bert, 0, **settings)
    corpus = sentences(44)
    objective.prepare(corpus)  # SG's table of BERT_F's views
    optimizer = make_optimizer(config, objective, rate_tensor=True)
    schedule = make_schedule(config, optimizer, 12)
    step = step_kind(objective, optimizer, config["max_grad_norm"], "fp32", torch.device("cpu"))
    torch.manual_seed(0)
    losses = []
    for _ in range(2):
        for start in range(0, 44, 8):
            losses.append(step(corpus[start : start + 8]).item())
            schedule.step()
    return losses, objective.trained_state()


@pytest.mark.parametrize("method", list(GRAPHED_METHODS))
def test_the_graphed_step_computes_the_eager_steps_bits(method, tiny_bert, tmp_path, monkeypatch):
    """Warm-up, recording, replays on copied inputs and eager steps of another shape between them: the same
    losses, weights and updated buffers, bit for bit, as the eager step with the same optimiser."""
    monkeypatch.setenv("SWEEP_FROZEN_OUTPUTS_DIR", str(tmp_path))
    settings = graphed_settings(method, tiny_bert)
    eager_losses, eager_state = steps_and_weights(graphs.eager_step, tiny_bert, **settings)
    graphed_losses, graphed_state = steps_and_weights(graphs.GraphedStep, tiny_bert, **settings)
    assert len(set(eager_losses)) >= 10  # steps of their own batches and weights (two may round alike)
    assert graphed_losses == eager_losses
    assert tree_structure(graphed_state) == tree_structure(eager_state)
    assert all(torch.equal(a, b) for a, b in zip(tree_leaves(graphed_state), tree_leaves(eager_state)))


@pytest.mark.parametrize("used, autocast", [("bf16", True), ("fp32", False)])
def test_the_host_work_runs_in_the_steps_precision(used, autocast, tiny_bert, tiny_masked_lm):
    """SCT's host work runs models (the masked LM that rewrites a view in every step, the teacher on a rewrite):
    inside the step's autocast, as in the eager step, where ``inputs`` runs inside ``loss``."""
    objective = build_objective("sct", tiny_bert, 0, queue_size=16, projector_expansion=2, view1="mlm",
                                mlm_model=tiny_masked_lm, max_seq_length=16, pad_to_max_length=True,
                                rewrite_views="per_step")
    inputs, seen = objective.inputs, []

    def noting_autocast(batch):
        seen.append(torch.is_autocast_enabled("cpu"))
        return inputs(batch)

    objective.inputs = noting_autocast
    optimizer = torch.optim.AdamW([p for p in objective.parameters() if p.requires_grad])
    for step_kind in (graphs.eager_step, graphs.GraphedStep):
        step_kind(objective, optimizer, 1.0, used, torch.device("cpu"))(sentences(8))
    assert seen == [autocast, autocast]


def test_scts_queues_are_updated_inside_the_step(tiny_bert):
    """SCT's queues and momentum encoder move in the step (``after_update``), which a CUDA graph replays, not in
    the loop's ``after_step`` around it, which a replay leaves out: two epochs of 44 sentences through the graphed
    step alone wrap each queue of 16 five times and a half, and the reference follows the encoder."""
    settings = graphed_settings("sct-momentum", tiny_bert)
    initial = build_objective("sct", tiny_bert, 0, **{k: v for k, v in settings.items() if k != "method"})
    _, state = steps_and_weights(graphs.GraphedStep, tiny_bert, **settings)
    assert int(state["queue_list.0.pointer"]) == (2 * (5 * 8 + 4)) % 16 == 8
    assert not torch.equal(state["queue_list.0.vectors"], initial.queue_list[0].vectors)
    reference, start = state["reference.model.embeddings.word_embeddings.weight"], initial.encoder.model.embeddings
    assert not torch.equal(reference, start.word_embeddings.weight)


def trial(tiny_bert: str, **knobs) -> tuple[list[dict], dict]:
    reports: list[dict] = []
    final = run_trial({**FIXED, "model": tiny_bert, "device": "cpu", **knobs}, reports.append)
    return reports[:-1], final


@pytest.mark.parametrize("method", ["simcse", "consert", "dclr", "sct"])
def test_a_graphed_trial_follows_the_eager_trial(method, tiny_bert, use_tiny_sts):
    """The loop with ``cuda_graph``: its rate, in a float32 tensor, is the schedule's float rounded to float32
    at every step, and its update with that rate moves the losses and scores by float rounding only."""
    # Every evaluation reported (ConSERT's default stops early); STS-B dev alone selects (DCLR's default adds SICK-R
    # dev, whose 40 pairs here swap ranks on a float rounding), in the evaluation's pooling (DCLR's default pooler
    # output gives the tiny BERT's sentences cosines so close that a float rounding swaps their ranks too), scored
    # in fp32 (bf16's rounding of the activations turns the updates' float rounding into rank swaps).
    knobs = {**graphed_settings(method, tiny_bert), "method": method, "patience": 0, "selection_metric": "stsb",
             "selection_pooling": "same", "eval_precision": "fp32"}
    eager_reports, eager = trial(tiny_bert, **knobs)
    graphed_reports, graphed = trial(tiny_bert, **knobs, cuda_graph=True)
    assert len(eager_reports) == 12 and graphed[Metric.GRAPHED_STEPS] == 0  # no CUDA here: nothing replayed
    rates = [r[Metric.LR] for r in eager_reports]
    assert len(set(rates)) > 5
    assert [r[Metric.LR] for r in graphed_reports] == [float(torch.tensor(rate)) for rate in rates]
    for name in (Metric.LOSS, Metric.DEV):
        assert [r[name] for r in graphed_reports] == pytest.approx([r[name] for r in eager_reports], rel=1e-4)
    assert graphed[Metric.TEST_AVG] == pytest.approx(eager[Metric.TEST_AVG], abs=1e-3)


def test_a_fixed_shape_batch_always_gives_the_transformer_its_mask(tiny_bert):
    """Every batch a graph replays runs through the same operations: a batch whose rows all reach the limit keeps
    its mask too."""
    objective = build_objective("simcse", tiny_bert, 0, max_seq_length=4, pad_to_max_length=True)
    batch = objective.inputs(["a long sentence of many words", "another long sentence of words"])
    assert batch["input_ids"].shape == (4, 4) and batch.fixed_shape and batch.masked
    assert not build_objective("simcse", tiny_bert, 0, max_seq_length=4).inputs(["a long sentence of words"]).masked


def test_sg_pads_its_tokens_to_the_limit_where_asked(tiny_bert, tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_FROZEN_OUTPUTS_DIR", str(tmp_path))
    batch = ["a dog runs", "two cats sleep"]
    for to_max_length, width in ((False, 5), (True, 32)):  # [CLS] two cats sleep [SEP]
        objective = build_objective("sg", tiny_bert, 0, max_seq_length=32, pad_to_max_length=to_max_length)
        objective.prepare(batch)
        features, views = objective.inputs(batch)
        assert features["input_ids"].shape == (2, width) and features.fixed_shape == to_max_length
        assert views.shape[0] == 2  # BERT_F's views, whatever BERT_T's padding


def test_dclr_pads_both_its_batches_to_the_limit_where_asked(tiny_bert):
    """The views' tokens and the complementary model's (both views' texts, for its two dropout views): one shape
    each, that of the limit."""
    batch = ["a dog runs", "two cats sleep on a mat", "it rains", "men play music in the rain"]
    for to_max_length, width in ((False, 8), (True, 32)):
        objective = build_objective("dclr", tiny_bert, 0, complementary_model=tiny_bert, max_seq_length=32,
                                    pad_to_max_length=to_max_length)
        views, sentences = objective.inputs(batch)
        assert views["input_ids"].shape == sentences["input_ids"].shape == (8, width)
        assert views.fixed_shape == sentences.fixed_shape == to_max_length


@pytest.mark.parametrize("method, knobs", [
    ("simcse", {}),
    ("consert", {"aug1": "shuffle", "aug2": "dropout"}),  # each row's draws depend on its length, not the padding's
    ("consert", {"aug1": "token_cutoff", "aug2": "span_cutoff"}),
    ("consert", {"aug1": "none", "aug2": "feature_cutoff"}),
    ("sct", {"queue_size": 16, "projector_expansion": 2}),  # shuffle and feature cutoff, each view its own tokens
])
def test_padding_to_the_limit_moves_the_loss_by_float_rounding_only(method, knobs, tiny_bert):
    batch = ["a dog runs", "two cats sleep on a mat", "it rains", "men play music in the rain"]
    losses = []
    for to_max_length in (False, True):
        objective = build_objective(method, tiny_bert, 0, max_seq_length=32, pad_to_max_length=to_max_length,
                                    **knobs)
        objective.eval()  # no dropout: the same vectors both ways, but for the padding
        torch.manual_seed(0)  # ConSERT's draws
        losses.append(objective.loss(batch).item())
        inputs = objective.inputs(batch)
        views = ([inputs] if method == "simcse" else [inputs[0]] if method == "consert"
                 else [view.tokens for view in inputs[:2]])
        assert all(view["input_ids"].shape[1] == (32 if to_max_length else 8) for view in views)
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)


def test_the_loss_is_its_device_part_on_its_inputs(tiny_bert):
    objective = build_objective("simcse", tiny_bert, 0, max_seq_length=16)
    objective.eval()
    batch = ["a dog runs", "two cats sleep on a mat", "it rains"]
    assert torch.equal(objective.loss(batch), objective.device_loss(objective.inputs(batch)))


class HostTensors(TorchDispatchMode):
    """Fails every operation that leaves a tensor off the meta device, or reads a host tensor of more than one
    value: a tensor made on the host (an index built with ``torch.arange(n)``, a batch tokenised inside the
    step), then copied over, is a host-to-device copy, which a CUDA capture refuses. (A one-value host tensor is
    a number the kernel takes as its argument.)"""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for leaf in tree_leaves((args, kwargs)):
            if isinstance(leaf, torch.Tensor) and leaf.device.type != "meta" and leaf.dim() > 0:
                raise AssertionError(f"{func} read a tensor on {leaf.device} inside the recorded step")
        result = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(result):
            if isinstance(leaf, torch.Tensor) and leaf.device.type != "meta":
                raise AssertionError(f"{func} left a tensor on {leaf.device} inside the recorded step")
        return result


@pytest.mark.parametrize("method", list(GRAPHED_METHODS))
def test_the_recorded_step_runs_on_a_device_with_no_values_to_read(method, tiny_bert, tmp_path, monkeypatch):
    """What the graph records after the inputs are sent (loss, gradients, clipping, what follows the update) reads
    nothing back on the meta device, where any read raises (a read inside a capture fails it), and makes no tensor
    on the host."""
    monkeypatch.setenv("SWEEP_FROZEN_OUTPUTS_DIR", str(tmp_path))
    settings = {**graphed_settings(method, tiny_bert), "max_seq_length": 16, "pad_to_max_length": True}
    objective = build_objective(settings.pop("method", "simcse"), tiny_bert, 0, **settings)
    batch = ["a dog runs", "two cats sleep on a mat"]
    objective.prepare(batch)
    objective.to("meta")
    inputs = objective.inputs(batch)
    with HostTensors():
        objective.device_loss(inputs).backward()
        torch.nn.utils.clip_grad_norm_([p for p in objective.parameters() if p.grad is not None], 1.0)
        objective.after_update()


def test_the_rate_stays_a_tensor_where_the_optimizer_keeps_it_in_one(tiny_bert):
    from trainers.training.loop import restore_learning_rate

    config = get_method("simcse").resolve({"model": tiny_bert, "learning_rate": 1e-3, "warmup_ratio": 0.5})
    parameter = torch.nn.Parameter(torch.zeros(3))
    optimizer = make_optimizer(config, torch.nn.ParameterList([parameter]), rate_tensor=True)
    schedule = make_schedule(config, optimizer, 10)
    rate = optimizer.param_groups[0]["lr"]
    parameter.grad = torch.zeros(3)
    optimizer.step()
    schedule.step()
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(2e-4)  # filled in place
    restore_learning_rate({**config, "learning_rate": 2e-3}, optimizer, schedule)  # a PBT exploit's new rate
    assert isinstance(optimizer.param_groups[0]["lr"], torch.Tensor)
    assert optimizer.param_groups[0]["lr"].item() == pytest.approx(4e-4)


def test_cuda_graph_is_validated():
    simcse = get_method("simcse")
    with pytest.raises(ConfigError, match="cuda_graph: replays one batch shape, so it needs pad_to_max_length"):
        simcse.resolve({"cuda_graph": True})
    with pytest.raises(ConfigError, match="cuda_graph: captures the whole step itself"):
        simcse.resolve({"cuda_graph": True, "pad_to_max_length": True, "torch_compile": True})
    with pytest.raises(ConfigError, match="cuda_graph: unknown knob"):  # its loss picks a count of tokens that varies
        get_method("diffcse").resolve({"cuda_graph": True})
    assert not get_method("sct").check(get_method("sct").resolve({"cuda_graph": True, "pad_to_max_length": True}))
    consert = get_method("consert")
    config = consert.resolve({"cuda_graph": True, "pad_to_max_length": True, "supervision": "sup-unsup"})
    assert any(problem.key == "cuda_graph" and "NLI stage" in problem.message for problem in consert.check(config))
    config = consert.resolve({"pad_to_max_length": True, "supervision": "sup"})
    assert any(problem.key == "pad_to_max_length" for problem in consert.check(config))
    config = consert.resolve({"cuda_graph": True, "pad_to_max_length": True})
    assert not consert.check(config)
    sg = get_method("sg")
    config = sg.resolve({"cuda_graph": True, "pad_to_max_length": True, "loss": "opt3", "bt_view": "bt1"})
    assert any(problem.key == "cuda_graph" and "bt_view" in problem.message for problem in sg.check(config))
