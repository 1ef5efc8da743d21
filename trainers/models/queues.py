"""Instance queues: fixed-size FIFO memories of reference vectors (SCT, Section 3.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class InstanceQueue(nn.Module):
    """``size`` unit vectors, oldest first out; starts as random normalised vectors.

    ``enqueue`` writes a batch over the oldest entries, wrapping around the end;
    a batch longer than the queue keeps only its last ``size`` vectors.
    """

    def __init__(self, size: int, dim: int, generator: torch.Generator | None = None):
        super().__init__()
        self.register_buffer("vectors", F.normalize(torch.randn(size, dim, generator=generator), dim=1))
        self.register_buffer("pointer", torch.zeros((), dtype=torch.long))

    @property
    def size(self) -> int:
        return len(self.vectors)

    @torch.no_grad()
    def enqueue(self, batch: Tensor) -> None:
        batch = batch.detach().to(self.vectors.dtype)[-self.size :]
        # The pointer stays a device tensor, read by no one on the host: reading it would make every step wait
        # for the device to finish the step before (a GPU sync per step).
        positions = (self.pointer + torch.arange(len(batch), device=self.vectors.device)) % self.size
        self.vectors[positions] = batch
        self.pointer.copy_((self.pointer + len(batch)) % self.size)

    def extended(self, batch: Tensor) -> Tensor:
        """The queue with ``batch`` appended: what a distribution ranges over once the batch has
        entered the queue at the start of its step (SCT Section 3.1), before the oldest leave."""
        return torch.cat([self.vectors, batch.detach().to(self.vectors.dtype)])

    def oldest_first(self) -> Tensor:
        """The queue's vectors from oldest to newest (for inspection and tests)."""
        return torch.roll(self.vectors, -int(self.pointer), dims=0)
