"""The loop's steps at a fixed shape, eager and replayed from one CUDA graph (``cuda_graph``), and how far apart
the replays train from the eager steps."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from benchmarks.gpu.common import METHODS, loop_steps, measured_or_failed, objective_of
from trainers.registry import get_method

GRAPHED = {"pad_to_max_length": True, "cuda_graph": True}
"""The knobs of a trial whose step is replayed from one CUDA graph (``loop_graphed``, ``sharing_graphed``)."""
GRAPHED_LOOP = ({"pad_to_max_length": True}, GRAPHED)
"""The knobs of the loop's steps at a fixed shape: eager, and replayed from one CUDA graph."""
GRAPHED_METHODS = tuple(method for method in METHODS if "cuda_graph" in get_method(method).all_knobs)
"""The methods whose step a CUDA graph records (``cuda_graph``), at their defaults (SG: SG-OPT; ConSERT: shuffle
and feature cutoff)."""


def graphed_methods(methods: list[str]) -> list[str]:
    """The methods of ``methods`` (``--methods``) whose step a CUDA graph records."""
    return [method for method in GRAPHED_METHODS if method in methods]


def graphed_loop_steps(models: Mapping[str, str], methods: list[str], precisions: list[str], steps: int,
                       device: torch.device) -> list[dict[str, Any]]:
    """The steps of ``methods`` that are :data:`GRAPHED_METHODS` through the loop with each of
    :data:`GRAPHED_LOOP`'s knobs (the graph recorded during the warm-up), for each model and precision; each row
    on its own, as :func:`fixed_shape_steps`'."""
    return [{"model": name, "cuda_graph": False, **measured_or_failed(
                lambda: loop_steps(method, path, precision, steps, device, count_flops=False, **knobs),
                method=method, precision=precision, **knobs)}
            for name, path in models.items() for method in graphed_methods(methods) for precision in precisions
            for knobs in GRAPHED_LOOP]


AGREEMENT_STEPS = ("eager", "eager again", "unrecorded", "replayed")
"""The agreement part's steps: the loop's without ``cuda_graph`` (``eager_step``, autocast with its cast cache),
twice (what the card's own kernels leave to chance, such as a backward's atomic sums), the graphed step's path run
eagerly (``GraphedStep(record=False)``, no cast cache), and the replays."""
AGREEMENT_BATCHES = (1.0,) * 8 + (0.5,) + (1.0,) * 4
"""The agreement part's batches, as shares of ``batch_size``: the warm-up, the recording and replays, one short
batch run eagerly between replays (an epoch's last), and replays after it."""


def graph_agreement(models: Mapping[str, str], methods: list[str], precisions: list[str],
                    device: torch.device) -> list[dict[str, Any]]:
    """The replayed step against the same step run eagerly, and against the loop's step without ``cuda_graph``,
    on the same batches from the same weights with dropout off (so that no step draws from the device's
    generator, whose draws a graph orders otherwise): how far apart each step's loss and the trained weights
    are, for ``methods`` that are :data:`GRAPHED_METHODS`, each model and precision. On a CPU nothing is
    replayed (tests/test_graphs.py checks that path bit for bit); on a GPU this checks that the replays train
    as the eager steps do."""
    rows = []
    for name, path in models.items():
        for method in graphed_methods(methods):
            for precision in precisions:
                runs = {kind: trained_without_dropout(method, path, precision, device, kind)
                        for kind in AGREEMENT_STEPS}
                (losses, weights, replayed) = runs["replayed"]
                rows.append({"model": name, "method": method, "precision": precision, "steps": len(losses),
                             "replayed": replayed,
                             **{f"against_{kind}": apart(runs[kind][:2], (losses, weights))
                                for kind in ("unrecorded", "eager")},
                             "eager_against_itself": apart(runs["eager"][:2], runs["eager again"][:2])})
    return rows


def apart(reference: tuple[list[float], list[torch.Tensor]],
          other: tuple[list[float], list[torch.Tensor]]) -> dict[str, Any]:
    """How far ``other``'s losses and weights are from ``reference``'s: bit for bit, or the largest relative
    loss difference and the largest weight difference."""
    (losses, weights), (other_losses, other_weights) = reference, other
    return {"equal": other_losses == losses and all(torch.equal(a, b) for a, b in zip(weights, other_weights)),
            "loss_rel_diff": max(abs(a - b) / abs(b) for a, b in zip(other_losses, losses)),
            "weight_diff": max((a - b).abs().max().item() for a, b in zip(other_weights, weights))}


def trained_without_dropout(method: str, model: str, precision: str, device: torch.device,
                            kind: str) -> tuple[list[float], list[torch.Tensor], int]:
    """:data:`AGREEMENT_BATCHES` through one of :data:`AGREEMENT_STEPS`, with the loop's optimiser (its rate in
    a tensor) and schedule, every dropout off: the losses, the trained weights, and how many steps a graph
    replayed."""
    from trainers.training import precision as precisions
    from trainers.training.graphs import GraphedStep, eager_step
    from trainers.training.optimization import make_optimizer, make_schedule

    objective, config, examples = objective_of(method, model, precision, len(AGREEMENT_BATCHES), device,
                                               len(AGREEMENT_BATCHES), pad_to_max_length=True)
    used = precisions.resolve(precision, device)
    with precisions.autocast(used, device):
        objective.prepare(examples)
    optimizer = make_optimizer(config, objective, rate_tensor=True)
    schedule = make_schedule(config, optimizer, len(AGREEMENT_BATCHES))
    arguments = (objective, optimizer, config["max_grad_norm"], used, device)
    step = GraphedStep(*arguments, record=kind == "replayed") if kind in ("unrecorded", "replayed") else (
        eager_step(*arguments))
    objective.train()
    for module in objective.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0  # BERT's attention reads its dropout's p too
    losses, start = [], 0
    for share in AGREEMENT_BATCHES:
        size = int(share * config["batch_size"])
        losses.append(step(examples[start : start + size]))
        schedule.step()
        start += size
    weights = [p.detach().clone() for p in objective.parameters() if p.requires_grad]
    return [loss.item() for loss in losses], weights, getattr(step, "graphed_steps", 0)
