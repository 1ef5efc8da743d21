"""Token-level augmentations on the embedding layer (ConSERT, Yan et al. 2021, Section 3.2).

Each transformation is a pure function of the embedding-layer output
``[batch, tokens, dim]`` and each row's count of real tokens (the host's count,
:class:`~trainers.models.batches.TokenBatch`: nothing is read back from the
device), except ``shuffle``, which permutes position ids. Erased counts follow the authors'
implementation: int(n x rate) of the n candidates of each sentence, where the
candidates are its real tokens (rows), its feature dimensions (columns), or
its real-token elements (dropout). Padding is never touched. Randomness comes
from torch's global generator, which the training loop seeds. As in the
authors' code, the transformations act on the embedding layer's output (word +
position + token-type embeddings after LayerNorm), the input of the first
transformer layer. ``fgv_perturbation`` (adversarial attack) needs the
gradient of a supervised loss, so it is not among the name -> function
registries; ConSERT's joint training uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

from trainers.common_knobs import RATE_KNOBS
from trainers.models.batches import TokenBatch
from trainers.models.pretrained import ModelFamily

if TYPE_CHECKING:
    from trainers.models.encoder import SentenceEncoder

EmbeddingAugmentation = Callable[[Tensor, Sequence[int], float], Tensor]
"""(embedding-layer output, each row's count of real tokens, rate) -> the transformed output."""


def _erased(embeddings: Tensor, erase: Tensor) -> Tensor:
    """``embeddings`` with the elements ``erase`` marks set to 0.0 (``erase`` broadcasts; drawn on the host and
    sent in one copy: a sentence-by-sentence loop on a GPU is hundreds of launches a step)."""
    return embeddings.masked_fill(erase.to(embeddings.device, non_blocking=True), 0.0)


def _subset_mask(n: int, rate: float) -> Tensor:
    """int(n x rate) of n places, drawn by ``torch.randperm`` on the CPU's generator."""
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.randperm(n)[: int(n * rate)]] = True
    return mask


def token_cutoff(embeddings: Tensor, lengths: Sequence[int], rate: float) -> Tensor:
    """Erase int(len x rate) whole token rows of each sentence's real tokens."""
    erase = torch.zeros(embeddings.shape[:2], dtype=torch.bool)
    for i, length in enumerate(lengths):
        erase[i, :length] = _subset_mask(length, rate)
    return _erased(embeddings, erase.unsqueeze(-1))


def feature_cutoff(embeddings: Tensor, lengths: Sequence[int], rate: float) -> Tensor:
    """Erase int(dim x rate) whole feature columns of each sentence."""
    erase = torch.stack([_subset_mask(embeddings.shape[-1], rate) for _ in range(len(embeddings))])
    return _erased(embeddings, erase.unsqueeze(1))


def dropout(embeddings: Tensor, lengths: Sequence[int], rate: float) -> Tensor:
    """Zero int(len x dim x rate) single elements among each sentence's real tokens
    (no rescaling, unlike nn.Dropout: the authors' 'random cutoff')."""
    erase = torch.zeros(embeddings.shape, dtype=torch.bool)
    dim = embeddings.shape[-1]
    for i, length in enumerate(lengths):
        erase[i, :length] = _subset_mask(length * dim, rate).view(length, dim)
    return _erased(embeddings, erase)


def span_cutoff(embeddings: Tensor, lengths: Sequence[int], rate: float) -> Tensor:
    """Erase one contiguous span of int(len x rate) real tokens, at a random start.

    This is Shen et al.'s span cutoff as the ConSERT paper describes cutoff
    (erased rows of the L x d matrix). The authors' code has a different,
    unpublished 'span' option that keeps only a span of (1 - rate) of the
    tokens and masks the rest out of attention; it is not reproduced here."""
    erase = torch.zeros(embeddings.shape[:2], dtype=torch.bool)
    for i, length in enumerate(lengths):
        span = int(length * rate)
        start = int(torch.randint(length - span + 1, ()))
        erase[i, start : start + span] = True
    return _erased(embeddings, erase.unsqueeze(-1))


def no_augmentation(embeddings: Tensor, lengths: Sequence[int], rate: float) -> Tensor:
    return embeddings


def shuffled_position_ids(lengths: Sequence[int], width: int, family: ModelFamily, pad_token_id: int) -> Tensor:
    """Position ids, on the host, of rows of ``width`` tokens whose first ``lengths`` are real, with each row's
    real tokens permuted (token shuffle); token ids are untouched.

    The positions are those the model gives itself when it is given none (``family``): BERT's count from 0
    over every token; RoBERTa's count from pad_token_id + 1 over the real tokens and give padding
    pad_token_id. Padding keeps its position either way. The permutations are drawn on the CPU's generator."""
    first = family.first_position(pad_token_id)
    positions = torch.arange(first, first + width).repeat(len(lengths), 1)
    for i, length in enumerate(lengths):
        positions[i, :length] = first + torch.randperm(length)
        if family.positions_after_padding:
            positions[i, length:] = pad_token_id
    return positions


EMBEDDING_AUGMENTATIONS: dict[str, EmbeddingAugmentation] = {
    "none": no_augmentation,
    "token_cutoff": token_cutoff,
    "feature_cutoff": feature_cutoff,
    "dropout": dropout,
    "span_cutoff": span_cutoff,
}
"""The transformations of the embedding-layer output, by the names of ``common_knobs.AUGMENTATIONS``
(``shuffle`` permutes position ids instead)."""


def augmentation_rates(config: Mapping[str, Any]) -> dict[str, float]:
    """Augmentation name -> its rate, from the ``RATE_KNOBS`` of a resolved config."""
    return {knob.name.removesuffix("_rate"): config[knob.name] for knob in RATE_KNOBS}


def fgv_perturbation(gradient: Tensor, norm: float) -> Tensor:
    """Fast Gradient Value (Rozsa et al. 2016; ConSERT Section 3.2, adversarial attack):
    the perturbation ``norm * g / ||g||_2`` of each token's vector, where g is the
    gradient of a loss with respect to the embedding-layer output ``[batch, tokens, dim]``.
    Detached: the perturbation is an input, not a path for gradients."""
    gradient = gradient.detach()
    return norm * gradient / (gradient.norm(dim=-1, keepdim=True) + 1e-10)


def hidden_states_with_embedding_transform(
    encoder: "SentenceEncoder", features: TokenBatch, transform: Callable[[Tensor], Tensor]
) -> tuple[Tensor, ...]:
    """All hidden states of ``encoder`` with its embedding-layer output replaced by
    ``transform(output)``, through a forward hook, so the encoder itself is used unchanged.
    Index 0 of the result is the transformed output that the first layer reads."""
    hook = encoder.model.embeddings.register_forward_hook(lambda module, inputs, output: transform(output))
    try:
        return encoder.hidden_states(features)
    finally:
        hook.remove()


def augmented_hidden_states(
    encoder: "SentenceEncoder", features: TokenBatch, augmentation: str, rate: float
) -> tuple[Tensor, ...]:
    """All hidden states of ``encoder`` with ``augmentation`` applied at the embedding layer
    (``shuffle`` passes permuted position ids instead, sent to the device in one copy)."""
    if augmentation == "shuffle":
        width, pad_token_id = features["input_ids"].shape[1], encoder.model.config.pad_token_id
        positions = shuffled_position_ids(features.lengths, width, encoder.family, pad_token_id)
        return encoder.hidden_states(features, position_ids=positions.to(encoder.device, non_blocking=True))
    transform = EMBEDDING_AUGMENTATIONS[augmentation]
    return hidden_states_with_embedding_transform(encoder, features,
                                                  lambda output: transform(output, features.lengths, rate))
