"""DCLR (Zhou et al. 2022) on the tiny BERT: its losses against slow versions written from the paper, the
objective against a reference assembled by hand, each knob's effect, resume and export."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AutoModel, AutoTokenizer

from tests.conftest import bert_initialised_head, build_objective
from tests.knob_checks import assert_knob_changes_the_loss
from tests.test_checkpoint import BASE, assert_resumes_exactly
from tests.trial_export import assert_export_scores_as_logged
from trainers.losses.dclr import dclr_loss, false_negative_weights, refine_noise
from trainers.registry import get_method

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]
PHI = 0.95
"""With the tiny BERT's mean-pooled vectors as the complementary model's, the cosines of BATCH's pairs lie
between 0.916 and 0.961: phi 0.95 weighs out two pairs and keeps the others."""


def cos(u: Tensor, v: Tensor) -> float:
    u, v = u.double(), v.double()
    return float(torch.dot(u, v) / (u.norm() * v.norm()))


def slow_weights(vectors: Tensor, phi: float) -> list[list[float]]:
    return [[1.0 if i == j or cos(u, v) <= phi else 0.0 for j, v in enumerate(vectors)] for i, u in enumerate(vectors)]


def slow_dclr_loss(anchors: Tensor, positives: Tensor, noise: Tensor, weights, tau: float) -> float:
    """-log e^{s_ii} / (sum_j alpha_ij e^{s_ij} + sum_k e^{s(h_i, n_k)}), averaged, in plain floats."""
    total = 0.0
    for i, h in enumerate(anchors):
        denominator = sum(weights[i][j] * math.exp(cos(h, p) / tau) for j, p in enumerate(positives))
        denominator += sum(math.exp(cos(h, n) / tau) for n in noise)
        total -= math.log(math.exp(cos(h, positives[i]) / tau) / denominator)
    return total / len(anchors)


def slow_refine_noise(anchors: Tensor, positives: Tensor, noise: Tensor, tau: float, steps: int, size: float):
    """Each step: the gradient of the unweighted loss over (positives, noise) by autograd of the loop-written
    loss in float64, normalised per noise vector, added times the step size."""
    noise = noise.double()
    for _ in range(steps):
        noise = noise.clone().requires_grad_(True)
        loss = 0
        for i, h in enumerate(anchors.double()):
            terms = [torch.exp(F.cosine_similarity(h, p, dim=0) / tau) for p in positives.double()]
            terms += [torch.exp(F.cosine_similarity(h, n, dim=0) / tau) for n in noise]
            loss = loss - torch.log(terms[i] / sum(terms))
        (gradient,) = torch.autograd.grad(loss / len(anchors), noise)
        noise = (noise + size * torch.stack([g / g.norm() for g in gradient])).detach()
    return noise


def test_weights_drop_the_negatives_the_complementary_model_finds_too_similar():
    torch.manual_seed(0)
    vectors = torch.randn(6, 5)
    vectors[3] = vectors[1] + 0.01  # a near-duplicate: a false negative of sentence 1 and 3
    for phi in (-0.2, 0.3, 0.99):
        assert false_negative_weights(vectors, phi).tolist() == slow_weights(vectors, phi)
    weights = false_negative_weights(vectors, 0.99)
    assert weights[1, 3] == weights[3, 1] == 0 and weights.diagonal().tolist() == [1.0] * 6


def test_dclr_loss_matches_the_slow_version():
    torch.manual_seed(1)
    anchors, positives, noise = torch.randn(5, 8), torch.randn(5, 8), torch.randn(7, 8)
    weights = torch.ones(5, 5)
    weights[0, 2] = weights[4, 1] = weights[3, 0] = 0
    for tau, kept_noise in ((0.05, 7), (0.5, 0), (1.0, 3)):
        expected = slow_dclr_loss(anchors, positives, noise[:kept_noise], weights.tolist(), tau)
        got = dclr_loss(anchors.double(), positives.double(), noise[:kept_noise].double(), weights, tau)
        assert got.item() == pytest.approx(expected, rel=1e-9)
    # All weights 1 and no noise: SimCSE's InfoNCE.
    from trainers.losses.contrastive import info_nce

    assert dclr_loss(anchors, positives, noise[:0], torch.ones(5, 5), 0.05).item() == pytest.approx(
        info_nce(anchors, positives, 0.05).item(), rel=1e-6)


def test_noise_refinement_matches_the_slow_version_and_raises_the_loss():
    torch.manual_seed(2)
    anchors, positives, noise = torch.randn(4, 6), torch.randn(4, 6), torch.randn(5, 6)
    refined = refine_noise(anchors.double(), positives.double(), noise.double(), 0.5, 3, 0.1)
    torch.testing.assert_close(refined, slow_refine_noise(anchors, positives, noise, 0.5, 3, 0.1))
    assert refined.requires_grad is False
    ones = torch.ones(4, 4)
    assert dclr_loss(anchors, positives, refined.float(), ones, 0.5) > dclr_loss(anchors, positives, noise, ones, 0.5)
    torch.testing.assert_close(refine_noise(anchors, positives, noise, 0.5, 0, 0.1), noise)


SETTING = {"complementary_pooling": "mean", "phi": PHI}
KNOB_SETTING = {**SETTING, "temperature": 1.0}
"""The knob tests' setting: at tau 0.05 the tiny BERT's views (cosines near 1) outweigh noise vectors
(cosines near 0) by e^20, and no noise knob could show."""


def build(tiny_bert: str, **overrides: Any):
    return build_objective("dclr", tiny_bert, 0, **{"complementary_model": tiny_bert, **SETTING, **overrides})


def objective_loss(tiny_bert: str, **overrides: Any) -> float:
    objective = build(tiny_bert, **overrides)
    objective.train()
    torch.manual_seed(0)  # the dropout masks and the noise
    return objective.loss(BATCH).item()


def test_the_objective_is_the_paper_assembled_by_hand(tiny_bert):
    """Dropout off: both views are the [CLS] vector through SimCSE's head (drawn after seed 0); the weights come
    from the complementary model's mean-pooled cosines; the noise is drawn after seed 0, refined, and joins."""
    objective = build(tiny_bert, noise_step_size=0.05)
    objective.eval()
    torch.manual_seed(0)
    loss = objective.loss(BATCH).item()

    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)
    features = tokenizer(BATCH, padding=True, truncation=True, max_length=32, return_tensors="pt")
    torch.manual_seed(0)
    head = bert_initialised_head(32, model.config.initializer_range)
    with torch.no_grad():
        states = model(**features).last_hidden_state
        views = head(states[:, 0])
        mask = features["attention_mask"].unsqueeze(-1)
        complementary = (states * mask).sum(1) / mask.sum(1)
    torch.manual_seed(0)
    noise = torch.randn(len(BATCH), 32)
    noise = slow_refine_noise(views, views, noise, 0.05, 4, 0.05)
    expected = slow_dclr_loss(views.double(), views.double(), noise, slow_weights(complementary, PHI), 0.05)
    assert loss == pytest.approx(expected, rel=1e-4)


def test_gradients_reach_the_encoder_and_head_but_not_the_complementary_model(tiny_bert):
    objective = build(tiny_bert)
    objective.train()
    objective.loss(BATCH).backward()
    assert any(p.grad is not None for p in objective.encoder.parameters())
    assert all(p.grad is not None for p in objective.head.parameters())
    assert all(p.grad is None and not p.requires_grad for p in objective.complementary.parameters())
    assert not objective.complementary.training  # no dropout in its cosines
    assert not any(k.startswith("complementary.") for k in objective.trained_state())


@pytest.mark.parametrize("knob, value", [
    ("phi", PHI),  # control: the test's setting on both sides
    ("phi", 0.9), ("complementary_pooling", "cls"), ("noise_times", 0.0), ("noise_times", 2.0),
    ("noise_std", 0.1), ("noise_steps", 0), ("noise_step_size", 0.5), ("temperature", 0.05),
    ("mlp_during_training", False),
])
def test_each_knob_changes_the_loss(tiny_bert, knob, value):
    default = KNOB_SETTING.get(knob, get_method("dclr").all_knobs[knob].default)
    assert_knob_changes_the_loss(lambda **knobs: objective_loss(tiny_bert, **{**KNOB_SETTING, **knobs}), knob,
                                 value, default)


def test_the_complementary_model_is_any_encoder_folder(tiny_bert, tiny_teacher):
    assert objective_loss(tiny_bert, complementary_model=tiny_teacher, **KNOB_SETTING) != pytest.approx(
        objective_loss(tiny_bert, **KNOB_SETTING), rel=1e-6)


def test_defaults_are_the_authors_bert_base_script_and_offline_hub_ids_are_refused(monkeypatch):
    import trainers.data.sources

    method = get_method("dclr")
    config = method.resolve({})
    assert (config["batch_size"], config["learning_rate"], config["max_seq_length"], config["epochs"],
            config["temperature"], config["phi"], config["noise_times"], config["noise_steps"],
            config["noise_step_size"], config["noise_std"], config["pooling"]) == (
        128, 3e-5, 32, 3, 0.05, 0.9, 1.0, 4, 1e-3, 1.0, "cls")
    monkeypatch.setattr(trainers.data.sources, "hub_reachable", lambda: False)
    problems = [str(p) for p in method.check(method.resolve({"complementary_model": "someone/not-cached"}))]
    assert any(p.startswith("complementary_model: 'someone/not-cached' is not a local folder") for p in problems)


@pytest.mark.slow
def test_a_dclr_trial_resumes_exactly(tiny_bert, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "dclr", "complementary_model": tiny_bert,
              "complementary_pooling": "mean", "phi": PHI}
    assert_resumes_exactly(config, tmp_path / "checkpoints")


@pytest.mark.slow
def test_a_dclr_export_loads_in_sentence_transformers_at_the_logged_score(tiny_bert, use_tiny_sts, tmp_path):
    assert_export_scores_as_logged({**BASE, "model": tiny_bert, "method": "dclr", "complementary_model": tiny_bert,
                                    "max_steps": 4, "eval_every": 2}, tmp_path)
