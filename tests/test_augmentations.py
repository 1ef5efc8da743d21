import pytest
import torch

from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import FAMILIES
from trainers.views.embedding import (
    augmented_hidden_states,
    dropout,
    erased,
    feature_cutoff,
    fgv_perturbation,
    hidden_states_with_embedding_transform,
    shuffled_position_ids,
    span_cutoff,
    token_cutoff,
)

MASK = torch.tensor([[1] * 10 + [0] * 4, [1] * 14, [1] * 7 + [0] * 7])
LENGTHS = (10, 14, 7)
"""Each row's real tokens in MASK, as the host counted them (what the augmentations are given)."""


@pytest.fixture
def embeddings():
    torch.manual_seed(0)
    return torch.randn(3, 14, 20) + 5.0  # no exact zeros before augmentation


def zero_rows(x):
    return (x == 0).all(-1)


def test_token_cutoff_erases_int_len_times_rate_real_rows(embeddings):
    out = erased(embeddings, token_cutoff(embeddings.shape, LENGTHS, 0.15))
    assert zero_rows(out).sum(1).tolist() == [int(10 * 0.15), int(14 * 0.15), int(7 * 0.15)]
    assert not zero_rows(out)[MASK == 0].any()  # padding untouched
    kept = ~zero_rows(out)
    torch.testing.assert_close(out[kept], embeddings[kept])


def test_feature_cutoff_erases_whole_columns(embeddings):
    out = erased(embeddings, feature_cutoff(embeddings.shape, LENGTHS, 0.2))
    for i in range(3):
        zero_columns = (out[i] == 0).all(0)
        assert zero_columns.sum() == int(20 * 0.2)
        torch.testing.assert_close(out[i][:, ~zero_columns], embeddings[i][:, ~zero_columns])


def test_dropout_zeroes_single_elements_without_rescaling(embeddings):
    out = erased(embeddings, dropout(embeddings.shape, LENGTHS, 0.2))
    for i, length in enumerate([10, 14, 7]):
        assert int((out[i, :length] == 0).sum()) == int(length * 20 * 0.2)
        assert not (out[i, length:] == 0).any()
    changed = out != embeddings
    assert (out[changed] == 0).all()
    assert not zero_rows(out).any()  # single elements, not whole rows


def test_span_cutoff_erases_one_contiguous_span(embeddings):
    out = erased(embeddings, span_cutoff(embeddings.shape, LENGTHS, 0.3))
    for i, length in enumerate([10, 14, 7]):
        rows = zero_rows(out[i]).nonzero().flatten().tolist()
        assert len(rows) == int(length * 0.3)
        assert rows == list(range(rows[0], rows[0] + len(rows))) and rows[-1] < length


def test_shuffle_permutes_real_positions_only():
    torch.manual_seed(3)
    positions = shuffled_position_ids(LENGTHS, 14, FAMILIES["bert"], 0)
    for i, length in enumerate([10, 14, 7]):
        assert sorted(positions[i, :length].tolist()) == list(range(length))  # same multiset
        assert positions[i, length:].tolist() == list(range(length, 14))
    assert not torch.equal(positions, torch.arange(14).repeat(3, 1))


def test_augmentations_reach_the_encoder(tiny_bert):
    encoder = SentenceEncoder.from_pretrained(tiny_bert).eval()
    features = encoder.tokenize(["A man is playing a guitar on stage.", "Dogs run."], 32)
    with torch.no_grad():
        plain = augmented_hidden_states(encoder, features, "none", 0.0)[-1]
        torch.manual_seed(0)
        shuffled = augmented_hidden_states(encoder, features, "shuffle", 0.0)[-1]
        cut = augmented_hidden_states(encoder, features, "token_cutoff", 0.5)[-1]
        again = augmented_hidden_states(encoder, features, "none", 0.0)[-1]
    assert not torch.allclose(plain, shuffled) and not torch.allclose(plain, cut)
    torch.testing.assert_close(plain, again)  # the hook is removed afterwards
    assert torch.equal(features["input_ids"],
                       encoder.tokenize(["A man is playing a guitar on stage.", "Dogs run."], 32)["input_ids"])


def test_fgv_perturbation_has_the_given_norm_along_each_tokens_gradient():
    torch.manual_seed(1)
    gradient = torch.randn(2, 3, 5, dtype=torch.float64)
    gradient[1, 2] = 0.0  # a token the loss does not depend on gets no perturbation
    out = fgv_perturbation(gradient, 0.5)
    for i in range(2):
        for t in range(3):
            g = gradient[i, t]
            norm = sum(float(x) ** 2 for x in g) ** 0.5
            expected = torch.zeros(5, dtype=torch.float64) if norm == 0 else 0.5 * g / norm
            torch.testing.assert_close(out[i, t], expected)


def test_embedding_transform_replaces_what_the_first_layer_reads(tiny_bert):
    encoder = SentenceEncoder.from_pretrained(tiny_bert).eval()
    features = encoder.tokenize(["A man is playing a guitar.", "Dogs run."], 32)
    noise = torch.full((2, features["input_ids"].shape[1], 32), 0.3)
    with torch.no_grad():
        plain = encoder.hidden_states(features)
        moved = hidden_states_with_embedding_transform(encoder, features, lambda output: output + noise)
        again = encoder.hidden_states(features)
    torch.testing.assert_close(moved[0], plain[0] + noise)
    assert not torch.allclose(moved[-1], plain[-1])
    torch.testing.assert_close(again[-1], plain[-1])  # the hook is removed afterwards


def _one_by_one(kind: str, embeddings: torch.Tensor, mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Each augmentation written sentence by sentence with in-place erasing, drawing as the vectorised one must."""
    out = embeddings.clone()
    dim = embeddings.shape[-1]
    for i, length in enumerate(mask.sum(1).tolist()):
        if kind == "token_cutoff":
            out[i, torch.randperm(length)[: int(length * rate)]] = 0.0
        elif kind == "feature_cutoff":
            out[i, :, torch.randperm(dim)[: int(dim * rate)]] = 0.0
        elif kind == "dropout":
            flat = out[i, :length].reshape(-1)
            flat[torch.randperm(length * dim)[: int(length * dim * rate)]] = 0.0
            out[i, :length] = flat.view(length, dim)
        else:
            span = int(length * rate)
            start = int(torch.randint(length - span + 1, ()))
            out[i, start : start + span] = 0.0
    return out


@pytest.mark.parametrize("augmentation", [token_cutoff, feature_cutoff, dropout, span_cutoff])
def test_each_augmentation_is_its_sentence_by_sentence_version_bit_for_bit(embeddings, augmentation):
    """Same seed, same draws, same values and the same gradient as the in-place loop they replaced."""
    results = []
    by_sentence = lambda x: _one_by_one(augmentation.__name__, x, MASK, 0.3)  # noqa: E731
    for compute in (lambda x: erased(x, augmentation(x.shape, LENGTHS, 0.3)), by_sentence):
        torch.manual_seed(11)
        x = embeddings.clone().requires_grad_(True)
        out = compute(x)
        (out * torch.arange(out.numel()).view_as(out)).sum().backward()
        results.append((out.detach(), x.grad))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert (results[0][0] == 0).any()


@pytest.mark.parametrize("family, pad", [("bert", 0), ("roberta", 1)])
def test_shuffle_draws_the_permutations_of_its_sentence_by_sentence_version(family, pad):
    torch.manual_seed(5)
    got = shuffled_position_ids(LENGTHS, MASK.shape[1], FAMILIES[family], pad)
    torch.manual_seed(5)
    first = FAMILIES[family].first_position(pad)
    expected = torch.arange(first, first + MASK.shape[1]).repeat(len(MASK), 1)
    if FAMILIES[family].positions_after_padding:
        expected[MASK == 0] = pad
    for i, length in enumerate(MASK.sum(1).tolist()):
        expected[i, :length] = first + torch.randperm(length)
    assert torch.equal(got, expected)
