"""Token-level augmentations on the embedding layer (ConSERT, Yan et al. 2021, Section 3.2).

Each erasure draws, on the host, the elements of the embedding-layer output
``[batch, tokens, dim]`` to zero, from its shape and each row's count of real tokens (the host's count,
:class:`~trainers.models.batches.TokenBatch`: nothing is read back from the
device); ``shuffle`` draws permuted position ids instead. The draw is sent to the device and applied
there (:func:`drawn_augmentation`, then :func:`augmented_states`). Erased counts follow the authors'
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
from trainers.models.batches import TokenBatch, host_to_device
from trainers.models.pretrained import ModelFamily

if TYPE_CHECKING:
    from trainers.models.encoder import SentenceEncoder

Erasure = Callable[[torch.Size, Sequence[int], float], Tensor]
"""(embedding-layer output's shape ``[batch, tokens, dim]``, each row's count of real tokens, rate) -> the
elements to erase: a bool mask drawn on the host that broadcasts to the shape (sent in one copy: a
sentence-by-sentence loop on a GPU is hundreds of launches a step)."""


def erased(embeddings: Tensor, erase: Tensor) -> Tensor:
    """``embeddings`` with the elements ``erase`` marks (an :data:`Erasure`'s mask, on their device) set to 0.0."""
    return embeddings.masked_fill(erase, 0.0)


def _subset_mask(n: int, rate: float) -> Tensor:
    """int(n x rate) of n places, drawn by ``torch.randperm`` on the CPU's generator."""
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.randperm(n)[: int(n * rate)]] = True
    return mask


def token_cutoff(shape: torch.Size, lengths: Sequence[int], rate: float) -> Tensor:
    """Erase int(len x rate) whole token rows of each sentence's real tokens."""
    erase = torch.zeros(shape[:2], dtype=torch.bool)
    for i, length in enumerate(lengths):
        erase[i, :length] = _subset_mask(length, rate)
    return erase.unsqueeze(-1)


def feature_cutoff(shape: torch.Size, lengths: Sequence[int], rate: float) -> Tensor:
    """Erase int(dim x rate) whole feature columns of each sentence."""
    return torch.stack([_subset_mask(shape[-1], rate) for _ in range(shape[0])]).unsqueeze(1)


def dropout(shape: torch.Size, lengths: Sequence[int], rate: float) -> Tensor:
    """Zero int(len x dim x rate) single elements among each sentence's real tokens
    (no rescaling, unlike nn.Dropout: the authors' 'random cutoff')."""
    erase = torch.zeros(shape, dtype=torch.bool)
    dim = shape[-1]
    for i, length in enumerate(lengths):
        erase[i, :length] = _subset_mask(length * dim, rate).view(length, dim)
    return erase


def span_cutoff(shape: torch.Size, lengths: Sequence[int], rate: float) -> Tensor:
    """Erase one contiguous span of int(len x rate) real tokens, at a random start.

    This is Shen et al.'s span cutoff as the ConSERT paper describes cutoff
    (erased rows of the L x d matrix). The authors' code has a different,
    unpublished 'span' option that keeps only a span of (1 - rate) of the
    tokens and masks the rest out of attention; it is not reproduced here."""
    erase = torch.zeros(shape[:2], dtype=torch.bool)
    for i, length in enumerate(lengths):
        span = int(length * rate)
        start = int(torch.randint(length - span + 1, ()))
        erase[i, start : start + span] = True
    return erase.unsqueeze(-1)


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


ERASURES: dict[str, Erasure] = {
    "token_cutoff": token_cutoff,
    "feature_cutoff": feature_cutoff,
    "dropout": dropout,
    "span_cutoff": span_cutoff,
}
"""The erasures of the embedding-layer output, by the names of ``common_knobs.AUGMENTATIONS`` (``shuffle``
permutes position ids instead, and ``none`` leaves the output as it is)."""


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


def drawn_augmentation(encoder: "SentenceEncoder", features: TokenBatch, augmentation: str,
                       rate: float) -> Tensor | None:
    """The random part of ``augmentation`` for the batch ``features``, drawn on the host and sent to the
    encoder's device: shuffle's position ids, an erasure's mask; None for ``none``. Drawn apart from its use
    (:func:`augmented_states`), so that a step can draw every view's part before it computes on the device (a CUDA
    graph of the step replays the computing on each batch's draws, :mod:`trainers.training.graphs`)."""
    if augmentation == "none":
        return None
    if augmentation == "shuffle":
        width, pad_token_id = features["input_ids"].shape[1], encoder.model.config.pad_token_id
        drawn = shuffled_position_ids(features.lengths, width, encoder.family, pad_token_id)
    else:
        shape = torch.Size((*features["input_ids"].shape, encoder.model.config.hidden_size))
        drawn = ERASURES[augmentation](shape, features.lengths, rate)
    return host_to_device(drawn, encoder.device)


def augmented_states(encoder: "SentenceEncoder", features: TokenBatch, augmentation: str,
                     drawn: Tensor | None) -> tuple[Tensor, ...]:
    """All hidden states of ``encoder`` with ``augmentation`` applied at the embedding layer, from its
    :func:`drawn_augmentation`: ``shuffle`` passes the permuted position ids, an erasure zeroes the output's
    marked elements; on the device alone."""
    if augmentation == "shuffle":
        return encoder.hidden_states(features, position_ids=drawn)
    if drawn is None:
        return encoder.hidden_states(features)
    return hidden_states_with_embedding_transform(encoder, features, lambda output: erased(output, drawn))


def augmented_hidden_states(
    encoder: "SentenceEncoder", features: TokenBatch, augmentation: str, rate: float
) -> tuple[Tensor, ...]:
    """All hidden states of ``encoder`` with ``augmentation`` at ``rate`` drawn and applied at the embedding layer."""
    return augmented_states(encoder, features, augmentation, drawn_augmentation(encoder, features, augmentation, rate))
