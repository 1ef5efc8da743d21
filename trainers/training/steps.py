"""How many examples a stage trains on and how many steps that makes: what the loop runs and what
``sweep plan`` and its regime warnings count, written once (no torch, so the plan answers at once)."""

from __future__ import annotations

import random
from typing import Any, Sequence

from trainers.method import Config, Stage


def load_examples(stage: Stage, config: Config) -> Sequence[Any]:
    """The stage's training examples, limited to ``train_limit`` of them: the first, or a sample drawn with
    the trial's seed (``train_subset``), repeated to the whole set's size by ``train_subset_repeat``."""
    examples = stage.examples(config)
    limit = config["train_limit"]
    if not limit or limit >= len(examples):
        return examples
    if config["train_subset"] == "random":  # in corpus order: the loop shuffles each epoch itself
        subset = [examples[i] for i in sorted(random.Random(config["seed"]).sample(range(len(examples)), limit))]
    else:
        subset = list(examples[:limit])
    return subset * (len(examples) // limit) if config["train_subset_repeat"] else subset


def total_steps(config: Config, n_examples: int) -> int:
    full, rest = divmod(n_examples, config["batch_size"])
    per_epoch = full + (rest > 1 or (rest == 1 and full == 0))  # as optimization.batches cuts an epoch
    steps = per_epoch * config["epochs"]
    return min(steps, config["max_steps"]) if config["max_steps"] else steps
