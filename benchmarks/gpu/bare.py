"""The SimCSE step in a bare PyTorch loop, and at a fixed shape captured as one CUDA graph: the bound of a loop."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import torch

from benchmarks.gpu.common import (
    WARMUP,
    loop_batches,
    matmuls,
    measured_or_failed,
    precision_context,
    synchronize,
    typical_examples,
)
from trainers.models.pretrained import resolve_model_path
from trainers.registry import get_method


def bare_simcse(model: str, precision: str, steps: int, device: torch.device,
                fixed_shape: bool = False, graphed: bool = False) -> dict[str, Any]:
    """SimCSE's step (two dropout passes in one batch, the MLP head, InfoNCE, fused AdamW) in a bare loop,
    its batches tokenised, padded and on the device beforehand: the step with no host work but the launches.
    torch's fused AdamW is the fastest update; the loop's default since 2026-11-29 is transformers' (its
    authors'), whose cost beside it the device check's ``optimizer`` part measures.

    ``fixed_shape`` pads every batch to ``max_seq_length``; ``graphed`` (CUDA only) also captures the whole
    step, forward, backward and update, as one CUDA graph replayed on each batch copied into its inputs
    (PyTorch's whole-network capture): what the step costs with no launches at all, the bound a CUDA-graphed
    loop could reach."""
    from transformers import AutoModel, AutoTokenizer

    from trainers.losses.contrastive import info_nce

    config = get_method("simcse").resolve({})
    torch.manual_seed(0)
    network = AutoModel.from_pretrained(resolve_model_path(model)).to(device).train()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model))
    width = network.config.hidden_size
    head = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()).to(device)
    parameters = [*network.parameters(), *head.parameters()]
    fixed_shape = fixed_shape or graphed  # a graph replays one shape
    # A captured update keeps its step counts on the device (capturable).
    optimizer = torch.optim.AdamW(parameters, lr=config["learning_rate"], fused=device.type == "cuda" or None,
                                  capturable=graphed)
    batches = [tokenizer(texts * 2, padding="max_length" if fixed_shape else True, truncation=True,
                         max_length=config["max_seq_length"], return_tensors="pt").to(device)
               for texts in loop_batches(config, typical_examples(config, WARMUP + steps))]

    def step(features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        with precision_context(precision, device):
            first, second = head(network(**features).last_hidden_state[:, 0]).chunk(2)
            loss = info_nce(first, second, config["temperature"])
        with matmuls(precision, device):
            loss.backward()
        optimizer.step()
        return loss

    run = step
    if graphed:
        run = captured(step, optimizer, batches[:WARMUP])
    for index, features in enumerate(batches):
        if index == WARMUP:
            synchronize(device)
            started = time.perf_counter()
        run(features)
        if not graphed:
            optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return {"method": "simcse", "precision": precision, "ms": 1000 * (time.perf_counter() - started) / steps,
            "fixed_shape": fixed_shape, "graphed": graphed}


def captured(step: Callable[[Mapping[str, torch.Tensor]], torch.Tensor], optimizer: torch.optim.Optimizer,
             warmup: list[Mapping[str, torch.Tensor]]) -> Callable[[Mapping[str, torch.Tensor]], torch.Tensor]:
    """``step`` captured as one CUDA graph after a few eager steps on a side stream (PyTorch's recipe for
    whole-network capture); the function returned copies a batch into the graph's inputs and replays it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for features in warmup:
            optimizer.zero_grad(set_to_none=True)
            step(features)
    torch.cuda.current_stream().wait_stream(side)
    inputs = {key: tensor.clone() for key, tensor in warmup[0].items()}
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # the gradients are then allocated in the graph's own memory
    with torch.cuda.graph(graph):
        loss = step(inputs)

    def replay(features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        for key, tensor in inputs.items():
            tensor.copy_(features[key])
        graph.replay()
        return loss

    return replay


def fixed_shape_steps(models: Mapping[str, str], precisions: list[str], steps: int,
                      device: torch.device) -> list[dict[str, Any]]:
    """The bare step at a fixed shape, eager and as one CUDA graph, for each model and precision; each row on
    its own: a capture that fails (a first try on this card) leaves its error in its row, and the rest run."""
    return [{"model": name, **measured_or_failed(
                lambda: bare_simcse(path, precision, steps, device, fixed_shape=True, graphed=graphed),
                method="simcse", precision=precision, fixed_shape=True, graphed=graphed)}
            for name, path in models.items() for precision in precisions for graphed in (False, True)]
