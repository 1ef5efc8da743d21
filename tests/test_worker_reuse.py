"""A process that runs trial after trial (a reused Ray worker) keeps the tokenizer, the pretrained
weights and the evaluation sets' token ids: the next trial must give exactly what a fresh process gives."""

import pytest
import torch
from transformers import AutoModel

import trainers.models.encoder as encoder_module
from trainers.data.sources import _read_sts_file
from trainers.metrics import Metric
from trainers.models.encoder import SentenceEncoder
from trainers.training.loop import run_trial


def clear_process_caches() -> None:
    encoder_module._pristine.cache_clear()
    encoder_module._token_ids.cache_clear()
    _read_sts_file.cache_clear()


@pytest.fixture
def trial(tiny_bert, use_tiny_sts):
    return {"method": "simcse", "model": tiny_bert, "batch_size": 8, "train_limit": 48, "eval_every": 2,
            "max_steps": 6, "learning_rate": 1e-3, "pooling": "mean"}


def run(config):
    reports = []
    run_trial(config, reports.append)
    return [{k: v for k, v in r.items() if k not in Metric.TIMINGS} for r in reports]


def test_a_warm_process_gives_the_results_of_a_fresh_one(trial):
    clear_process_caches()
    fresh = run(trial)
    # The same trial again in this process: model, tokenizer and token ids now come from the caches,
    # after a trial that trained its copy of the weights.
    warm = run(trial)
    assert [r["loss"] for r in warm[:-1]] == [r["loss"] for r in fresh[:-1]]
    assert warm == fresh


def test_the_next_trial_loads_nothing_and_never_sees_trained_weights(trial, monkeypatch):
    clear_process_caches()
    run(trial)
    loads = []
    original = AutoModel.from_pretrained
    monkeypatch.setattr(AutoModel, "from_pretrained", lambda *a, **k: loads.append(a) or original(*a, **k))
    copy = SentenceEncoder.from_pretrained(trial["model"])
    assert loads == []  # served from the process's cache
    pristine = original(trial["model"])
    for name, tensor in pristine.state_dict().items():
        assert torch.equal(copy.model.state_dict()[name], tensor), name
    assert all(p.requires_grad for p in copy.model.parameters())


def test_a_rewritten_model_folder_is_loaded_again(tmp_path):
    from tests.conftest import build_tiny_bert

    clear_process_caches()
    folder = build_tiny_bert(tmp_path / "model", seed=3)
    first = SentenceEncoder.from_pretrained(str(folder)).model.state_dict()
    build_tiny_bert(folder, seed=4)
    second = SentenceEncoder.from_pretrained(str(folder)).model.state_dict()
    assert not torch.equal(first["embeddings.word_embeddings.weight"], second["embeddings.word_embeddings.weight"])


def test_token_ids_are_computed_once_per_sentence_list(tiny_bert):
    clear_process_caches()
    encoder = SentenceEncoder.from_pretrained(tiny_bert, pooling="mean").eval()
    sentences = ["A man is playing a guitar.", "Dogs run.", "A much longer sentence with many more tokens."]
    calls = []
    original = type(encoder.tokenizer).__call__
    type(encoder.tokenizer).__call__ = lambda self, *a, **k: calls.append(a) or original(self, *a, **k)
    try:
        first = encoder.encode(sentences, batch_size=2)
        second = encoder.encode(sentences, batch_size=2)
    finally:
        type(encoder.tokenizer).__call__ = original
    assert len(calls) == 1
    assert torch.equal(first, second)
