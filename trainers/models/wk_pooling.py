"""SBERT-WK pooling (Wang & Kuo 2020, "SBERT-WK: A Sentence Embedding Method by Dissecting BERT-based
Word Models", Section IV): sentence vectors from all the layers of an untrained encoder.

Each token's vector fuses the hidden states of layers ``layer_start`` .. L (index 0 = the embeddings). For
layer k, a window of its neighbouring layers (up to ``window`` on each side) and the layer itself form a
matrix whose QR decomposition gives two weights: *alignment* (how well the layer agrees with its context,
the inverse of the mean projection coefficient) and *novelty* (the share of the layer orthogonal to its
context). The sentence vector weights each token by its *importance*: the variance across layers of the
cosine similarity between consecutive layers of that token.

Details follow the authors' code (github.com/BinWang28/SBERT-WK-Sentence-Embedding, ``utils.py``,
``generate_embedding.dissecting``), where the paper leaves them open:

- the tokens pooled are the first n-1 of a sentence's n: [CLS] is kept, the last one ([SEP]) is not;
- layer k's left window is numpy's slice ``[k - window : k]``, which is *empty* while k < window (a negative
  start wraps around), not cut at layer 0; the right window is cut at the last layer;
- alignment is ``1 / (2 m * mean_j(R[:-1, j] / |R[:-1, j]|) . R[:-1, -1] / |R[:-1, -1]|)`` for the window's
  m vectors; alignment, novelty and their sum are each normalised to sum to one over the layers;
- token importance is the population variance of the consecutive-layer cosines, normalised over the tokens.

This module imports nothing but torch: an exported encoder carries it (:mod:`trainers.models.sentence_modules`).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

TINY = 1e-12  # keeps a degenerate sentence (one token, no variance) finite; far below any real weight


def layer_window(k: int, window: int, n_layers: int) -> list[int]:
    """The layers whose QR decomposition weighs layer k: its left and right neighbours, then k itself."""
    left = list(range(k - window, k)) if k >= window else []
    right = list(range(k + 1, min(k + window + 1, n_layers)))
    return left + right + [k]


def layer_weights(layers: Tensor, window: int) -> Tensor:
    """Each token's weights over layers ``[..., n_layers]`` from its layer vectors ``[..., n_layers, dim]``:
    the normalised sum of alignment and novelty (Eq. 9-12 of the paper, as the authors' code computes them)."""
    n_layers = layers.shape[-2]
    alignment, novelty = [], []
    for k in range(n_layers):
        indices = layer_window(k, window, n_layers)
        _, r = torch.linalg.qr(layers[..., indices, :].transpose(-1, -2))  # r: [..., m, m]
        context, own = r[..., :-1, :-1], r[..., :-1, -1]
        columns = context / context.norm(dim=-2, keepdim=True).clamp_min(TINY)
        projection = (columns.mean(-1) * own).sum(-1) / own.norm(dim=-1).clamp_min(TINY)
        alignment.append(1 / (projection * len(indices) * 2))
        novelty.append(r[..., -1, -1].abs() / r[..., :, -1].norm(dim=-1))
    alignment_weights = torch.stack(alignment, -1)
    novelty_weights = torch.stack(novelty, -1)
    alpha = (alignment_weights / alignment_weights.sum(-1, keepdim=True)
             + novelty_weights / novelty_weights.sum(-1, keepdim=True))
    return alpha / alpha.sum(-1, keepdim=True)


def token_importance(layers: Tensor) -> Tensor:
    """Population variance over layers of the cosine between consecutive layers: ``[..., n_layers, dim]`` ->
    ``[...]``."""
    cosines = torch.nn.functional.cosine_similarity(layers[..., :-1, :], layers[..., 1:, :], dim=-1, eps=1e-8)
    return cosines.var(-1, unbiased=False)


def wk_pool(hidden_states: Sequence[Tensor], attention_mask: Tensor, window: int, layer_start: int) -> Tensor:
    """SBERT-WK sentence vectors ``[batch, dim]`` from all hidden states (each ``[batch, tokens, dim]``,
    index 0 = embeddings) of right-padded sentences, as float32. Computed in float64: consecutive layers can be
    nearly parallel (cosines of 0.9999 in a small random BERT), where float32's QR loses the weights' digits."""
    layers = torch.stack([state.double() for state in hidden_states[layer_start:]], dim=2)  # [batch, tokens, n, dim]
    if layers.shape[2] <= max(window, 2):  # the top layer's context; a variance over two cosines at least
        raise ValueError(f"WK pooling with window {window} fuses at least {max(window, 2) + 1} hidden states; "
                         f"layer_start {layer_start} leaves {layers.shape[2]} of {len(hidden_states)}")
    tokens = (layer_weights(layers, window).unsqueeze(-1) * layers).sum(2)  # [batch, tokens, dim]
    lengths = attention_mask.sum(1, keepdim=True)
    pooled = torch.arange(attention_mask.shape[1], device=attention_mask.device) < lengths - 1  # [SEP] left out
    importance = token_importance(layers) * pooled
    importance = importance / importance.sum(1, keepdim=True).clamp_min(TINY)
    return (importance.unsqueeze(-1) * tokens).sum(1).float()
