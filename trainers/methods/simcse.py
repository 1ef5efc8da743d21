"""Unsupervised SimCSE (Gao et al. 2021): dropout noise is the augmentation.

Each sentence is encoded twice in training mode; the two dropout masks give
two views, and in-batch InfoNCE pulls them together. Defaults are the paper's
unsupervised BERT-base setting: temperature 0.05, batch 64, lr 3e-5, max
length 32, [CLS] with an MLP on top during training only.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from trainers.encoder import SentenceEncoder
from trainers.knobs import Knob, KnobSet
from trainers.losses.contrastive import info_nce
from trainers.method import Config, Method, Objective, single_stage


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


METHOD = Method(
    name="simcse",
    summary="Unsupervised SimCSE: two dropout views of each sentence, in-batch InfoNCE.",
    knobs=KnobSet(
        (
            Knob("temperature", float, 0.05, "Temperature tau of the InfoNCE loss.", low=1e-4, high=10.0),
            Knob("mlp_during_training", bool, True, "Put SimCSE's dense+tanh head on the pooled vector in training "
                 "(evaluation never uses it)."),
        )
    ),
    defaults={"batch_size": 64, "learning_rate": 3e-5, "max_seq_length": 32, "pooling": "cls", "eval_every": 125},
    stages=single_stage(SimCSEObjective),
)
