"""The one training loop every method runs through.

``run_trial(config, reporter)`` resolves the config against the method's
knobs, loads encoder, data and evaluator, trains the method's objective (if it
has one) with evaluation on STS-B dev every ``eval_every`` steps, early
stopping and best-state keeping, and finally evaluates the *best* state on the
seven test sets. Every evaluation and the final figures go to ``reporter``:
``ray.tune.report`` inside a sweep, a plain function in tests and scripts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup, set_seed

from trainers import precision
from trainers.data import evaluation_names, load_sts
from trainers.encoder import SentenceEncoder, pick_device
from trainers.evaluation import STSEvaluator
from trainers.method import Config, Method, Objective
from trainers.registry import get_method

Reporter = Callable[[dict[str, Any]], None]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the trial cannot continue."""


def _no_report(metrics: dict[str, Any]) -> None:
    pass


@dataclass
class _Selection:
    """Best-state bookkeeping for model selection on STS-B dev."""

    patience: int
    best_score: float = -math.inf
    best_step: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    evaluations_without_gain: int = 0

    def update(self, score: float, step: int, encoder: SentenceEncoder) -> None:
        if score > self.best_score:
            self.best_score, self.best_step, self.evaluations_without_gain = score, step, 0
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in encoder.state_dict().items()}
        else:
            self.evaluations_without_gain += 1

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.evaluations_without_gain >= self.patience


@dataclass
class _Timer:
    started: float = field(default_factory=time.perf_counter)
    training_seconds: float = 0.0
    examples: int = 0


def batches(n_examples: int, batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch of shuffled index batches. A trailing batch of one example is
    dropped (it has no in-batch negatives) unless it is the whole corpus."""
    order = torch.randperm(n_examples, generator=generator).tolist()
    chunks = [order[i : i + batch_size] for i in range(0, n_examples, batch_size)]
    return chunks if len(chunks) == 1 else [chunk for chunk in chunks if len(chunk) > 1]


def make_optimizer(config: Config, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    kind = torch.optim.AdamW if config["optimizer"] == "adamw" else torch.optim.Adam
    return kind(
        parameters,
        lr=config["learning_rate"],
        betas=(config["adam_beta1"], config["adam_beta2"]),
        weight_decay=config["weight_decay"],
    )


def make_schedule(config: Config, optimizer: torch.optim.Optimizer, total_steps: int):
    warmup = int(config["warmup_ratio"] * total_steps)
    if config["lr_schedule"] == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup)
    return get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def total_steps(config: Config, n_examples: int) -> int:
    full, rest = divmod(n_examples, config["batch_size"])
    per_epoch = full + (rest > 1 or (rest == 1 and full == 0))  # as batches() cuts an epoch
    steps = per_epoch * config["epochs"]
    return min(steps, config["max_steps"]) if config["max_steps"] else steps


def _autocast(config: Config, device: torch.device):
    return precision.autocast(precision.resolve(config["train_precision"], device), device)


def train(
    objective: Objective,
    examples: Sequence[Any],
    config: Config,
    evaluator: STSEvaluator,
    reporter: Reporter,
) -> dict[str, Any]:
    """Train ``objective`` on ``examples``; leave its encoder in the best dev state.

    Returns the bookkeeping figures (best dev score and step, steps taken,
    training throughput) for the final report.
    """
    encoder = objective.encoder
    device = encoder.device
    encode = _encode_fn(encoder, config)
    parameters = [p for p in objective.parameters() if p.requires_grad]
    optimizer = make_optimizer(config, parameters)
    steps = total_steps(config, len(examples))
    schedule = make_schedule(config, optimizer, steps)
    generator = torch.Generator().manual_seed(config["seed"])
    selection = _Selection(config["patience"])
    timer = _Timer()
    step, losses = 0, []

    while step < steps and not selection.should_stop:
        for batch_indices in batches(len(examples), config["batch_size"], generator):
            started = time.perf_counter()
            objective.train()
            with _autocast(config, device):
                loss = objective.loss([examples[i] for i in batch_indices])
            if not torch.isfinite(loss):
                raise NonFiniteLossError(f"training loss is {loss.item()} at step {step + 1}; the trial stops here")
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            objective.after_step()
            step += 1
            losses.append(loss.item())
            timer.training_seconds += time.perf_counter() - started
            timer.examples += len(batch_indices)

            if step % config["eval_every"] == 0 or step == steps:
                dev = evaluator.dev(encode)["dev_spearman"]
                selection.update(dev, step, encoder)
                reporter(
                    {
                        "step": step,
                        "loss": sum(losses) / len(losses),
                        "lr": schedule.get_last_lr()[0],
                        "dev_spearman": dev,
                        "best_dev_spearman": selection.best_score,
                    }
                )
                losses = []
            if step >= steps or selection.should_stop:
                break

    if selection.best_state is not None:
        encoder.load_state_dict(selection.best_state)
    return {
        "step": step,
        "best_dev_spearman": selection.best_score,
        "best_step": selection.best_step,
        "steps": step,
        "early_stopped": float(selection.should_stop),
        "train_seconds": timer.training_seconds,
        "sentences_per_second": timer.examples / timer.training_seconds if timer.training_seconds else 0.0,
        **objective.statistics(),
    }


def _encode_fn(encoder: SentenceEncoder, config: Config) -> Callable[[Sequence[str]], torch.Tensor]:
    used = precision.resolve(config["eval_precision"], encoder.device)

    def encode(sentences: Sequence[str]) -> torch.Tensor:
        with precision.autocast(used, encoder.device):
            return encoder.encode(sentences, batch_size=config["eval_batch_size"], max_length=config["eval_max_length"])

    return encode


def _precisions_used(config: Config, device: torch.device) -> dict[str, str]:
    """The resolved precisions of this trial (``auto`` depends on the node's hardware)."""
    used = {"eval_precision": precision.resolve(config["eval_precision"], device)}
    if "train_precision" in config:
        used["train_precision"] = precision.resolve(config["train_precision"], device)
    return used


def load_examples(method: Method, config: Config) -> Sequence[Any]:
    examples = method.examples(config)
    return examples[: config["train_limit"]] if config["train_limit"] else examples


def run_trial(overrides: Mapping[str, Any], reporter: Reporter | None = None) -> dict[str, Any]:
    """Run one trial of ``overrides['method']`` and return its final figures.

    The final figures are also the last thing sent to ``reporter``: test
    metrics prefixed ``test_`` (of the best dev state), ``best_dev_spearman``,
    ``steps``, ``test_seconds`` (the final test's encoding and scoring),
    ``wall_seconds`` and ``sentences_per_second``.
    """
    started = time.perf_counter()
    reporter = reporter or _no_report
    method = get_method(overrides.get("method", "none"))
    config = method.resolve(overrides)
    set_seed(config["seed"])
    device = pick_device(config["device"])
    encoder = SentenceEncoder.from_config(config).to(device)
    evaluator = STSEvaluator(load_sts(config["sts_source"], evaluation_names()), config["eval_max_pairs"])

    if method.build is None:
        final: dict[str, Any] = {"step": 0, "steps": 0, "best_step": 0}
        final["best_dev_spearman"] = evaluator.dev(_encode_fn(encoder, config))["dev_spearman"]
    else:
        objective = method.build(config, encoder).to(device)
        final = train(objective, load_examples(method, config), config, evaluator, reporter)
    testing_started = time.perf_counter()
    final.update({f"test_{k}": v for k, v in evaluator.test(_encode_fn(encoder, config)).items()})
    final["test_seconds"] = time.perf_counter() - testing_started  # inference time (SG-BERT Table 6)
    final["wall_seconds"] = time.perf_counter() - started
    final.update(_precisions_used(config, device))
    reporter(final)
    return final
