"""Unsupervised SimCSE (Gao et al. 2021): dropout noise is the augmentation.

Each sentence is encoded twice in training mode; the two dropout masks give
two views, and in-batch InfoNCE pulls them together. Defaults are the paper's
unsupervised BERT-base setting: temperature 0.05, batch 64, lr 3e-5, max
length 32, [CLS] with an MLP on top during training only.
"""

from __future__ import annotations

from trainers.knobs import Knob, KnobSet
from trainers.method import Method, single_stage


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
    stages=single_stage("trainers.objectives.simcse:SimCSEObjective"),
)
