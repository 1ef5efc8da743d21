"""Unsupervised SimCSE's objective (declared in :mod:`trainers.methods.simcse`)."""

from __future__ import annotations

from typing import Any, Sequence

from torch import Tensor, nn

from trainers.data.sources import BT_COLUMNS
from trainers.losses.contrastive import info_nce
from trainers.method import Config
from trainers.models.batches import TokenBatch
from trainers.models.encoder import SentenceEncoder
from trainers.objectives.base import Objective


class SimCSEObjective(Objective):
    """SimCSE's two views and InfoNCE; DCLR and DiffCSE build on its views (:meth:`encode_views`)."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        self.head = self.training_head(config, encoder)
        self.temperature = config["temperature"]
        self.max_length = config["max_seq_length"]
        self.to_max_length = config.get("pad_to_max_length", False)  # SimCSE's and DCLR's knob, not DiffCSE's
        # Column of a back-translation row that is the positive (None: the sentence itself).
        self.positive = BT_COLUMNS.index(config["positive"]) if config["positive"] in BT_COLUMNS else None

    def training_head(self, config: Config, encoder: SentenceEncoder) -> nn.Module:
        """SimCSE's MLP pooler (a dense layer with tanh), used in training only, initialised as BERT's layers
        (princeton-nlp/SimCSE models.py: ``cls_init`` then ``init_weights``; DCLR's the same)."""
        if not config["mlp_during_training"]:
            return nn.Identity()
        width = encoder.model.config.hidden_size
        return nn.Sequential(encoder.new_linear(width, width), nn.Tanh())

    def texts(self, batch: Sequence[Any]) -> tuple[list[str], list[str]]:
        """The batch's sentences and their positives."""
        if self.positive is None:
            return list(batch), list(batch)
        return [row[0] for row in batch], [row[self.positive] for row in batch]

    def inputs(self, batch: Sequence[Any]) -> TokenBatch:
        """The step's host work: the batch's sentences followed by their positives, tokenised and sent."""
        sentences, positives = self.texts(batch)
        # One forward pass over both halves, so that each copy gets its own dropout mask.
        return self.encoder.tokenize(sentences + positives, self.max_length, self.to_max_length)

    def encode_views(self, batch: Sequence[Any]) -> tuple[TokenBatch, Tensor]:
        """The tokenised sentences followed by their positives, and their vectors through the head."""
        features = self.inputs(batch)
        return features, self.head(self.encoder(features))

    def device_loss(self, features: TokenBatch) -> Tensor:
        """The loss of a batch :meth:`inputs` made, from the device's tensors alone: what a CUDA graph of the
        step records (:mod:`trainers.training.graphs`)."""
        first, second = self.head(self.encoder(features)).chunk(2)
        return info_nce(first, second, self.temperature)

    def loss(self, batch: Sequence[Any]) -> Tensor:
        return self.device_loss(self.inputs(batch))
