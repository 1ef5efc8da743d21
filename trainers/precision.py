"""Numeric precision of evaluation and training: bf16 autocast where the hardware runs it fast.

``eval_precision`` and ``train_precision`` take ``fp32``, ``bf16`` or
``auto``; :func:`resolve` turns ``auto`` into ``bf16`` on a CUDA device that
supports bf16 and on a CPU with AMX or AVX-512 bf16 instructions, and into
``fp32`` elsewhere (bf16 emulated on an older CPU is slower than fp32). The
trial reports the precision it used (``eval_precision``, ``train_precision``),
and the MLflow run records them as tags.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext

import torch

from trainers.common_knobs import PRECISIONS


@functools.cache
def cpu_runs_bf16_fast() -> bool:
    """Whether this CPU has AMX tiles or AVX-512 bf16 (oneDNN then runs bf16 matmuls natively)."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return any(check() for check in checks if check is not None)


def runs_bf16_fast(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_runs_bf16_fast()


def resolve(setting: str, device: torch.device) -> str:
    """``fp32`` or ``bf16``: the precision ``setting`` means on ``device``."""
    if setting not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {setting!r}")
    if setting == "auto":
        return "bf16" if runs_bf16_fast(device) else "fp32"
    return setting


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """bf16 autocast on ``device`` for ``bf16``, nothing for ``fp32`` (a resolved precision)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()
