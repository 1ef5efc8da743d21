"""A batch's lengths counted on the host, and the transformer given what it would make of the mask itself.

Each way of giving the transformer its mask (none for a batch without padding, the 4D mask made ahead for a
padded one) is checked against the batch given as it is: the same bits, from the model's outputs to a
method's loss.
"""

from __future__ import annotations

import sys

import pytest
import torch

from tests.conftest import build_objective
from trainers.models import batches
from trainers.models.batches import TokenBatch, transformer_inputs
from trainers.models.encoder import SentenceEncoder

SAME_LENGTH = ["the dog saw the cat", "the cat saw the dog"]
"""Two sentences of one token length, for BERT's tokenizer and the tiny RoBERTa's alike."""
PADDED = [SAME_LENGTH[0], "the cat"]


def test_a_batch_counts_its_rows_lengths_on_the_host(tiny_bert):
    encoder = SentenceEncoder.from_pretrained(tiny_bert)
    batch = encoder.tokenize(PADDED, 32)
    assert isinstance(batch, TokenBatch)
    assert list(batch.lengths) == batch["attention_mask"].sum(1).tolist() and batch.masked
    assert not encoder.tokenize(SAME_LENGTH, 32).masked
    edited = batch.with_ids(torch.zeros_like(batch["input_ids"]))
    assert edited.lengths == batch.lengths and edited["attention_mask"] is batch["attention_mask"]
    assert not edited["input_ids"].any() and batch["input_ids"].any()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_what_the_transformer_is_given(tiny_bert, attention):
    encoder = SentenceEncoder.from_pretrained(tiny_bert)
    encoder.model.set_attn_implementation(attention)
    assert "attention_mask" not in transformer_inputs(encoder.model, encoder.tokenize(SAME_LENGTH, 32))
    padded = encoder.tokenize(PADDED, 32)
    given = transformer_inputs(encoder.model, padded)["attention_mask"]
    width = padded["input_ids"].shape[1]
    if attention == "sdpa":
        assert given.shape == (2, 1, width, width) and given.dtype == torch.bool
        assert torch.equal(given[:, 0, 0], padded["attention_mask"].bool())
    else:  # eager's mask depends on the dtype inside the model: given as it is
        assert given is padded["attention_mask"]
    counted_elsewhere = dict(padded)  # features whose lengths the host did not count: as they are
    assert transformer_inputs(encoder.model, counted_elsewhere)["attention_mask"] is padded["attention_mask"]


@pytest.mark.parametrize("fixed_shape", [False, True])
def test_a_batch_attending_to_its_padding_goes_without_a_mask_and_pools_its_real_tokens(tiny_bert, fixed_shape):
    """DCLR's ``attend_to_padding``: the transformer is called as the authors call it, with no mask (the
    padding's states then differ from the masked call's), and a mean pooling still averages the real tokens."""
    from transformers import AutoModel

    encoder = SentenceEncoder.from_pretrained(tiny_bert, pooling="mean").eval()
    padded = encoder.tokenize(PADDED, 32, to_max_length=fixed_shape)
    attending = padded.attending_to_padding()
    assert "attention_mask" not in transformer_inputs(encoder.model, attending) and not attending.masked
    assert attending.lengths == padded.lengths and attending.fixed_shape == fixed_shape
    assert attending.with_ids(attending["input_ids"]).attends_to_padding and not padded.attends_to_padding
    model = AutoModel.from_pretrained(tiny_bert).eval()
    with torch.no_grad():
        unmasked = model(input_ids=padded["input_ids"], token_type_ids=padded["token_type_ids"]).last_hidden_state
        mask = padded["attention_mask"].unsqueeze(-1)
        torch.testing.assert_close(encoder(attending), (unmasked * mask).sum(1) / mask.sum(1))
        assert not torch.allclose(encoder(attending)[1], encoder(padded)[1], atol=1e-4)  # "the cat" saw padding
        if not fixed_shape:  # the longest row has no padding to see, unless the batch is padded to the limit
            torch.testing.assert_close(encoder(attending)[0], encoder(padded)[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("sentences", [SAME_LENGTH, PADDED], ids=["one length", "padded"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("model", ["tiny_bert", "tiny_roberta"])
def test_the_transformer_computes_the_same_bits_as_from_the_batch_as_it_is(model, attention, sentences, request):
    encoder = SentenceEncoder.from_pretrained(request.getfixturevalue(model))
    encoder.model.set_attn_implementation(attention)
    batch = encoder.tokenize(sentences, 32)
    outputs = []
    for inputs in (transformer_inputs(encoder.model, batch), dict(batch)):
        torch.manual_seed(0)  # the same dropout masks both ways
        states = encoder.model(**inputs, output_hidden_states=True).hidden_states
        states[-1][:, 0].sum().backward()
        gradients = [p.grad.clone() for p in encoder.model.parameters() if p.grad is not None]
        outputs.append((torch.stack(states).detach(), gradients))
        encoder.model.zero_grad()
    (states, gradients), (plain_states, plain_gradients) = outputs
    assert torch.equal(states, plain_states)
    assert len(gradients) == len(plain_gradients) > 0
    assert all(torch.equal(a, b) for a, b in zip(gradients, plain_gradients))


def _as_it_is(model, batch) -> dict:
    return dict(batch)


METHODS = {"simcse": {}, "sg": {}, "consert": {"aug1": "shuffle", "aug2": "token_cutoff"},
           "sct": {"queues": "two"}, "diffcse": {"generator": "{tiny_masked_lm}"}}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_methods_loss_is_the_same_bits_as_with_the_batch_given_as_it_is(method, tiny_bert, tiny_masked_lm,
                                                                         use_tiny_sts, monkeypatch):
    from tests.test_device_reads import training_examples

    knobs = {key: value.format(tiny_masked_lm=tiny_masked_lm) for key, value in METHODS[method].items()}
    examples = training_examples(method, knobs, tiny_bert, 8)

    def loss() -> torch.Tensor:
        objective = build_objective(method, tiny_bert, 0, batch_size=8, max_seq_length=16, **knobs)
        objective.prepare(examples)
        objective.train()
        torch.manual_seed(1)
        return objective.loss(examples)

    through_inputs = loss()
    # Every module that gives a transformer its inputs now gives them as they are.
    for module in [m for m in sys.modules.values() if getattr(m, "transformer_inputs", None) is
                   batches.transformer_inputs]:
        monkeypatch.setattr(module, "transformer_inputs", _as_it_is)
    assert torch.equal(through_inputs, loss())
