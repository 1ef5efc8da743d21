"""Pooling: token vectors (every hidden state of a transformer) -> one vector per sentence.

The rules are the knob ``pooling``'s (:data:`~trainers.common_knobs.POOLINGS`). All but ``pooler`` are functions
of the hidden states and the mask (:func:`pool`); ``pooler`` is the model's own pooler (:func:`model_pooler`),
which has weights.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from trainers.common_knobs import COMMON_KNOBS
from trainers.models.pretrained import names_a_pooler
from trainers.models.wk_pooling import wk_pool

SINGLE_LAYER_POOLINGS = ("cls", "mean", "max")
WK_DEFAULTS = (COMMON_KNOBS["wk_window"].default, COMMON_KNOBS["wk_layer_start"].default)
"""(window, first layer) of WK pooling where no config gives them (an SCT teacher, an analysis): the knobs'."""
RANDOM_POOLER = "random_pooler"
"""The attribute :func:`mark_random_pooler` sets on a loaded model (copies keep it)."""


def masked_mean(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def masked_max(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    mask = attention_mask.unsqueeze(-1).bool()
    return hidden.masked_fill(~mask, torch.finfo(hidden.dtype).min).amax(1)


def pool_layer(hidden: Tensor, attention_mask: Tensor, pooling: str) -> Tensor:
    """Pool one layer's token vectors ``[batch, tokens, dim]`` into ``[batch, dim]``."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        return masked_mean(hidden, attention_mask)
    if pooling == "max":
        return masked_max(hidden, attention_mask)
    raise ValueError(f"pooling {pooling!r} is not a single-layer pooling; expected one of {SINGLE_LAYER_POOLINGS}")


def pool(hidden_states: Sequence[Tensor], attention_mask: Tensor, pooling: str, layer: int = -1,
         wk: tuple[int, int] = WK_DEFAULTS) -> Tensor:
    """Sentence vectors from all hidden states (index 0 = embeddings, L = last layer).

    ``first_last_avg`` averages the first transformer layer and the last one
    before mean pooling, ``last2avg`` the last two (SimCSE's and ConSERT's
    evaluation poolings); both ignore ``layer``. ``cls``/``mean``/``max`` pool
    the single layer ``layer`` (Python indexing, so -1 is the last). ``wk`` is
    SBERT-WK's fusion of hidden states ``wk[1]``.. with window ``wk[0]``
    (:mod:`trainers.models.wk_pooling`).
    """
    if pooling == "wk":
        return wk_pool(hidden_states, attention_mask, *wk)
    if pooling == "first_last_avg":
        return masked_mean((hidden_states[1] + hidden_states[-1]) / 2, attention_mask)
    if pooling == "last2avg":
        return masked_mean((hidden_states[-2] + hidden_states[-1]) / 2, attention_mask)
    return pool_layer(hidden_states[layer], attention_mask, pooling)


def model_pooler(model: PreTrainedModel) -> nn.Module:
    """The model's own pooler, what pooling ``pooler`` applies to a layer's token vectors: BERT's and RoBERTa's
    dense layer with tanh over [CLS] (Hugging Face's ``pooler_output``; in a SimCSE release, SimCSE's trained MLP,
    which its conversion script renames ``pooler``)."""
    pooler = getattr(model, "pooler", None)
    if pooler is None:
        raise ValueError(f"pooling 'pooler' is the model's own pooler output, and this {model.config.model_type} "
                         "model has none: choose another pooling")
    if getattr(model, RANDOM_POOLER, False):
        raise ValueError("pooling 'pooler' is the model's own trained pooler, and this model's checkpoint holds "
                         "none: Hugging Face drew its pooler at random. Choose another pooling")
    return pooler


def mark_random_pooler(model: PreTrainedModel, missing_weights: Iterable[str]) -> None:
    """Mark a model whose pooler ``from_pretrained`` drew at random, its weights missing from the checkpoint: the
    pooler still trains in a GLUE head (as Hugging Face's classifiers train it), but pooling 'pooler' refuses it."""
    setattr(model, RANDOM_POOLER, any(names_a_pooler(name) for name in missing_weights))
