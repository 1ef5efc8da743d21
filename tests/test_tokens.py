"""The host's share of a step, taken out without changing a number: kept token ids padded with numpy give what
the tokenizer gives, encoding in blocks gives what one copy per batch gave, the fused optimiser's update is
the plain one's, and losses read in stretches are the losses of every step."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from trainers.data.sources import load_corpus
from trainers.data.tokens import TokenCache, pad
from trainers.metrics import Metric
from trainers.models import encoder as encoder_module
from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path
from trainers.registry import get_method
from trainers.training import loop, optimization
from trainers.training.loop import NonFiniteLossError, run_trial
from trainers.training.optimization import fused_update, make_optimizer

TEXTS = [*load_corpus("stsb_sentences")[:300], "", "word " * 400, "Dogs run.", "Dogs run."]


def tokenizers(tiny_roberta: str) -> list:
    bert = AutoTokenizer.from_pretrained(resolve_model_path(BUNDLED_MODEL))
    left = AutoTokenizer.from_pretrained(resolve_model_path(BUNDLED_MODEL), padding_side="left")
    return [bert, left, AutoTokenizer.from_pretrained(tiny_roberta)]


@pytest.mark.parametrize("to_max_length", [False, True], ids=["longest", "max_length"])
@pytest.mark.parametrize("max_length", [8, 32, 128])
def test_kept_ids_padded_with_numpy_are_what_the_tokenizer_gives(tiny_roberta, max_length, to_max_length):
    """BERT (token types), BERT padded on the left, RoBERTa (no token types, pad id 1); cut texts, an empty
    text, a repeated one; the same cache asked twice (the second time every row is kept); padded to the longest
    row or to the length limit (``pad_to_max_length``)."""
    padding = "max_length" if to_max_length else True
    for tokenizer in tokenizers(tiny_roberta):
        cache = TokenCache(tokenizer)
        for start in (0, 100, 0):
            batch = TEXTS[start : start + 150] + TEXTS[-4:]
            if to_max_length:  # no row that reaches the limit: padded past the longest
                batch = [text for text in batch if len(tokenizer(text)["input_ids"]) < max_length]
            expected = tokenizer(batch, padding=padding, truncation=True, max_length=max_length, return_tensors="pt")
            got = cache.features(batch, max_length, to_max_length)
            assert got["input_ids"].shape[1] == max_length or not to_max_length
            assert list(got) == list(expected.keys())
            for key in got:
                assert torch.equal(got[key], expected[key]), (tokenizer.padding_side, key)
        ids_only = pad(tokenizer, [{"input_ids": ids} for ids in expected["input_ids"].tolist()[:3]])
        assert set(ids_only) == {"input_ids", "attention_mask"}  # a mask made where the rows have none


def test_the_cache_keeps_at_most_its_limit_and_still_answers_past_it():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(BUNDLED_MODEL))
    cache = TokenCache(tokenizer, limit=10)
    batch = TEXTS[:40]
    expected = tokenizer(batch, padding=True, truncation=True, max_length=32, return_tensors="pt")
    for _ in range(2):
        assert torch.equal(cache.features(batch, 32)["input_ids"], expected["input_ids"])
        assert len(cache) == 10
    cache.features(batch[:5], 16)  # another length limit is another row
    assert len(cache) == 10


def test_training_tokenises_a_text_once_in_all_its_epochs(tiny_bert, monkeypatch):
    encoder = SentenceEncoder.from_pretrained(tiny_bert)
    calls = []

    class Counting:  # the tokenizer, counting the texts it tokenises
        def __getattr__(self, name):
            return getattr(encoder.tokenizer, name)

        def __call__(self, texts, **kwargs):
            calls.append(len(texts))
            return encoder.tokenizer(texts, **kwargs)

    cache = encoder_module.token_cache(encoder.tokenizer)
    monkeypatch.setattr(cache, "tokenizer", Counting())
    monkeypatch.setattr(cache, "_rows", {})
    for _ in range(3):
        encoder.tokenize(TEXTS[:20], 32)
    assert calls == [20]


@pytest.mark.parametrize("block", [1, 3, 10**6])
def test_encoding_in_blocks_gives_the_same_vectors(tiny_bert, monkeypatch, block):
    encoder = SentenceEncoder.from_pretrained(tiny_bert).eval()
    reference = torch.cat([encoder.encode([text], max_length=64) for text in TEXTS[:30]])
    monkeypatch.setattr(encoder_module, "ENCODE_BLOCK", block)
    assert torch.equal(encoder.encode(TEXTS[:30], batch_size=4, max_length=64)[:1], reference[:1])
    torch.testing.assert_close(encoder.encode(TEXTS[:30], batch_size=4, max_length=64), reference,
                               atol=1e-5, rtol=1e-4)
    monkeypatch.setattr(encoder_module, "ENCODE_BLOCK", 10**6)
    whole = encoder.encode(TEXTS[:30], batch_size=4, max_length=64)
    monkeypatch.setattr(encoder_module, "ENCODE_BLOCK", block)
    assert torch.equal(encoder.encode(TEXTS[:30], batch_size=4, max_length=64), whole)


def test_the_fused_update_is_the_plain_update(monkeypatch):
    """torch's fused kernel (adam_implementation 'torch' on a GPU) against its plain loop, on the CPU where both
    exist: ten AdamW steps with weight decay from the same start."""
    torch.manual_seed(0)
    start = [torch.randn(64, 32), torch.randn(32)]
    config = get_method("simcse").resolve({"weight_decay": 0.01, "learning_rate": 1e-3, "adam_implementation": "torch"})
    results = []
    for fused in (None, True):
        weights = [torch.nn.Parameter(w.clone()) for w in start]
        monkeypatch.setattr(optimization, "fused_update", lambda parameters: fused)
        optimizer = make_optimizer(config, torch.nn.ParameterList(weights))
        assert optimizer.defaults["fused"] is fused
        for step in range(10):
            loss = sum((w * (step + 1)).sin().sum() for w in weights)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        results.append([w.detach() for w in weights])
    for plain, fused in zip(*results):
        torch.testing.assert_close(fused, plain, atol=1e-6, rtol=1e-5)
        assert not torch.equal(plain, start[0] if plain.dim() == 2 else start[1])
    monkeypatch.undo()
    assert fused_update([torch.nn.Parameter(torch.zeros(2))]) is None and fused_update([]) is None


@pytest.fixture
def base(tiny_bert, use_tiny_sts):
    return {"method": "simcse", "model": tiny_bert, "device": "cpu", "batch_size": 8, "train_limit": 64,
            "epochs": 20, "eval_every": 45}


def test_each_evaluation_logs_the_mean_of_every_step_loss_since_the_last(base, monkeypatch):
    """Read in stretches of READ_LOSSES_EVERY steps (smaller than and not dividing eval_every), the logged
    means are those of the losses each step computed, as loss.item() reads them."""
    import trainers.objectives.simcse as simcse

    monkeypatch.setattr(loop, "READ_LOSSES_EVERY", 7)
    computed = []
    original = simcse.info_nce
    monkeypatch.setattr(simcse, "info_nce", lambda *args: computed.append(original(*args)) or computed[-1])
    reports = []
    run_trial({**base, "max_steps": 100, "eval_grid": "stage"}, reports.append)
    values = [loss.item() for loss in computed]
    logged = [r[Metric.LOSS] for r in reports if Metric.LOSS in r]
    assert len(values) == 100 and len(logged) == 3  # evaluations at 45, 90 and the last step
    assert logged == [sum(values[:45]) / 45, sum(values[45:90]) / 45, sum(values[90:]) / 10]


@pytest.mark.parametrize("bad_step, read_at", [(5, 7), (12, 17)])  # reads: every 7 unread steps and at 10, 20
def test_a_non_finite_loss_names_its_step_and_no_evaluation_sees_it(base, monkeypatch, bad_step, read_at):
    import trainers.objectives.simcse as simcse

    monkeypatch.setattr(loop, "READ_LOSSES_EVERY", 7)
    calls = []
    original = simcse.info_nce

    def loss(*args):
        calls.append(1)
        value = original(*args)
        return value * float("inf") if len(calls) == bad_step else value

    monkeypatch.setattr(simcse, "info_nce", loss)
    reports = []
    with pytest.raises(NonFiniteLossError, match=f"training loss is (inf|nan) at step {bad_step};"):
        run_trial({**base, "max_steps": 30, "eval_every": 10}, reports.append)
    assert len(calls) == read_at  # found at the first read after it
    assert [r["step"] for r in reports] == ([] if bad_step <= 10 else [10])
