"""What every fine-tuning of an encoder here shares: the optimiser, the learning-rate schedule, one
epoch's batches, one optimisation step and best-state keeping.

The training loop (:mod:`trainers.training.loop`, model selection on STS-B dev) and GLUE fine-tuning
(:mod:`trainers.training.glue`, selection on the first 10% of each validation set) both train through these, so
an optimiser knob or a batching rule means the same in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from trainers.method import Config
from trainers.training.checkpoint import SelectionState
from trainers.training.steps import shortest_batch
from trainers.training.transformers_adamw import TransformersAdamW


def batches(n_examples: int, batch_size: int, generator: torch.Generator, last_batch: str) -> list[list[int]]:
    """One epoch of shuffled index batches. A short trailing batch is dropped where ``last_batch`` is 'drop', and
    a trailing batch of one example (it has no in-batch negatives) always, unless it is the whole corpus."""
    order = torch.randperm(n_examples, generator=generator).tolist()
    chunks = [order[i : i + batch_size] for i in range(0, n_examples, batch_size)]
    shortest = shortest_batch(batch_size, last_batch)
    return chunks if len(chunks) == 1 else [chunk for chunk in chunks if len(chunk) >= shortest]


def make_optimizer(config: Config, module: torch.nn.Module, rate_tensor: bool = False) -> torch.optim.Optimizer:
    """Adam or AdamW over ``module``'s trainable parameters, ``weight_decay`` on all but those
    ``weight_decay_exempt`` spares (:func:`parameter_groups`). ``adam_implementation`` 'torch': torch's, on a
    GPU its fused kernel, one launch for all parameters' update instead of a few per tensor group (the same
    update, up to float rounding; the CPU keeps the plain one its tests pin bitwise); 'transformers': the
    authors' update, bias corrected or not (:class:`~trainers.training.transformers_adamw.TransformersAdamW`);
    'bert_tf': BERT's TensorFlow update, the same with the decay before it.

    ``rate_tensor`` keeps the learning rate in a tensor on the parameters' device, which the schedule fills in
    place each step: what an update recorded in a CUDA graph reads (a float would be recorded as a constant).
    On a GPU torch's update is then capturable too (its step counts stay on the device)."""
    groups = parameter_groups(module, config["weight_decay"], config["weight_decay_exempt"] == "biases_and_norms")
    parameters = [p for group in groups for p in group["params"]]
    rate = config["learning_rate"]
    lr = torch.tensor(rate, device=parameters[0].device) if rate_tensor else rate
    betas = (config["adam_beta1"], config["adam_beta2"])
    decoupled = config["optimizer"] == "adamw"
    if config["adam_implementation"] == "torch":
        fused = fused_update(parameters)
        kind = torch.optim.AdamW if decoupled else torch.optim.Adam
        optimizer = kind(groups, lr=lr, betas=betas, eps=config["adam_epsilon"], fused=fused,
                         capturable=bool(rate_tensor and fused))
    else:
        optimizer = TransformersAdamW(groups, lr=lr, betas=betas, eps=config["adam_epsilon"],
                                      weight_decay=config["weight_decay"], decoupled=decoupled,
                                      correct_bias=config["adam_bias_correction"],
                                      decay_first=config["adam_implementation"] == "bert_tf")
    for group in optimizer.param_groups:  # the schedule's base rate, a float: each step's rate is filled in
        group["initial_lr"] = rate        # without reading the device
    return optimizer


def parameter_groups(module: torch.nn.Module, weight_decay: float, exempt_biases_and_norms: bool = True) -> list[dict]:
    """``module``'s trainable parameters in two groups: decayed by ``weight_decay``, and not. With
    ``exempt_biases_and_norms`` every parameter whose name holds 'bias' and the weights of LayerNorm layers are
    not, as sentence-transformers' ``fit()`` (whose ``no_decay`` list every SG-BERT, ConSERT and SCT run used)
    and Hugging Face's Trainer leave them; without it every parameter is decayed. Empty groups are left out."""
    norms = {id(p) for layer in module.modules() if isinstance(layer, torch.nn.LayerNorm)
             for p in layer.parameters(recurse=False)}
    groups: list[dict] = [{"params": [], "weight_decay": weight_decay}, {"params": [], "weight_decay": 0.0}]
    for name, p in module.named_parameters():
        if p.requires_grad:
            exempt = exempt_biases_and_norms and ("bias" in name or id(p) in norms)
            groups[int(exempt)]["params"].append(p)
    return [group for group in groups if group["params"]]


def fused_update(parameters: list[torch.nn.Parameter]) -> bool | None:
    """True where every parameter is on a CUDA device (the fused kernel's home); None (torch's choice) else."""
    return True if parameters and all(p.is_cuda for p in parameters) else None


def make_schedule(config: Config, optimizer: torch.optim.Optimizer, total_steps: int):
    warmup = int(config["warmup_ratio"] * total_steps)
    if config["lr_schedule"] == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup)
    return get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def update(loss: torch.Tensor, optimizer: torch.optim.Optimizer, max_grad_norm: float,
           scaler: torch.amp.GradScaler | None = None) -> None:
    """``loss``'s gradients (clipped to global L2 norm ``max_grad_norm`` over the optimiser's parameters unless
    it is 0) and the optimiser's update: the part of a step a CUDA graph records (:mod:`trainers.training.graphs`).
    With fp16's ``scaler`` the gradients of the scaled loss, unscaled before the clipping, and the update skipped
    where they overflowed (sentence-transformers' ``fit(use_amp=True)``: the SCT authors' step)."""
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    if max_grad_norm:
        parameters = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()


def optimization_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer, schedule, max_grad_norm: float) -> None:
    """One step on ``loss``: its update (:func:`update`), the schedule's next rate, gradients cleared."""
    update(loss, optimizer, max_grad_norm)
    schedule.step()
    optimizer.zero_grad(set_to_none=True)


@dataclass
class Selection:
    """Best-state bookkeeping for model selection: on STS-B dev in the training loop, on the first 10% of
    each GLUE validation set in GLUE fine-tuning (:mod:`trainers.training.glue`). ``encoder`` is the module
    whose weights are kept. With ``keep_last`` every evaluation replaces the kept one: the stage ends with its
    last state (code that selects nothing) and the best score is that state's.

    ``evaluations_without_gain`` counts the evaluations ``patience`` counts, by ``rule``
    (:data:`trainers.common_knobs.EARLY_STOPPING_RULES`): 'no_gain', those since the best, reset by a better
    score (yym6472/ConSERT's ``fit()``); 'drops', every one that scored below the evaluation before it, never
    reset, evaluations at an epoch's end neither counted nor compared with (galsang/SG-BERT ``modules.py``
    ``fit()``); 'epoch_ends', the evaluations at an epoch's end that scored below the best of them, reset by a
    better one (mrpeerat/SCT's sentence-transformers ``fit()``)."""

    patience: int
    keep_last: bool = False
    rule: str = "no_gain"
    best_score: float = -math.inf
    best_step: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    evaluations_without_gain: int = 0
    last_score: float | None = None
    epoch_best_score: float = -math.inf

    def state(self, step: int) -> SelectionState:
        """For a checkpoint taken at ``step``; the best weights are left out when they are the current ones."""
        return SelectionState(self.best_score, self.best_step, self.evaluations_without_gain,
                              None if self.best_step == step else self.best_state, self.last_score,
                              self.epoch_best_score)

    def restore(self, state: SelectionState, encoder: torch.nn.Module) -> None:
        self.best_score, self.best_step = state.best_score, state.best_step
        self.evaluations_without_gain, self.last_score = state.evaluations_without_gain, state.last_score
        self.epoch_best_score = -math.inf if state.epoch_best_score is None else state.epoch_best_score
        self.best_state = state.best_state
        if self.best_state is None and self.best_step and not self.keep_last:
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in encoder.state_dict().items()}

    def update(self, score: float, step: int, encoder: torch.nn.Module, epoch_end: bool = False) -> None:
        """Take the dev ``score`` of the state at ``step``; ``epoch_end`` marks the evaluation at an epoch's end
        (``eval_grid`` 'epoch'), which the rules count apart."""
        gained = score > self.best_score
        if self.keep_last:  # the current weights are the kept ones: no copy
            self.best_score, self.best_step, self.best_state = score, step, None
        elif gained:
            self.best_score, self.best_step = score, step
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in encoder.state_dict().items()}
        if self.rule == "drops" and not epoch_end:
            # The authors' count starts from a last score of 0 (galsang/SG-BERT fit()).
            self.evaluations_without_gain += score < (self.last_score or 0.0)
            self.last_score = score
        elif self.rule == "epoch_ends" and epoch_end:
            if score > self.epoch_best_score:
                self.epoch_best_score, self.evaluations_without_gain = score, 0
            else:  # an equal score neither resets nor counts, as in the authors' fit()
                self.evaluations_without_gain += score < self.epoch_best_score
        elif self.rule == "no_gain":
            self.evaluations_without_gain = 0 if gained else self.evaluations_without_gain + 1

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.evaluations_without_gain >= self.patience
