"""WK pooling (SBERT-WK) against the authors' algorithm run one sentence and one token at a time (the numpy port
in benchmarks/wk_reference.py), its two knobs, its validation, and its export to sentence-transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.wk_reference import dissecting
from tests.conftest import build_tiny_bert
from trainers.knobs import ConfigError
from trainers.models.encoder import SentenceEncoder
from trainers.models.wk_pooling import layer_window
from trainers.registry import get_method

SENTENCES = ["A man plays a guitar on the stage tonight.", "Two dogs run.", "The stock market fell sharply today.",
             "Hi.", "A woman is slicing an onion in the kitchen with a knife."]


@pytest.fixture(scope="module")
def deep_tiny_bert(tmp_path_factory) -> str:
    """A 6-layer tiny BERT: seven hidden states, so that windows reach past both ends of the fused layers."""
    return str(build_tiny_bert(tmp_path_factory.mktemp("deep-tiny-bert"), seed=3, layers=6))


def reference_vectors(encoder: SentenceEncoder, window: int, layer_start: int) -> np.ndarray:
    """The authors' dissecting() on the hidden states of SBERT_WK.py's batch (padded with id 0 to 128)."""
    ids, masks = [], []
    for sentence in SENTENCES:
        sentence_ids = encoder.tokenizer.encode(sentence, add_special_tokens=True)
        ids.append(sentence_ids + [0] * (128 - len(sentence_ids)))
        masks.append([1] * len(sentence_ids) + [0] * (128 - len(sentence_ids)))
    with torch.no_grad():
        states = encoder.model.eval()(input_ids=torch.tensor(ids), attention_mask=torch.tensor(masks),
                                      output_hidden_states=True).hidden_states
    layers = torch.stack(states).permute(1, 0, 2, 3).double().numpy()
    return dissecting({"context_window_size": window, "layer_start": layer_start}, layers, np.array(masks))


def wk_encoder(model: str, **knobs) -> SentenceEncoder:
    return SentenceEncoder.from_config(get_method("none").resolve({"model": model, "pooling": "wk", **knobs}))


def test_the_knobs_default_to_the_authors_settings():
    knobs = get_method("none").all_knobs
    assert (knobs["wk_window"].default, knobs["wk_layer_start"].default) == (2, 4)


def test_a_left_window_short_of_the_first_layer_is_empty_as_in_numpy():
    """numpy's token_feature[k-2:k] is empty for k = 1 (the slice -1:1), not layer 0."""
    assert layer_window(1, 2, 5) == [2, 3, 1]
    assert layer_window(2, 2, 5) == [0, 1, 3, 4, 2]
    assert layer_window(4, 2, 5) == [2, 3, 4]


@pytest.mark.parametrize("knobs", [{}, {"wk_window": 1}, {"wk_window": 3, "wk_layer_start": 1},
                                   {"wk_layer_start": 0}, {"wk_layer_start": 4, "wk_window": 1}])
def test_wk_pooling_equals_the_reference_token_by_token(deep_tiny_bert, knobs):
    """Each knob setting gives the reference's vectors for that setting (a knob that did not reach the pooling
    would give the defaults' vectors, which differ: checked beside)."""
    encoder = wk_encoder(deep_tiny_bert, **knobs)
    config = get_method("none").resolve({"model": deep_tiny_bert, "pooling": "wk", **knobs})
    expected = reference_vectors(encoder, config["wk_window"], config["wk_layer_start"])
    ours = encoder.encode(SENTENCES, max_length=128).double().numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
    if knobs:
        defaults = reference_vectors(encoder, 2, 4)
        assert np.abs(defaults - expected).max() > 1e-3


@pytest.mark.parametrize("knobs, refused", [({}, True), ({"wk_layer_start": 0}, False), ({"wk_layer_start": 1}, True),
                                            ({"wk_layer_start": 1, "wk_window": 1}, True),
                                            ({"wk_layer_start": 0, "wk_window": 1}, False)])
def test_too_few_hidden_states_for_the_window_are_refused(tiny_bert, knobs, refused):
    """Of the 2-layer BERT's three hidden states, WK needs all (the top layer's context is the wk_window below it,
    and a variance needs two cosines: the reference gives NaN or fails there)."""
    method = get_method("none")
    problems = method.environment_problems(method.resolve({"model": tiny_bert, "pooling": "wk", **knobs}))
    assert [p.key for p in problems] == (["wk_layer_start"] if refused else [])
    if refused:
        assert f"at most {2 - max(method.resolve(knobs)['wk_window'], 2)}" in problems[0].message
        with pytest.raises(ValueError, match="at least 3 hidden states"):
            wk_encoder(tiny_bert, **knobs)


def test_wk_pooling_takes_no_skipped_tokens(tiny_bert):
    method = get_method("none")
    with pytest.raises(ConfigError, match="pooling_skip_frequent"):
        method.resolve({"model": tiny_bert, "pooling": "wk", "pooling_skip_frequent": 3})


def test_an_exported_wk_encoder_loads_in_sentence_transformers_with_the_same_vectors(deep_tiny_bert, tmp_path):
    from sentence_transformers import SentenceTransformer

    from sweep.run.models import save_sentence_transformer

    encoder = wk_encoder(deep_tiny_bert, wk_window=1, wk_layer_start=2)
    save_sentence_transformer(encoder, tmp_path, max_length=128)
    loaded = SentenceTransformer(str(tmp_path), device="cpu", trust_remote_code=True)
    torch.testing.assert_close(torch.from_numpy(loaded.encode(SENTENCES)), encoder.encode(SENTENCES, max_length=128),
                               rtol=1e-4, atol=1e-5)
