"""How many examples a stage trains on and how many steps that makes: what the loop runs and what
``sweep plan`` and its regime warnings count, written once (no torch, so the plan answers at once)."""

from __future__ import annotations

from typing import Any, Sequence

from trainers.method import Config, Stage


def load_examples(stage: Stage, config: Config) -> Sequence[Any]:
    examples = stage.examples(config)
    return examples[: config["train_limit"]] if config["train_limit"] else examples


def total_steps(config: Config, n_examples: int) -> int:
    full, rest = divmod(n_examples, config["batch_size"])
    per_epoch = full + (rest > 1 or (rest == 1 and full == 0))  # as trainers.optimization.batches cuts an epoch
    steps = per_epoch * config["epochs"]
    return min(steps, config["max_steps"]) if config["max_steps"] else steps
