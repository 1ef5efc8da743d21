"""A training step recorded once as a CUDA graph and replayed for every batch of its shape (``cuda_graph``).

A small model's step on a large GPU waits on the host: the host launches a few hundred kernels per step, each
faster to run than to launch. A CUDA graph records the step's kernels once (forward, backward, clipping, the
optimiser's update) and replays them with one launch; PyTorch's whole-network capture
(https://pytorch.org/docs/stable/notes/cuda.html#whole-network-capture). On an H200 it took SimCSE's step at
BERT-base's shape in bf16 from 53.2 ms eager at the same fixed shape to 13.0, and SG-OPT's from 76.4 to 13.0
(docs/gpu.md).

What a replay needs, and where it comes from:

- **one shape**: ``pad_to_max_length`` pads every batch to ``max_seq_length``, and the graph is recorded for the
  first batch's shape; a batch of another shape (an epoch's short last one) runs eagerly;
- **a step that reads nothing back from the device**, with its host work first: the objective's ``inputs``
  (tokens, sent; SG's views of BERT_F; ConSERT's and SCT's augmentations' draws, made on the host's generator;
  SCT's rewrites and its teacher's vectors), run in the step's precision, then ``device_loss`` (tensors only,
  random draws on the device) and ``after_update`` (SCT's queues and momentum encoder, updated in place):
  :class:`~trainers.objectives.simcse.SimCSEObjective`, :class:`~trainers.objectives.dclr.DCLRObjective`,
  :class:`~trainers.objectives.sg.SelfGuidedObjective`, :class:`~trainers.objectives.consert.ConSERTObjective`,
  :class:`~trainers.objectives.sct.SCTObjective`;
- **inputs in place**: each batch is copied into the recorded batch's tensors;
- **the learning rate in a device tensor**, which the schedule fills in place
  (:func:`~trainers.training.optimization.make_optimizer`'s ``rate_tensor``), and a capturable update;
- **gradients in the graph's memory**: the capture allocates them; an eager step after it zeroes them in place
  instead of freeing them;
- **autocast without its cast cache** (:func:`~trainers.training.precision.autocast`).

On a device without CUDA graphs (a CPU) the steps run eagerly, as they would be replayed (the same inputs
copied into the same tensors), so that the tests check all of it but the capture, and but what only a replay
gets wrong: a value the host computed inside the step, recorded once as a constant. ``graphed_steps`` counts
the steps a graph replayed.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from trainers.models.batches import TokenBatch
from trainers.objectives.base import Objective
from trainers.training import precision
from trainers.training.optimization import update

Inputs = TokenBatch | Tensor | None | tuple["Inputs", ...]
"""What an objective's ``inputs`` gives its ``device_loss``: a batch's tokens on the device, or a tuple of them
and other device tensors (SG's views of BERT_F, ConSERT's draws of its augmentations; None for a view that
draws nothing)."""
Step = Callable[[Sequence[Any]], Tensor]
"""One training step on a batch of examples: its forward, backward and update; returns its loss."""

WARMUP_STEPS = 3
"""Eager steps of the graph's shape before it is recorded, on a side stream (PyTorch's recipe): what is set up
lazily on a first step (the optimiser's state, cuBLAS's workspaces) must not be set up inside the capture."""


def trained(objective: Objective, loss_of: Callable[[], Tensor], optimizer: torch.optim.Optimizer,
            max_grad_norm: float, used: str, device: torch.device, cache_casts: bool = True,
            scaler: torch.amp.GradScaler | None = None) -> Tensor:
    """``loss_of()`` in the precision ``used``, then its update (the backward pass's products in it too, through
    fp16's loss ``scaler``) and what ``objective`` does after it
    (:meth:`~trainers.objectives.base.Objective.after_update`); the loss. Both steps train through it, the
    graphed one without autocast's cast cache (and without fp16, whose scaler reads the device back)."""
    with precision.autocast(used, device, cache_casts):
        loss = loss_of()
    with precision.matmuls(used):
        update(loss, optimizer, max_grad_norm, scaler)
    objective.after_update()
    return loss


def eager_step(objective: Objective, optimizer: torch.optim.Optimizer, max_grad_norm: float, used: str,
               device: torch.device, scaler: torch.amp.GradScaler | None = None) -> Step:
    """The step as the loop runs it without a graph: the objective's loss, its update (through fp16's loss
    ``scaler``) and what follows it (:meth:`~trainers.objectives.base.Objective.after_update`), gradients freed."""

    def step(examples: Sequence[Any]) -> Tensor:
        loss = trained(objective, lambda: objective.loss(examples), optimizer, max_grad_norm, used, device,
                       scaler=scaler)
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def tensors(inputs: Inputs) -> list[Tensor]:
    """The device tensors of a step's inputs, in order: a batch's tokens, or a tuple of them and tensors."""
    if inputs is None:
        return []
    if isinstance(inputs, Tensor):
        return [inputs]
    if isinstance(inputs, TokenBatch):
        return list(inputs.values())
    return [tensor for part in inputs for tensor in tensors(part)]


class GraphedStep:
    """The step of an objective with ``inputs`` and ``device_loss``, replayed from a CUDA graph on a CUDA device
    (eagerly, as it would be replayed, elsewhere); see the module's docstring."""

    def __init__(self, objective: Objective, optimizer: torch.optim.Optimizer, max_grad_norm: float, used: str,
                 device: torch.device, record: bool = True):
        """``record`` False runs what the graph would replay eagerly on a CUDA device too: the reference that
        ``python -m benchmarks.gpu``'s agreement part sets the replays beside."""
        self.objective, self.optimizer, self.max_grad_norm = objective, optimizer, max_grad_norm
        self.used, self.device = used, device
        self.captures = record and device.type == "cuda"
        self.side_stream = torch.cuda.Stream(device) if self.captures else None
        self.shape: list[torch.Size] | None = None  # the graph's batches' shapes: the first batch's
        self.warmup_steps = 0
        self.inputs: Inputs | None = None  # the recorded batch's tensors, into which each batch is copied
        self.graph: torch.cuda.CUDAGraph | None = None
        self.recorded_loss: Tensor | None = None
        self.graphed_steps = 0

    def __call__(self, examples: Sequence[Any]) -> Tensor:
        with precision.autocast(self.used, self.device):  # a model the host work runs (SCT's teacher on a rewrite)
            features = self.objective.inputs(examples)  # runs in the step's precision, as in the eager step
        shape = [tensor.shape for tensor in tensors(features)]
        self.shape = self.shape or shape
        if shape != self.shape:
            return self._eager(features)
        if self.inputs is None:
            if self.warmup_steps < WARMUP_STEPS:
                self.warmup_steps += 1
                return self._warmup(features)
            self._record(features)
        for recorded, tensor in zip(tensors(self.inputs), tensors(features)):
            recorded.copy_(tensor)
        return self._replay()

    def _device_step(self, features: Inputs) -> Tensor:
        """What the graph records: the loss from the device's tensors, its gradients, the update and what follows
        it (SCT's queues)."""
        return trained(self.objective, lambda: self.objective.device_loss(features), self.optimizer,
                       self.max_grad_norm, self.used, self.device, cache_casts=False)

    def _warmup(self, features: Inputs) -> Tensor:
        if not self.captures:
            return self._eager(features)
        self.side_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side_stream):
            loss = self._eager(features)
        torch.cuda.current_stream(self.device).wait_stream(self.side_stream)
        return loss

    def _eager(self, features: Inputs) -> Tensor:
        recorded = self.inputs is not None
        if recorded:  # the gradients live in the graph's memory from its capture on: zeroed, never freed
            self.optimizer.zero_grad(set_to_none=False)
        loss = self._device_step(features)
        if not recorded:
            self.optimizer.zero_grad(set_to_none=True)
        return loss

    def _record(self, features: Inputs) -> None:
        """Keep ``features``' tensors as the graph's inputs, and record the step on them (a CUDA device)."""
        self.inputs = features
        if not self.captures:
            return
        self.optimizer.zero_grad(set_to_none=True)  # the capture allocates the gradients in the graph's memory
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self.recorded_loss = self._device_step(self.inputs)
        except RuntimeError as error:  # e.g. an op that reads the device back: the trial fails, saying so
            raise RuntimeError(f"cuda_graph: the training step could not be recorded as a CUDA graph ({error}); "
                               "train with cuda_graph: false") from error

    def _replay(self) -> Tensor:
        if self.graph is None:  # no CUDA: the step the graph would replay, run on its inputs
            self.optimizer.zero_grad(set_to_none=True)
            return self._device_step(self.inputs)
        self.graph.replay()
        self.graphed_steps += 1
        return self.recorded_loss.clone()  # the next replay overwrites the recorded loss
