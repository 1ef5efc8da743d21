"""Unsupervised SimCSE's objective (declared in :mod:`trainers.methods.simcse`)."""

from __future__ import annotations

from typing import Any, Sequence

from torch import Tensor, nn

from trainers.data import BT_COLUMNS
from trainers.encoder import SentenceEncoder
from trainers.losses.contrastive import info_nce
from trainers.method import Config
from trainers.objective import Objective


class SimCSEObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        hidden = encoder.model.config.hidden_size
        # SimCSE's MLP pooler (a dense layer with tanh), used in training only.
        self.head = (nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) if config["mlp_during_training"]
                     else nn.Identity())
        self.temperature = config["temperature"]
        self.max_length = config["max_seq_length"]
        # Column of a back-translation row that is the positive (None: the sentence itself).
        self.positive = BT_COLUMNS.index(config["positive"]) if config["positive"] in BT_COLUMNS else None

    def loss(self, batch: Sequence[Any]) -> Tensor:
        if self.positive is None:
            sentences, positives = list(batch), list(batch)
        else:
            sentences, positives = [row[0] for row in batch], [row[self.positive] for row in batch]
        # One forward pass over both halves, so that each copy gets its own dropout mask.
        features = self.encoder.tokenize(sentences + positives, self.max_length)
        views = self.head(self.encoder(features))
        first, second = views.chunk(2)
        return info_nce(first, second, self.temperature)
