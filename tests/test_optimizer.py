"""The optimiser: which weights decay, and Adam without bias correction (the ConSERT and SCT authors')."""

import math

import pytest
import torch
from transformers import BertConfig, BertModel

from trainers.registry import get_method
from trainers.training.optimization import make_optimizer, parameter_groups
from trainers.training.uncorrected_adam import UncorrectedAdam

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


def gradients(count: int, shapes, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(count)]


@pytest.mark.parametrize("lr_in_tensor", [False, True])
def test_uncorrected_adam_is_transformers_adamw_without_bias_correction(lr_in_tensor):
    start = [torch.randn(5, 3), torch.randn(3)]
    by_step = gradients(12, [(5, 3), (3,)])
    lr, betas, eps = 1e-2, (0.9, 0.999), 1e-6
    weights = [torch.nn.Parameter(w.clone()) for w in start]
    rate = torch.tensor(lr) if lr_in_tensor else lr
    optimizer = UncorrectedAdam([{"params": [weights[0]], "weight_decay": 0.1},
                                 {"params": [weights[1]], "weight_decay": 0.0}], lr=rate, betas=betas, eps=eps,
                                weight_decay=0.1)
    for step_gradients in by_step:
        for weight, gradient in zip(weights, step_gradients):
            weight.grad = gradient.clone()
        optimizer.step()
    expected = written_out_transformers_adamw(start, by_step, lr, betas, eps, [0.1, 0.0], correct_bias=False)
    for weight, reference in zip(weights, expected):
        torch.testing.assert_close(weight.detach().double(), reference, rtol=1e-6, atol=1e-7)
    corrected = written_out_transformers_adamw(start, by_step, lr, betas, eps, [0.1, 0.0], correct_bias=True)
    assert not torch.allclose(weights[0].detach().double(), corrected[0], rtol=1e-3, atol=1e-4)


def test_uncorrected_adam_with_coupled_decay_adds_the_penalty_to_the_gradient():
    """optimizer 'adam': the L2 penalty's gradient weight_decay * w joins g before the moments (torch Adam's)."""
    start = [torch.randn(4, 2)]
    by_step = gradients(6, [(4, 2)])
    weight = torch.nn.Parameter(start[0].clone())
    optimizer = UncorrectedAdam([weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.5, decoupled=False)
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


def test_an_uncorrected_adam_restored_from_its_state_continues_bitwise():
    start = torch.randn(6)
    by_step = gradients(8, [(6,)])

    def run(steps, optimizer_state=None, weight_start=start):
        weight = torch.nn.Parameter(weight_start.clone())
        optimizer = UncorrectedAdam([weight], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
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


@pytest.mark.parametrize("bias_correction", [True, False])
def test_the_loops_optimizer_decays_only_the_weights_fit_decays(bias_correction):
    """With zero gradients Adam's update is zero: what moves is the decay, (1 - lr * decay) for the decayed
    weights, nothing for biases and LayerNorm weights."""
    model = tiny_bert_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = get_method("simcse").resolve({"learning_rate": 0.1, "weight_decay": 0.5,
                                           "adam_bias_correction": bias_correction})
    optimizer = make_optimizer(config, model)
    assert isinstance(optimizer, UncorrectedAdam) is not bias_correction
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, p in model.named_parameters():
        exempt = any(nd in name for nd in SENTENCE_TRANSFORMERS_NO_DECAY)
        expected = before[name] if exempt else before[name] * (1 - 0.1 * 0.5)
        torch.testing.assert_close(p.detach(), expected, rtol=1e-6, atol=1e-7)


def test_the_consert_and_sct_authors_optimizer_is_their_default_and_sg_keeps_the_corrected_one():
    for method, corrected in (("consert", False), ("sct", False), ("flow", False), ("sg", True), ("simcse", True)):
        config = get_method(method).resolve({})
        assert config["adam_bias_correction"] is corrected, method
        assert isinstance(make_optimizer(config, tiny_bert_model()), UncorrectedAdam) is not corrected
