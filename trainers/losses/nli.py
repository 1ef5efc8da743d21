"""SBERT's classification objective on labelled NLI pairs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

NLI_CLASSES = 3
"""Entailment, neutral, contradiction."""


def nli_classification_loss(first: Tensor, second: Tensor, labels: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """ConSERT Eq. (2), SBERT's classification objective (Reimers and Gurevych 2019, Section 3):
    f = Concat(r1, r2, |r1 - r2|), L_ce = CrossEntropy(W f + b, y), averaged over the pairs."""
    features = torch.cat([first, second, (first - second).abs()], dim=-1)
    return F.cross_entropy(F.linear(features, weight, bias), labels)
