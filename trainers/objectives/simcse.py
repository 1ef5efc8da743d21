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
        self.head = self.training_head(config, encoder.model.config.hidden_size)
        self.temperature = config["temperature"]
        self.max_length = config["max_seq_length"]
        # Column of a back-translation row that is the positive (None: the sentence itself).
        self.positive = BT_COLUMNS.index(config["positive"]) if config["positive"] in BT_COLUMNS else None

    def training_head(self, config: Config, width: int) -> nn.Module:
        """SimCSE's MLP pooler (a dense layer with tanh), used in training only."""
        return nn.Sequential(nn.Linear(width, width), nn.Tanh()) if config["mlp_during_training"] else nn.Identity()

    def texts(self, batch: Sequence[Any]) -> tuple[list[str], list[str]]:
        """The batch's sentences and their positives."""
        if self.positive is None:
            return list(batch), list(batch)
        return [row[0] for row in batch], [row[self.positive] for row in batch]

    def encode_views(self, batch: Sequence[Any]) -> tuple[TokenBatch, Tensor]:
        """The tokenised sentences followed by their positives, and their vectors through the head."""
        sentences, positives = self.texts(batch)
        # One forward pass over both halves, so that each copy gets its own dropout mask.
        features = self.encoder.tokenize(sentences + positives, self.max_length)
        return features, self.head(self.encoder(features))

    def loss(self, batch: Sequence[Any]) -> Tensor:
        first, second = self.encode_views(batch)[1].chunk(2)
        return info_nce(first, second, self.temperature)
