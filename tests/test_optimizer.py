"""The optimiser: which weights decay, and transformers' AdamW (every author's), bias corrected or not."""

import math

import pytest
import torch
from transformers import BertConfig, BertModel

from trainers.data.glue_tasks import parse_glue
from trainers.knobs import ConfigError
from trainers.registry import get_method
from trainers.training.optimization import make_optimizer, parameter_groups
from trainers.training.transformers_adamw import TransformersAdamW, bias_corrections

SENTENCE_TRANSFORMERS_NO_DECAY = ["bias", "LayerNorm.bias", "LayerNorm.weight"]
"""sentence-transformers' fit() (the version every SG-BERT, ConSERT and SCT run used): the names it exempts."""


def tiny_bert_model() -> BertModel:
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=16))


def written_out_transformers_adamw(weights, gradients_by_step, lr, betas, eps, weight_decays, correct_bias):
    """transformers' AdamW (v3/v4, yym6472/ConSERT's copy of transformers/optimization.py), element by element in
    float64 and then rounded: m, v, the bias correction folded into the step size, then the decoupled decay of
    the updated weight."""
    beta1, beta2 = betas
    weights = [w.double().clone() for w in weights]
    moments = [(torch.zeros_like(w), torch.zeros_like(w)) for w in weights]
    for step, gradients in enumerate(gradients_by_step, start=1):
        for weight, gradient, (m, v), decay in zip(weights, gradients, moments, weight_decays):
            gradient = gradient.double()
            m.mul_(beta1).add_(gradient, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
            step_size = lr
            if correct_bias:
                step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
            weight.sub_(step_size * m / (v.sqrt() + eps))
            weight.sub_(lr * decay * weight)
    return weights


def written_out_bert_adam_weight_decay(weights, gradients_by_step, lr, betas, eps, weight_decays):
    """BERT's TensorFlow AdamWeightDecayOptimizer._apply (google-research/bert optimization.py; bohanli/BERT-flow
    optimization_bert_flow.py), element by element in float64: update = m / (sqrt(v) + eps) + weight_decay w, no
    bias correction, then w - lr update."""
    beta1, beta2 = betas
    weights = [w.double().clone() for w in weights]
    moments = [(torch.zeros_like(w), torch.zeros_like(w)) for w in weights]
    for gradients in gradients_by_step:
        for index, (gradient, (m, v), decay) in enumerate(zip(gradients, moments, weight_decays)):
            gradient = gradient.double()
            m.mul_(beta1).add_(gradient, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
            update = m / (v.sqrt() + eps) + decay * weights[index]
            weights[index] = weights[index] - lr * update
    return weights


def gradients(count: int, shapes, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(count)]


@pytest.mark.parametrize("correct_bias", [False, True])
@pytest.mark.parametrize("lr_in_tensor", [False, True])
def test_transformers_adamw_is_the_written_out_update(correct_bias, lr_in_tensor):
    start = [torch.randn(5, 3), torch.randn(3)]
    by_step = gradients(12, [(5, 3), (3,)])
    lr, betas, eps = 1e-2, (0.9, 0.999), 1e-6
    weights = [torch.nn.Parameter(w.clone()) for w in start]
    rate = torch.tensor(lr) if lr_in_tensor else lr
    optimizer = TransformersAdamW([{"params": [weights[0]], "weight_decay": 0.1},
                                   {"params": [weights[1]], "weight_decay": 0.0}], lr=rate, betas=betas, eps=eps,
                                  weight_decay=0.1, correct_bias=correct_bias)
    for step_gradients in by_step:
        for weight, gradient in zip(weights, step_gradients):
            weight.grad = gradient.clone()
        optimizer.step()
    expected = written_out_transformers_adamw(start, by_step, lr, betas, eps, [0.1, 0.0], correct_bias)
    for weight, reference in zip(weights, expected):
        torch.testing.assert_close(weight.detach().double(), reference, rtol=1e-6, atol=1e-7)
    other = written_out_transformers_adamw(start, by_step, lr, betas, eps, [0.1, 0.0], not correct_bias)
    assert not torch.allclose(weights[0].detach().double(), other[0], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("lr_in_tensor", [False, True])
def test_decay_first_is_berts_tensorflow_update(lr_in_tensor):
    """adam_implementation 'bert_tf': the weights decayed as they were before the update; transformers' order is
    lr^2 weight_decay apart, visible at a large rate and decay (float32's rounding over 12 steps at lr 0.1 stays
    under 2e-6 here, and transformers' order lies 0.07 or more away, over 300 draws)."""
    generator = torch.Generator().manual_seed(0)
    start = [torch.randn(5, 3, generator=generator), torch.randn(3, generator=generator)]
    by_step = gradients(12, [(5, 3), (3,)])
    lr, betas, eps = 0.1, (0.9, 0.999), 1e-6
    weights = [torch.nn.Parameter(w.clone()) for w in start]
    optimizer = TransformersAdamW([{"params": [weights[0]], "weight_decay": 0.5},
                                   {"params": [weights[1]], "weight_decay": 0.0}],
                                  lr=torch.tensor(lr) if lr_in_tensor else lr, betas=betas, eps=eps, weight_decay=0.5,
                                  correct_bias=False, decay_first=True)
    for step_gradients in by_step:
        for weight, gradient in zip(weights, step_gradients):
            weight.grad = gradient.clone()
        optimizer.step()
    expected = written_out_bert_adam_weight_decay(start, by_step, lr, betas, eps, [0.5, 0.0])
    for weight, reference in zip(weights, expected):
        torch.testing.assert_close(weight.detach().double(), reference, rtol=1e-5, atol=1e-6)
    after = written_out_transformers_adamw(start, by_step, lr, betas, eps, [0.5, 0.0], correct_bias=False)
    assert not torch.allclose(weights[0].detach().double(), after[0], rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(weights[1].detach().double(), after[1], rtol=1e-5, atol=1e-6)  # no decay: the same


def test_transformers_epsilon_sits_on_the_uncorrected_root_where_torchs_sits_on_the_corrected_one():
    """One step from zero moments: transformers' update lr (1 - beta2)^(1/2) / (1 - beta1) m / (sqrt(v) + eps) is
    torch's lr / (1 - beta1) m / (sqrt(v / (1 - beta2)) + eps') with eps' = eps / (1 - beta2)^(1/2), not eps."""
    start, gradient = torch.zeros(64), torch.logspace(-9, 0, 64)  # gradients around eps and far above it
    betas, eps = (0.9, 0.999), 1e-6

    def one_step(kind, **options):
        weight = torch.nn.Parameter(start.clone())
        optimizer = kind([weight], lr=1e-3, betas=betas, weight_decay=0.0, **options)
        weight.grad = gradient.clone()
        optimizer.step()
        return weight.detach()

    ours = one_step(TransformersAdamW, eps=eps)
    torch.testing.assert_close(ours, one_step(torch.optim.AdamW, eps=eps / math.sqrt(1 - betas[1])))
    torch_at_eps = one_step(torch.optim.AdamW, eps=eps)
    assert not torch.allclose(ours[:16], torch_at_eps[:16], rtol=0.1)  # small gradients: eps weighs 31.6x more
    torch.testing.assert_close(ours[-8:], torch_at_eps[-8:], rtol=1e-3, atol=0)  # large ones: alike


def test_a_weight_without_gradient_keeps_its_own_step_count_as_transformers_counts_it():
    """transformers counts steps per weight: one that gets its first gradient at step 3 is corrected as at step 1."""
    late_start, by_step = torch.randn(4), gradients(5, [(4,)])
    early, late = torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(late_start.clone())
    together = TransformersAdamW([early, late], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0)
    for step, (gradient,) in enumerate(by_step):
        early.grad = gradient.clone()
        late.grad = gradient.clone() if step >= 2 else None
        together.step()
    alone_weight = torch.nn.Parameter(late_start.clone())
    alone = TransformersAdamW([alone_weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0)
    for (gradient,) in by_step[2:]:
        alone_weight.grad = gradient.clone()
        alone.step()
    assert torch.equal(late.detach(), alone_weight.detach())


def test_transformers_adamw_with_coupled_decay_adds_the_penalty_to_the_gradient():
    """optimizer 'adam': the L2 penalty's gradient weight_decay * w joins g before the moments (torch Adam's)."""
    start = [torch.randn(4, 2)]
    by_step = gradients(6, [(4, 2)])
    weight = torch.nn.Parameter(start[0].clone())
    optimizer = TransformersAdamW([weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.5,
                                  decoupled=False, correct_bias=False)
    reference, m, v = start[0].double().clone(), torch.zeros(4, 2, dtype=torch.float64), torch.zeros(4, 2,
                                                                                                  dtype=torch.float64)
    for (gradient,) in by_step:
        weight.grad = gradient.clone()
        optimizer.step()
        g = gradient.double() + 0.5 * reference
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        reference = reference - 1e-2 * m / (v.sqrt() + 1e-6)
    torch.testing.assert_close(weight.detach().double(), reference, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("correct_bias", [False, True])
def test_a_transformers_adamw_restored_from_its_state_continues_bitwise(correct_bias):
    start = torch.randn(6)
    by_step = gradients(8, [(6,)])

    def run(steps, optimizer_state=None, weight_start=start):
        weight = torch.nn.Parameter(weight_start.clone())
        optimizer = TransformersAdamW([weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                      correct_bias=correct_bias)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        for (gradient,) in steps:
            weight.grad = gradient.clone()
            optimizer.step()
        return weight.detach(), optimizer.state_dict()

    straight, _ = run(by_step)
    half, state = run(by_step[:4])
    resumed, _ = run(by_step[4:], state, half)
    assert torch.equal(resumed, straight)


def test_biases_and_layernorm_weights_are_not_decayed_as_sentence_transformers_fit_leaves_them():
    model = tiny_bert_model()
    model.embeddings.word_embeddings.weight.requires_grad_(False)
    decayed, exempt = parameter_groups(model, 0.01)
    names = {id(p): name for name, p in model.named_parameters()}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    fit_exempt = {name for name in trainable if any(nd in name for nd in SENTENCE_TRANSFORMERS_NO_DECAY)}
    assert {names[id(p)] for p in exempt["params"]} == fit_exempt
    assert {names[id(p)] for p in decayed["params"]} == trainable - fit_exempt
    assert (decayed["weight_decay"], exempt["weight_decay"]) == (0.01, 0.0)
    assert any("LayerNorm.weight" in name for name in fit_exempt) and any("bias" in name for name in fit_exempt)


@pytest.mark.parametrize("implementation, bias_correction", [("torch", True), ("transformers", True),
                                                              ("transformers", False)])
def test_the_loops_optimizer_decays_only_the_weights_fit_decays(implementation, bias_correction):
    """With zero gradients Adam's update is zero: what moves is the decay, (1 - lr * decay) for the decayed
    weights, nothing for biases and LayerNorm weights."""
    model = tiny_bert_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = get_method("simcse").resolve({"learning_rate": 0.1, "weight_decay": 0.5,
                                           "adam_implementation": implementation,
                                           "adam_bias_correction": bias_correction})
    optimizer = make_optimizer(config, model)
    assert isinstance(optimizer, TransformersAdamW) is (implementation == "transformers")
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, p in model.named_parameters():
        exempt = any(nd in name for nd in SENTENCE_TRANSFORMERS_NO_DECAY)
        expected = before[name] if exempt else before[name] * (1 - 0.1 * 0.5)
        torch.testing.assert_close(p.detach(), expected, rtol=1e-6, atol=1e-7)


def test_every_authors_optimizer_is_their_default():
    """Every author's code here trained with transformers.AdamW, ConSERT's and SCT's uncorrected, but BERT-flow's,
    which trained with BERT's TensorFlow optimiser (uncorrected, the decay first)."""
    for method, implementation, corrected in (
            ("consert", "transformers", False), ("sct", "transformers", False), ("flow", "bert_tf", False),
            ("sg", "transformers", True), ("simcse", "transformers", True), ("dclr", "transformers", True),
            ("diffcse", "transformers", True)):
        config = get_method(method).resolve({})
        assert (config["adam_implementation"], config["adam_bias_correction"]) == (implementation, corrected), method
        optimizer = make_optimizer(config, tiny_bert_model())
        assert isinstance(optimizer, TransformersAdamW), method
        assert all(group["correct_bias"] is corrected for group in optimizer.param_groups), method
        assert all(group["decay_first"] is (method == "flow") for group in optimizer.param_groups), method


def test_torchs_adam_without_bias_correction_is_refused_in_the_loop_and_in_glue():
    with pytest.raises(ConfigError) as refused:
        get_method("simcse").resolve({"adam_implementation": "torch", "adam_bias_correction": False})
    assert [problem.key for problem in refused.value.problems] == ["adam_bias_correction"]
    assert get_method("simcse").resolve({"adam_implementation": "transformers", "adam_bias_correction": False})
    refused = parse_glue({"adam_bias_correction": False, "adam_implementation": "torch"})[1]
    assert [key for key, _ in refused] == [".adam_bias_correction"]
    assert parse_glue({"adam_bias_correction": False})[1] == []  # GLUE's default: transformers' (run_glue's then)


def test_berts_tensorflow_update_with_bias_correction_is_refused():
    with pytest.raises(ConfigError) as refused:
        get_method("flow").resolve({"adam_bias_correction": True})
    assert [problem.key for problem in refused.value.problems] == ["adam_bias_correction"]
    assert "never makes" in refused.value.problems[0].message
    assert get_method("flow").resolve({"adam_bias_correction": True, "adam_implementation": "transformers"})


@pytest.mark.parametrize("beta1, beta2", [(0.9, 0.999), (0.0, 0.98)])
def test_the_bias_corrections_on_the_device_are_pythons_float64_ones(beta1, beta2):
    """transformers computes the step size in Python floats; ours in float32 tensors keeps it to 1e-6."""
    counts = [1, 2, 10, 100, 1_000, 100_000]
    ours = bias_corrections([torch.tensor(float(t)) for t in counts], beta1, beta2)
    for t, correction in zip(counts, ours):
        assert correction.item() == pytest.approx(math.sqrt(1 - beta2**t) / (1 - beta1**t), rel=1e-6), t
