"""Numeric precision of evaluation and training: fp32, TF32 matrix products, or bf16 or fp16 autocast.

``eval_precision`` and ``train_precision`` take ``fp32``, ``tf32``, ``bf16``, ``fp16`` or ``auto``. :func:`resolve`
turns a setting into what runs on the device:

- ``tf32`` runs fp32 with the matrix products on TF32 tensor cores; it needs a CUDA device of compute
  capability 8.0 or more, and is plain ``fp32`` elsewhere (no other device has TF32 units).
- ``auto`` is what measurement found fastest at equal scores on the device. On a CUDA device,
  :data:`CUDA_AUTO`, and for training steps replayed from a CUDA graph (``cuda_graph``)
  :data:`CUDA_GRAPHED_AUTO` (``python -m benchmarks.gpu``, docs/gpu.md). On a CPU with AMX or AVX-512 bf16,
  ``bf16`` (benchmarks/results.md); ``fp32`` on other CPUs, where bf16 is emulated and slower than fp32.
  ``auto`` never picks ``fp16``: bf16 has its range, so it trains without a loss scale.
- ``fp16`` trains with torch's dynamic loss scaling (:func:`loss_scaler`), as the ConSERT and SCT authors did.

The trial reports the precision it used (``eval_precision``, ``train_precision``), and the MLflow run
records them as tags.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterator, Mapping

import torch

from trainers.common_knobs import PRECISIONS, precision_settings

CUDA_AUTO = "tf32"
"""``auto`` on a CUDA device with TF32 units: on an H100 (docs/gpu.md) TF32 steps were the fastest of the
three for every method, and bf16 autocast gained nothing over it, its casts costing host time a small step
does not have to spare; the STS scores of the three agree to a few hundredths of a point."""
CUDA_GRAPHED_AUTO = "bf16"
"""``auto`` for the steps of a ``cuda_graph`` trial on a CUDA device that runs bf16: replayed, a step's casts
cost no host time, and bf16 steps were the fastest of the three for every graphed method, at BERT-base's shape
and MiniLM's, on an H200; whole SimCSE trials trained to the same scores as fp32's, within the range over three
seeds (docs/gpu.md)."""


AUTOCAST_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""The precisions that autocast, and the type of their products."""


@functools.cache
def cpu_runs_bf16_fast() -> bool:
    """Whether this CPU has AMX tiles or AVX-512 bf16 (oneDNN then runs bf16 matmuls natively)."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check() for check in checks if check is not None)


def loss_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """The loss scaler of fp16 training steps (torch's defaults: 2^16 to start, halved at an overflow, whose step
    is skipped, doubled after 2,000 steps without one; apex O1's too, the ConSERT authors'); None otherwise."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def has_tf32(device: torch.device) -> bool:
    """Whether ``device`` multiplies fp32 matrices on TF32 tensor cores when allowed (CUDA, Ampere or later)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def runs_bf16_fast(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_runs_bf16_fast()


def resolve(setting: str, device: torch.device, graphed: bool = False) -> str:
    """``fp32``, ``tf32``, ``bf16`` or ``fp16``: the precision ``setting`` means on ``device``, for training steps
    replayed from a CUDA graph when ``graphed``."""
    if setting not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {setting!r}")
    if setting == "auto":
        if has_tf32(device):
            return CUDA_GRAPHED_AUTO if graphed and runs_bf16_fast(device) else CUDA_AUTO
        return "bf16" if runs_bf16_fast(device) else "fp32"
    if setting == "tf32" and not has_tf32(device):
        return "fp32"
    return setting


def of_training(config: Mapping[str, Any], device: torch.device) -> str:
    """The precision of a trial's training steps on ``device``: its ``train_precision``, in its step mode."""
    setting, graphed = precision_settings(config)["train_precision"]
    return resolve(setting, device, graphed)


@contextmanager
def matmuls(precision: str) -> Iterator[None]:
    """fp32 matrix products on TF32 tensor cores inside the block for ``tf32``, in full fp32 for the others
    (bf16 autocast casts its products itself); the process's setting restored after. The training loop runs
    each step's backward pass under it too: the gradients' products are most of a step's arithmetic."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def autocast(precision: str, device: torch.device, cache_casts: bool = True) -> AbstractContextManager:
    """The forward pass of a resolved ``precision`` on ``device``: bf16 or fp16 autocast, or fp32 matrix products in
    TF32 (``tf32``) or in full (``fp32``, also inside a block that allows TF32). ``cache_casts`` False makes
    autocast cast the weights afresh at each use instead of once per block: what a CUDA graph's capture needs
    (the same values)."""
    if precision in AUTOCAST_TYPES:
        return torch.autocast(device.type, dtype=AUTOCAST_TYPES[precision], cache_enabled=cache_casts)
    return matmuls(precision)
