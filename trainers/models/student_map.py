"""The map of a distilled student's pooled vectors into its teacher's space, part of the student's sentence vector.

The SCT authors' distillation (mrpeerat/SCT ``SCT_main_distillation.py``) builds the student as
sentence-transformers modules [Transformer, Pooling, Dense(student width -> teacher width, Tanh)] when the
widths differ: both losses read the mapped vectors, and the model they select, save and test ends with the map.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class StudentMap(nn.Module):
    """tanh(W z + b), initialised as ``nn.Linear`` is (Kaiming-uniform weights, uniform biases) from a generator of
    its own seed: the same map wherever and whenever a trial builds it."""

    def __init__(self, student_width: int, teacher_width: int, seed: int):
        super().__init__()
        self.linear = nn.Linear(student_width, teacher_width)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.linear.weight, a=math.sqrt(5), generator=generator)
            bound = 1 / math.sqrt(student_width)
            nn.init.uniform_(self.linear.bias, -bound, bound, generator=generator)

    @property
    def output_width(self) -> int:
        return self.linear.out_features

    def forward(self, vectors: Tensor) -> Tensor:
        return torch.tanh(self.linear(vectors))
