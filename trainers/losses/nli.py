"""SBERT's classification objective on labelled NLI pairs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

NLI_CLASSES = 3
"""Entailment, neutral, contradiction."""


def nli_feature_count(max_square: bool) -> int:
    """How many vectors of the sentence width :func:`nli_classification_loss` concatenates."""
    return 4 if max_square else 3


def nli_classification_loss(first: Tensor, second: Tensor, labels: Tensor, weight: Tensor, bias: Tensor | None,
                            max_square: bool = False) -> Tensor:
    """ConSERT Eq. (2), SBERT's classification objective (Reimers and Gurevych 2019, Section 3):
    f = Concat(r1, r2, |r1 - r2|), L_ce = CrossEntropy(W f + b, y), averaged over the pairs (b None: no bias,
    BERT-flow's classifier). ``max_square``
    appends max(r1, r2)^2 (elementwise) to f, as the ConSERT authors' sup-sbert and sup-consert-joint scripts
    do (``--concatenation_sent_max_square``, AdvCLSoftmaxLoss._reps_to_output)."""
    parts = [first, second, (first - second).abs()] + ([torch.maximum(first, second).pow(2)] if max_square else [])
    return F.cross_entropy(F.linear(torch.cat(parts, dim=-1), weight, bias), labels)
