import pytest
import torch

from trainers.knobs import Problem
from trainers.models.encoder import SentenceEncoder
from trainers.models.pooling import pool

SENTENCES = ["A man is playing a guitar.", "Dogs run.", "A very much longer sentence with many more tokens in it."]


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    return SentenceEncoder.from_pretrained(tiny_bert).eval()


@pytest.fixture(scope="module")
def states(encoder):
    features = encoder.tokenize(SENTENCES, max_length=64)
    with torch.no_grad():
        return encoder.hidden_states(features), features["attention_mask"]


def hand_pool(layer_states, mask, kind):
    """Per-sentence pooling over the real (unpadded) tokens only, one sentence at a time."""
    rows = []
    for i in range(len(mask)):
        tokens = layer_states[i, : int(mask[i].sum())]
        rows.append({"cls": tokens[0], "mean": tokens.sum(0) / len(tokens), "max": tokens.max(0).values}[kind])
    return torch.stack(rows)


@pytest.mark.parametrize("kind", ["cls", "mean", "max"])
@pytest.mark.parametrize("layer", [0, 1, 2, -1])
def test_single_layer_poolings_match_hand_computation(states, kind, layer):
    hidden, mask = states
    torch.testing.assert_close(pool(hidden, mask, kind, layer), hand_pool(hidden[layer], mask, kind))


def test_multi_layer_poolings_match_hand_computation(states):
    hidden, mask = states
    first_last = hand_pool((hidden[1] + hidden[2]) / 2, mask, "mean")
    last_two = hand_pool((hidden[1] + hidden[2]) / 2, mask, "mean")  # 2 layers: last two are 1 and 2
    torch.testing.assert_close(pool(hidden, mask, "first_last_avg"), first_last)
    torch.testing.assert_close(pool(hidden, mask, "last2avg"), last_two)
    # With padding present, ignoring the mask would change the mean of the short sentence.
    assert mask[1].sum() < mask.shape[1]


def test_last2avg_uses_the_last_two_layers(tiny_bert, tmp_path):
    import sys

    sys.path.insert(0, "tests")
    from tests.conftest import build_tiny_bert

    deep = SentenceEncoder.from_pretrained(str(build_tiny_bert(tmp_path, layers=3))).eval()
    features = deep.tokenize(SENTENCES, 64)
    with torch.no_grad():
        hidden = deep.hidden_states(features)
    mask = features["attention_mask"]
    torch.testing.assert_close(pool(hidden, mask, "last2avg"), hand_pool((hidden[2] + hidden[3]) / 2, mask, "mean"))
    torch.testing.assert_close(pool(hidden, mask, "first_last_avg"),
                               hand_pool((hidden[1] + hidden[3]) / 2, mask, "mean"))


def test_encode_equals_one_by_one_and_deduplicates(encoder, monkeypatch):
    sentences = SENTENCES + [SENTENCES[0]]
    widths = []
    original = encoder.model.forward
    monkeypatch.setattr(encoder.model, "forward", lambda **kw: widths.append(kw["input_ids"].shape) or original(**kw))
    batched = encoder.encode(sentences, batch_size=2)
    monkeypatch.undo()
    assert sum(rows for rows, _ in widths) == 3  # the repeated sentence is encoded once
    assert widths[0][1] > widths[1][1]  # longest first: the first batch is the widest
    single = torch.cat([encoder.encode([s]) for s in sentences])
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-4)
    assert batched.shape == (4, 32)
    torch.testing.assert_close(batched[0], batched[3])
    encoder.pooling = "mean"  # padding must not leak into mean pooling either
    try:
        torch.testing.assert_close(encoder.encode(sentences, batch_size=4),
                                   torch.cat([encoder.encode([s]) for s in sentences]), atol=1e-5, rtol=1e-4)
    finally:
        encoder.pooling = "cls"


def test_encode_gives_a_batch_of_one_length_no_mask_and_a_padded_one_the_mask_made_ahead(encoder, monkeypatch):
    """Longest first, batches of 2: one of a length (no mask), then one padded (SDPA's 4D mask, made ahead)."""
    from tests.test_batches import SAME_LENGTH

    masks = []
    original = encoder.model.forward
    monkeypatch.setattr(encoder.model, "forward",
                        lambda **inputs: masks.append(inputs.get("attention_mask")) or original(**inputs))
    encoder.encode([*SAME_LENGTH, "the cat", "dog saw cat"], batch_size=2)
    assert masks[0] is None and masks[1].shape == (2, 1, 5, 5)


def test_encode_runs_without_gradients_and_restores_mode(encoder):
    encoder.train()
    vectors = encoder.encode(SENTENCES)
    assert not vectors.requires_grad and encoder.training
    encoder.eval()


@pytest.mark.parametrize("layer", [1, -1])
def test_pooler_pooling_is_the_models_pooler_output_sentence_by_sentence(tiny_bert, layer):
    """``pooler``: tanh of the model pooler's dense layer over [CLS] (at the last layer, Hugging Face's
    ``pooler_output``), each sentence alone; batched and padded, the same."""
    from transformers import AutoModel, AutoTokenizer

    from tests.reference_encoding import reference_vectors

    encoder = SentenceEncoder.from_pretrained(tiny_bert, pooling="pooler", layer=layer).eval()
    expected = reference_vectors(tiny_bert, "pooler", layer, SENTENCES)
    torch.testing.assert_close(encoder.encode(SENTENCES, batch_size=2), expected, atol=1e-5, rtol=1e-4)
    if layer == -1:
        model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)
        with torch.no_grad():
            outputs = [model(**tokenizer([s], return_tensors="pt")).pooler_output[0] for s in SENTENCES]
        torch.testing.assert_close(expected, torch.stack(outputs))
    assert not torch.allclose(expected, reference_vectors(tiny_bert, "cls", layer, SENTENCES), atol=1e-3)


def test_pooler_pooling_is_refused_for_a_model_without_a_pooler(tiny_bert):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert, add_pooling_layer=False)
    with pytest.raises(ValueError, match="pooling 'pooler' is the model's own pooler output, and this bert model "
                                         "has none"):
        SentenceEncoder(model, AutoTokenizer.from_pretrained(tiny_bert), pooling="pooler")
    encoder = SentenceEncoder(model, AutoTokenizer.from_pretrained(tiny_bert))
    with pytest.raises(ValueError, match="has none"), encoder.pooling_as("pooler"):
        pass


def test_pooler_pooling_refuses_a_checkpoint_without_pooler_weights(tiny_bert, tiny_masked_lm):
    """A masked-LM checkpoint holds no pooler: Hugging Face's AutoModel draws one at random, which pooling
    'pooler' must not read. The plan sees it in the weights' names; the trial, in what loading had to draw."""
    from trainers.models.pretrained import BUNDLED_MODEL, pooler_problem

    assert "the weights of" in pooler_problem(tiny_masked_lm) and "hold none" in pooler_problem(tiny_masked_lm)
    assert pooler_problem(tiny_bert) is None and pooler_problem(BUNDLED_MODEL) is None
    with pytest.raises(ValueError, match="Hugging Face drew its pooler at random"):
        SentenceEncoder.from_pretrained(tiny_masked_lm, pooling="pooler")
    encoder = SentenceEncoder.from_pretrained(tiny_masked_lm, pooling="cls")
    with pytest.raises(ValueError, match="drew its pooler at random"), encoder.pooling_as("pooler"):
        pass
    assert SentenceEncoder.from_pretrained(tiny_bert, pooling="pooler").pooling == "pooler"


def test_bad_pooling_and_layer_rejected(tiny_bert):
    with pytest.raises(ValueError, match="pooling must be one of"):
        SentenceEncoder.from_pretrained(tiny_bert, pooling="median")
    with pytest.raises(ValueError, match="layer 3 does not exist: the model has hidden states 0..2"):
        SentenceEncoder.from_pretrained(tiny_bert, layer=3)


def test_keep_layers_is_the_first_layers_of_the_full_model(tiny_bert):
    full = SentenceEncoder.from_pretrained(tiny_bert).eval()
    cut = SentenceEncoder.from_pretrained(tiny_bert, keep_layers=1).eval()
    features = full.tokenize(["a cat sat on the mat", "dogs bark"], max_length=16)
    with torch.no_grad():
        expected = full.hidden_states(features)[1]
        states = cut.hidden_states(features)
    assert len(states) == 2 and cut.num_layers == 1
    torch.testing.assert_close(states[-1], expected)
    with pytest.raises(ValueError, match="model_layers=5: the model has 2 layers"):
        SentenceEncoder.from_pretrained(tiny_bert, keep_layers=5)


def test_too_many_model_layers_fail_validation(tiny_bert):
    from trainers.registry import get_method

    method = get_method("none")
    assert method.environment_problems(method.resolve({"model": tiny_bert, "model_layers": 2})) == []
    problems = method.environment_problems(method.resolve({"model": tiny_bert, "model_layers": 3}))
    assert problems == [Problem("model_layers", f"3 layers asked for, but {tiny_bert!r} has 2")]
    assert str(problems[0]) == f"model_layers: 3 layers asked for, but {tiny_bert!r} has 2"
