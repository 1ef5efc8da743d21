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


def shortest_batch(batch_size: int, last_batch: str) -> int:
    """The fewest examples an epoch's trailing batch may hold and be trained, unless it is the whole corpus: all
    of them where ``last_batch`` is 'drop', else two (one example has no in-batch negatives)."""
    return batch_size if last_batch == "drop" else 2


def epoch_steps(batch_size: int, n_examples: int, last_batch: str) -> int:
    """Steps in one epoch, as :func:`trainers.training.optimization.batches` cuts it (:func:`shortest_batch`)."""
    full, rest = divmod(n_examples, batch_size)
    return full + (rest > 0 and (full == 0 or rest >= shortest_batch(batch_size, last_batch)))


def total_steps(config: Config, n_examples: int) -> int:
    steps = epoch_steps(config["batch_size"], n_examples, config["last_batch"]) * config["epochs"]
    return min(steps, config["max_steps"]) if config["max_steps"] else steps


def evaluations_after(stage_step: int, batch_in_epoch: int, epoch_length: int, steps: int, eval_every: int,
                      grid: str) -> list[bool]:
    """The dev evaluations due after the stage's step ``stage_step`` (of ``steps``), the epoch's
    ``batch_in_epoch``-th of ``epoch_length``, each as whether it is an epoch's end one (what the early-stopping
    rules count apart); empty when none is. ``grid`` 'stage': every ``eval_every`` steps of the stage and after
    its last. 'trainer': as Hugging Face's Trainer, every ``eval_every`` steps of the stage alone, and after its
    last step only where no evaluation came before (a stage shorter than ``eval_every``: its one state, scored).
    'epoch': as sentence-transformers' ``fit()``, every ``eval_every`` steps counted from the epoch's start, and
    after the epoch's last step (where both fall on one step ``fit()`` evaluates twice, so both are returned: the
    loop scores the state once and counts it twice); and after the stage's last step where ``max_steps`` ends it
    inside an epoch."""
    on_grid = stage_step % eval_every == 0
    if grid == "stage":
        return [False] if on_grid or stage_step == steps else []
    if grid == "trainer":
        return [False] if on_grid or stage_step == steps < eval_every else []
    due = [False] if batch_in_epoch % eval_every == 0 else []
    if batch_in_epoch == epoch_length:
        due.append(True)
    return due or ([False] if stage_step == steps else [])


def planned_evaluations(config: Config, n_examples: int) -> int:
    """The dev evaluations a stage of ``n_examples`` scores if it does not stop early: the steps on which
    :func:`evaluations_after` falls (a step where two fall is scored once)."""
    steps, epoch_length = total_steps(config, n_examples), epoch_steps(config["batch_size"], n_examples,
                                                                        config["last_batch"])
    return sum(bool(evaluations_after(step, (step - 1) % epoch_length + 1, epoch_length, steps,
                                      config["eval_every"], config["eval_grid"]))
               for step in range(1, steps + 1))
