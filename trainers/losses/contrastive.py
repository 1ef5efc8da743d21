"""In-batch contrastive losses shared by SimCSE and ConSERT."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def cosine_matrix(left: Tensor, right: Tensor) -> Tensor:
    """``[n, m]`` cosine similarities between the rows of ``left`` and ``right``."""
    return F.normalize(left, dim=-1) @ F.normalize(right, dim=-1).T


def info_nce(anchors: Tensor, positives: Tensor, temperature: float) -> Tensor:
    """SimCSE, Gao et al. 2021, Eq. (1)/(4): in-batch InfoNCE.

    l_i = -log exp(sim(h_i, h_i+)/tau) / sum_j exp(sim(h_i, h_j+)/tau), averaged
    over i; the other sentences' positives are the negatives.
    """
    logits = cosine_matrix(anchors, positives) / temperature
    return F.cross_entropy(logits, torch.arange(len(anchors), device=anchors.device))


def nt_xent(view1: Tensor, view2: Tensor, temperature: float) -> Tensor:
    """NT-Xent over 2N views (Chen et al. 2020; ConSERT, Yan et al. 2021, Eq. (1)).

    Each of the 2N vectors is an anchor whose positive is the other view of the
    same sentence and whose negatives are the remaining 2N - 2 vectors:
    L_i = -log exp(sim(r_i, r_j)/tau) / sum_{k != i} exp(sim(r_i, r_k)/tau),
    averaged over all 2N anchors.
    """
    n = len(view1)
    views = torch.cat([view1, view2])
    logits = cosine_matrix(views, views) / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=views.device), float("-inf"))
    targets = torch.arange(2 * n, device=views.device).roll(n)  # n..2n-1, then 0..n-1
    return F.cross_entropy(logits, targets)
