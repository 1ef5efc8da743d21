"""Unsupervised SimCSE's objective (declared in :mod:`trainers.methods.simcse`)."""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from trainers.encoder import SentenceEncoder
from trainers.losses.contrastive import info_nce
from trainers.method import Config
from trainers.objective import Objective


class SimCSEObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        hidden = encoder.model.config.hidden_size
        # SimCSE's MLP pooler (a dense layer with tanh), used in training only.
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) if config["mlp_during_training"] else nn.Identity()
        self.temperature = config["temperature"]
        self.max_length = config["max_seq_length"]

    def loss(self, batch: Sequence[str]) -> Tensor:
        # One forward pass over the batch twice over, so the two copies of each
        # sentence get independent dropout masks.
        features = self.encoder.tokenize(list(batch) * 2, self.max_length)
        views = self.head(self.encoder(features))
        first, second = views.chunk(2)
        return info_nce(first, second, self.temperature)
