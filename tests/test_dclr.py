"""DCLR (Zhou et al. 2022) on the tiny BERT: its losses against slow versions written from the paper, the
objective against a reference assembled by hand, each knob's effect, resume and export."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
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


def slow_weights(anchors: Tensor, positives: Tensor, phi: float) -> list[list[float]]:
    return [[1.0 if i == j or cos(u, v) <= phi else 0.0 for j, v in enumerate(positives)]
            for i, u in enumerate(anchors)]


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
    views = vectors + 0.3 * torch.randn(6, 5)  # another view of each: anchor i against positive j
    for phi in (-0.2, 0.3, 0.99):
        assert false_negative_weights(vectors, vectors, phi).tolist() == slow_weights(vectors, vectors, phi)
        assert false_negative_weights(vectors, views, phi).tolist() == slow_weights(vectors, views, phi)
    weights = false_negative_weights(vectors, vectors, 0.99)
    assert weights[1, 3] == weights[3, 1] == 0 and weights.diagonal().tolist() == [1.0] * 6
    assert not torch.equal(false_negative_weights(vectors, views, 0.3), false_negative_weights(vectors, vectors, 0.3))


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


@pytest.mark.parametrize("attend_to_padding", [True, False])
@pytest.mark.parametrize("train_pooling", ["pooler", "same"])
def test_the_objective_is_the_paper_assembled_by_hand(tiny_bert, attend_to_padding, train_pooling):
    """Dropout off: both views are the [CLS] vector (train_pooling 'same') or BERT's pooler over it (the
    authors': tanh of its dense layer) through SimCSE's head (drawn after seed 0); the weights come from the
    complementary model's mean-pooled cosines; the noise is drawn after seed 0, refined, and joins. With
    attend_to_padding (the authors' call) both models are called without an attention mask."""
    objective = build(tiny_bert, noise_step_size=0.05, attend_to_padding=attend_to_padding,
                      train_pooling=train_pooling)
    objective.eval()
    seen = {}  # the loss is near log 3 at any of these settings: the vectors themselves tell them apart
    objective.head.register_forward_hook(lambda module, args, output: seen.setdefault("pooled", args[0]))
    objective.complementary.register_forward_hook(lambda module, args, output: seen.setdefault("weighing", output))
    torch.manual_seed(0)
    loss = objective.loss(BATCH).item()

    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)
    features = tokenizer(BATCH, padding=True, truncation=True, max_length=32, return_tensors="pt")
    given = {k: v for k, v in features.items() if k != "attention_mask" or not attend_to_padding}
    torch.manual_seed(0)
    head = bert_initialised_head(32, model.config.initializer_range)
    with torch.no_grad():
        states = model(**given).last_hidden_state
        pooled = torch.tanh(model.pooler.dense(states[:, 0])) if train_pooling == "pooler" else states[:, 0]
        views = head(pooled)
        mask = features["attention_mask"].unsqueeze(-1)
        complementary = (states * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(seen["pooled"], torch.cat([pooled, pooled]))
    torch.testing.assert_close(seen["weighing"], torch.cat([complementary, complementary]))  # no dropout in eval
    torch.manual_seed(0)
    noise = torch.randn(len(BATCH), 32)
    noise = slow_refine_noise(views, views, noise, 0.05, 4, 0.05)
    weights = slow_weights(complementary, complementary, PHI)
    expected = slow_dclr_loss(views.double(), views.double(), noise, weights, 0.05)
    assert loss == pytest.approx(expected, rel=1e-4)


def test_the_complementary_model_weighs_anchor_i_against_positive_j_in_its_dropout_views(tiny_bert, monkeypatch):
    """complementary_dropout (the authors' cos_sim_fix of z1_fix and z2_fix): in training the complementary model
    reads both views' texts with dropout, and alpha_ij compares anchor i's vector with positive j's. phi is put
    between the two readings' cosines of one pair, so that a weight from anchor against anchor would differ."""
    import trainers.objectives.dclr

    def step(phi: float) -> tuple[Tensor, Tensor]:
        objective = build(tiny_bert, phi=phi)
        objective.train()
        seen = {}

        def weighed_loss(anchors, positives, noise, weights, temperature) -> Tensor:
            seen["weights"] = weights
            return torch.zeros(())

        objective.complementary.register_forward_hook(lambda module, args, output: seen.setdefault("out", output))
        monkeypatch.setattr(trainers.objectives.dclr, "dclr_loss", weighed_loss)
        torch.manual_seed(0)
        objective.loss(BATCH)
        return seen["out"].chunk(2), seen["weights"]

    (first, second), _ = step(PHI)
    assert not torch.allclose(first, second)  # two dropout views
    pair = sorted([cos(first[0], second[1]), cos(first[0], first[1])])
    phi = sum(pair) / 2
    (again, _), weights = step(phi)
    torch.testing.assert_close(again, first)  # the same draws: phi does not reach the complementary model
    assert weights.tolist() == slow_weights(first, second, phi) != slow_weights(first, first, phi)


def test_the_complementary_model_reads_the_views_texts(tiny_bert, tmp_path):
    """With a back-translated positive, its second view is of the positives' texts, as the authors' model reads
    the batch's own two columns."""
    from tests.test_simcse import BT_ROWS, write_bt_file

    objective = build(tiny_bert, positive="bt1", bt_file=write_bt_file(tmp_path), attend_to_padding=False)
    objective.eval()
    seen = []
    objective.complementary.register_forward_hook(lambda module, args, output: seen.append(output))
    objective.loss(BT_ROWS)
    expected = objective.complementary.encode([row[0] for row in BT_ROWS] + [row[1] for row in BT_ROWS])
    torch.testing.assert_close(seen[0], expected, atol=1e-5, rtol=1e-4)


def test_gradients_reach_the_encoder_and_head_but_not_the_complementary_model(tiny_bert):
    objective = build(tiny_bert)
    objective.train()
    objective.loss(BATCH).backward()
    assert any(p.grad is not None for p in objective.encoder.parameters())
    assert all(p.grad is not None for p in objective.head.parameters())
    assert all(p.grad is None and not p.requires_grad for p in objective.complementary.parameters())
    assert objective.complementary.training  # dropout in its cosines, as the authors' submodule has
    assert not build(tiny_bert, complementary_dropout=False).train().complementary.training
    assert not any(k.startswith("complementary.") for k in objective.trained_state())


@pytest.mark.parametrize("knob, value", [
    ("phi", PHI),  # control: the test's setting on both sides
    ("phi", 0.9), ("complementary_pooling", "cls"), ("complementary_pooling", "pooler"), ("noise_times", 0.0),
    ("noise_times", 2.0), ("train_pooling", "same"), ("attend_to_padding", False), ("complementary_dropout", False),
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
    # RUCAIBox/DCLR simcse/models.py: BERT's pooler under the MLP, its pooler output in the dev evaluations and
    # the complementary model's, neither model given an attention mask, the complementary model with dropout
    assert (config["train_pooling"], config["selection_pooling"], config["complementary_pooling"],
            config["attend_to_padding"], config["complementary_dropout"]) == ("pooler", "pooler", "pooler", True, True)
    monkeypatch.setattr(trainers.data.sources, "hub_reachable", lambda: False)
    problems = [str(p) for p in method.check(method.resolve({"complementary_model": "someone/not-cached"}))]
    assert any(p.startswith("complementary_model: 'someone/not-cached' is not a local folder") for p in problems)


def test_a_pooler_of_a_checkpoint_without_one_is_refused_at_plan_time(tiny_bert, tiny_masked_lm, tmp_path, capsys):
    """The defaults pool with the models' own poolers; a model whose weights hold none (a masked-LM checkpoint)
    is refused before a sweep starts, naming each knob that asks for it, with exit code 2."""
    from sweep.commands.cli import main as sweep_main

    method = get_method("dclr")

    def pooler_knobs(**overrides: Any) -> set[str]:
        config = method.resolve(overrides)
        return {p.key for p in method.environment_problems(config) if "hold none" in p.message}

    assert pooler_knobs(model=tiny_masked_lm, complementary_model=tiny_masked_lm) == {
        "selection_pooling", "train_pooling", "complementary_pooling"}
    assert pooler_knobs(model=tiny_bert, complementary_model=tiny_masked_lm) == {"complementary_pooling"}
    assert pooler_knobs(model=tiny_masked_lm, complementary_model=tiny_bert, train_pooling="same",
                        selection_pooling="same", pooling="pooler") == {"pooling", "selection_pooling", "train_pooling"}
    assert pooler_knobs(model=tiny_masked_lm, complementary_model=tiny_masked_lm, train_pooling="same",
                        selection_pooling="same", complementary_pooling="cls") == set()
    spec = tmp_path / "dclr.yaml"
    spec.write_text(yaml.safe_dump({"name": "dclr_pooler", "method": "dclr", "rows": [{"name": "DCLR", "set": {
        "model": tiny_masked_lm, "complementary_model": tiny_bert}}]}))
    assert sweep_main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "train_pooling: 'pooler' is the model's own trained pooler" in err and "selection_pooling" in err


@pytest.mark.slow
def test_a_dclr_trial_resumes_exactly(tiny_bert, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "dclr", "complementary_model": tiny_bert,
              "complementary_pooling": "mean", "phi": PHI}
    assert_resumes_exactly(config, tmp_path / "checkpoints")


@pytest.mark.slow
def test_a_dclr_export_loads_in_sentence_transformers_at_the_logged_score(tiny_bert, use_tiny_sts, tmp_path):
    assert_export_scores_as_logged({**BASE, "model": tiny_bert, "method": "dclr", "complementary_model": tiny_bert,
                                    "max_steps": 4, "eval_every": 2}, tmp_path)


def authors_dev_spearman(tiny_bert: str, sts: Any, attend_to_padding: bool) -> float:
    """SentEval's STS loop over ``sts`` as the DCLR authors' trainer runs it: batches of 128 pairs in order, each
    half tokenised with padding to its longest, given to the model (without the mask: sentemb_forward_vat), the
    pooler output of each, the pairs' cosines against the gold scores."""
    from scipy.stats import spearmanr

    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)

    def batcher(sentences) -> Tensor:
        features = tokenizer(list(sentences), padding=True, return_tensors="pt")
        given = {k: v for k, v in features.items() if k != "attention_mask" or not attend_to_padding}
        with torch.no_grad():
            return model(**given).pooler_output

    cosines = []
    for start in range(0, len(sts), 128):
        left, right = batcher(sts.sentence1[start:start + 128]), batcher(sts.sentence2[start:start + 128])
        cosines += F.cosine_similarity(left.double(), right.double(), dim=-1).tolist()
    return 100 * spearmanr(cosines, sts.scores).statistic


def test_the_dev_evaluations_that_select_are_the_authors_senteval_batches_without_a_mask(tiny_bert):
    """selection_batches 'senteval' (the default): STS-B dev and SICK-R dev (their first 200 pairs: a batch of 128,
    then one of 72) scored as the authors' trainer scores them, computed here from the Hugging Face model; each
    part differs from the 'distinct' batches, which mask; without attend_to_padding the SentEval batches are
    masked too, and score as 'distinct' does."""
    from trainers.data.sources import DEV_SET, SICKR_DEV_SET
    from trainers.models.encoder import SentenceEncoder
    from trainers.suites.sts import STSEvaluator
    from trainers.training.encoding import dev_encode_fn

    def dev(**overrides: Any) -> dict[str, float]:
        config = get_method("dclr").resolve({"model": tiny_bert, "complementary_model": tiny_bert,
                                             "eval_max_pairs": 200, "eval_precision": "fp32", **overrides})
        encoder = SentenceEncoder.from_config(config)
        return STSEvaluator.of_trial(config).dev(dev_encode_fn(encoder, config))

    ours, distinct = dev(), dev(selection_batches="distinct")
    sets = STSEvaluator.of_trial(get_method("dclr").resolve({"eval_max_pairs": 200}))
    for part, name in (("dev_stsb_spearman", DEV_SET), ("dev_sickr_spearman", SICKR_DEV_SET)):
        sts = sets.sets[name].head(200)
        assert ours[part] == pytest.approx(authors_dev_spearman(tiny_bert, sts, attend_to_padding=True), abs=1e-4)
        assert distinct[part] == pytest.approx(authors_dev_spearman(tiny_bert, sts, attend_to_padding=False),
                                               abs=1e-4)
        assert abs(ours[part] - distinct[part]) > 1e-2
    assert dev(attend_to_padding=False) == pytest.approx(distinct, abs=1e-4)
