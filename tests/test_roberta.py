"""Every method on RoBERTa (SG-BERT Table 11), on a tiny random RoBERTa with its own byte-level BPE tokenizer:
its tokenizer (no token types, ``<s>`` first), its position ids (from pad_token_id + 1) under ConSERT's
token shuffle, its embedding module under the other augmentations, SG's layer views, SCT's queues, the
frozen outputs' key, one step and one evaluation of each method, an exact resume, and an export."""

from __future__ import annotations

import json
import math

import pytest
import torch

import trainers.views.embedding as augmentations
from tests.conftest import build_tiny_roberta
from tests.test_checkpoint import BASE, assert_resumes_exactly
from trainers.knobs import Problem
from trainers.models.encoder import SentenceEncoder
from trainers.models.frozen_outputs import tokenizer_digest
from trainers.models.pretrained import FAMILIES
from trainers.objectives.sct import SCTObjective
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method
from trainers.training.checkpoint import LocalSession
from trainers.training.loop import run_trial
from trainers.views.embedding import augmented_hidden_states, shuffled_position_ids

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell sharply today.", "Hi."]


def test_the_tokenizer_gives_no_token_types_and_s_comes_first(tiny_roberta):
    encoder = SentenceEncoder.from_pretrained(tiny_roberta, "cls").eval()
    features = encoder.tokenize(BATCH, 32)
    assert set(features) == {"input_ids", "attention_mask"}  # no token_type_ids
    assert encoder.family.name == "roberta" and encoder.model.config.pad_token_id == 1
    assert features["input_ids"][:, 0].tolist() == [encoder.tokenizer.bos_token_id] * len(BATCH)
    # cls pooling is <s>'s last-layer vector: each sentence alone (no padding), from the bare model
    with torch.no_grad():
        pooled = encoder(features)
        for i, sentence in enumerate(BATCH):
            alone = encoder.tokenizer([sentence], return_tensors="pt")
            torch.testing.assert_close(pooled[i], encoder.model(**alone).last_hidden_state[0, 0], atol=1e-5, rtol=1e-4)


def test_roberta_positions_count_from_after_padding():
    torch.manual_seed(3)
    positions = shuffled_position_ids((10, 14, 7), 14, FAMILIES["roberta"], 1)
    for i, length in enumerate([10, 14, 7]):
        assert sorted(positions[i, :length].tolist()) == list(range(2, 2 + length))  # RoBERTa's 2..length+1
        assert positions[i, length:].tolist() == [1] * (14 - length)  # padding keeps position pad_token_id
    assert not torch.equal(positions[:, :7], torch.arange(2, 9).repeat(3, 1))


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_roberta"])
def test_shuffle_without_a_permutation_gives_the_models_own_positions(model, request, monkeypatch):
    """With the identity for a permutation, the shuffle's position ids are those the model gives itself:
    the same hidden states, to the bit. A shuffle that counted RoBERTa's positions from 0 fails here."""
    encoder = SentenceEncoder.from_pretrained(request.getfixturevalue(model)).eval()
    features = encoder.tokenize(BATCH, 32)
    monkeypatch.setattr(augmentations.torch, "randperm", lambda n, device=None: torch.arange(n, device=device))
    with torch.no_grad():
        shuffled = augmented_hidden_states(encoder, features, "shuffle", 0.0)
        plain = encoder.hidden_states(features)
    for got, expected in zip(shuffled, plain):
        assert torch.equal(got, expected)


def test_embedding_augmentations_act_on_robertas_embedding_module(tiny_roberta):
    encoder = SentenceEncoder.from_pretrained(tiny_roberta).eval()
    features = encoder.tokenize(BATCH, 32)
    lengths = features["attention_mask"].sum(1).tolist()
    with torch.no_grad():
        plain = encoder.hidden_states(features)
        cut = augmented_hidden_states(encoder, features, "token_cutoff", 0.5)
        torch.manual_seed(0)
        shuffled = augmented_hidden_states(encoder, features, "shuffle", 0.0)
    for i, length in enumerate(lengths):  # hidden state 0 is the transformed embedding output
        assert int((cut[0][i].abs().sum(-1) == 0).sum()) == int(length * 0.5)
        assert not (plain[0][i].abs().sum(-1) == 0).any()
    assert not torch.allclose(cut[-1], plain[-1]) and not torch.allclose(shuffled[-1], plain[-1])


def test_sg_views_and_sentence_vector_on_roberta(tiny_roberta):
    config = get_method("sg").resolve({"model": tiny_roberta, "projection_hidden": 16})
    objective = SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_roberta))
    features = objective.encoder.tokenize(BATCH, 128)
    with torch.no_grad():
        states = objective.fixed(**features, output_hidden_states=True).hidden_states
    views = objective.compute_views(BATCH)
    assert views.shape == (4, 3, 32)  # layers 0..2
    for i, length in enumerate(features["attention_mask"].sum(1).tolist()):  # max over <s> .. </s>, no padding
        for k in range(3):
            torch.testing.assert_close(views[i, k], states[k][i, :length].max(0).values)
    assert not any(p.requires_grad for p in objective.encoder.model.embeddings.parameters())  # layer 0 frozen


def test_sct_queues_take_robertas_vectors(tiny_roberta):
    config = get_method("sct").resolve({"model": tiny_roberta, "queue_size": 10, "projector_expansion": 2})
    torch.manual_seed(0)
    objective = SCTObjective(config, SentenceEncoder.from_pretrained(tiny_roberta))
    objective.train()
    objective.loss(BATCH).backward()
    (first, second), _ = objective._pending
    objective.after_update()
    for queue, reference in zip(objective.queue_list, (first, second)):
        assert queue.vectors.shape == (10, 32) and int(queue.pointer) == len(BATCH)
        assert torch.equal(queue.vectors[: len(BATCH)], reference)


def test_the_frozen_outputs_key_tells_bpe_tokenizers_apart(tiny_roberta, tmp_path):
    """Same vocabulary, fewer merges: another tokenization, so another key (a vocabulary alone is not enough)."""
    other = SentenceEncoder.from_pretrained(str(build_tiny_roberta(tmp_path / "fewer-merges", merges_limit=300)))
    mine = SentenceEncoder.from_pretrained(tiny_roberta)
    assert other.tokenizer.get_vocab() == mine.tokenizer.get_vocab()
    assert other.tokenize(BATCH, 32)["input_ids"].shape != mine.tokenize(BATCH, 32)["input_ids"].shape
    assert tokenizer_digest(other.tokenizer) != tokenizer_digest(mine.tokenizer)
    again = SentenceEncoder.from_pretrained(tiny_roberta).tokenizer
    again(BATCH, truncation=True, max_length=7)  # a call's truncation is no part of the key
    assert tokenizer_digest(again) == tokenizer_digest(mine.tokenizer)


def test_an_unsupported_family_is_refused_before_a_sweep(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "distilbert", "num_hidden_layers": 2,
                                                      "hidden_size": 32}))
    method = get_method("simcse")
    problems = method.environment_problems(method.resolve({"model": str(tmp_path)}))
    assert Problem("model", "model_type 'distilbert' is not a supported encoder family (supported: bert, roberta; "
                   "a family is described once in trainers.models.pretrained.FAMILIES)") in problems


ONE_STEP = {"batch_size": 4, "train_limit": 8, "max_steps": 1, "eval_every": 1, "learning_rate": 1e-3,
            "eval_max_pairs": 20}
METHODS = {
    "simcse": {"method": "simcse"},
    "sg": {"method": "sg", "loss": "sg", "projection_hidden": 16},
    "sg-opt": {"method": "sg", "loss": "opt3", "projection_hidden": 16},
    "consert-shuffle-token-cutoff": {"method": "consert", "aug1": "shuffle", "aug2": "token_cutoff"},
    "consert-feature-cutoff-dropout": {"method": "consert", "aug1": "feature_cutoff", "aug2": "dropout"},
    "consert-span-cutoff-none": {"method": "consert", "aug1": "span_cutoff", "aug2": "none"},
    "sct": {"method": "sct", "queue_size": 10, "projector_expansion": 2},
    "sct-distillation": {"method": "sct", "queue_size": 10, "projector_expansion": 2, "distillation": "cd"},
    "dclr": {"method": "dclr"},
}


@pytest.fixture(scope="module")
def untuned_roberta_avg(tiny_roberta, tiny_sts_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
        final = run_trial({"method": "none", "model": tiny_roberta, "eval_max_pairs": 20})
    assert final["steps"] == 0 and math.isfinite(final["test_avg_spearman"])
    return final["test_avg_spearman"]


@pytest.mark.parametrize("case", list(METHODS))
def test_one_step_and_one_evaluation_of_each_method(case, tiny_roberta, tiny_teacher, use_tiny_sts,
                                                    untuned_roberta_avg):
    config = {**ONE_STEP, "model": tiny_roberta, **METHODS[case]}
    if config.get("distillation"):
        config["teacher"] = tiny_teacher  # a BERT teacher with its own tokenizer for a RoBERTa student
    if config["method"] == "dclr":
        config["complementary_model"] = tiny_teacher  # a BERT complementary model, its own tokenizer
    reports: list[dict] = []
    final = run_trial(config, reports.append)
    assert [r["step"] for r in reports[:-1]] == [1] and math.isfinite(reports[0]["loss"])
    assert final["steps"] == 1 and math.isfinite(final["test_avg_spearman"])
    assert final["test_avg_spearman"] != untuned_roberta_avg  # the step changed the encoder


RESUMED = {
    "simcse": {"method": "simcse"},
    "sg-opt3": {"method": "sg", "loss": "opt3", "projection_hidden": 16},
    "consert-shuffle": {"method": "consert", "aug1": "shuffle", "aug2": "dropout"},
    "sct": {"method": "sct", "queue_size": 10, "projector_expansion": 2},
}


@pytest.mark.parametrize("case", list(RESUMED))
def test_a_resumed_roberta_trial_equals_the_uninterrupted_one(case, tiny_roberta, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_roberta, "eval_max_pairs": 20, **RESUMED[case]}
    assert_resumes_exactly(config, tmp_path / "checkpoints")


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_an_exported_roberta_loads_in_sentence_transformers_with_the_same_vectors(pooling, tiny_roberta,
                                                                                   use_tiny_sts, tmp_path):
    from sentence_transformers import SentenceTransformer

    from sweep.run.models import load_trial_encoder, save_sentence_transformer

    config = {**ONE_STEP, "model": tiny_roberta, "method": "simcse", "max_steps": 2, "pooling": pooling}
    run_trial(config, LocalSession(tmp_path / "checkpoints", keep=1))
    (final,) = sorted((tmp_path / "checkpoints").glob("checkpoint_*"))
    encoder, record = load_trial_encoder(final)
    save_sentence_transformer(encoder, tmp_path / "export", record.config["eval_max_length"])
    loaded = SentenceTransformer(str(tmp_path / "export"), device="cpu")
    assert type(loaded[0].auto_model).__name__ == "RobertaModel"
    expected = encoder.encode(BATCH)
    torch.testing.assert_close(torch.from_numpy(loaded.encode(BATCH)), expected, atol=1e-5, rtol=1e-4)
    untuned = SentenceEncoder.from_pretrained(tiny_roberta, pooling).encode(BATCH)
    assert not torch.allclose(expected, untuned)  # the trained weights, not the pretrained ones
