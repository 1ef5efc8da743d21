"""BERT-flow's maximum-likelihood loss (Li et al. 2020)."""

from __future__ import annotations

import math

from torch import Tensor


def flow_nll_bits(latent: Tensor, log_det: Tensor) -> Tensor:
    """BERT-flow, Li et al. 2020, Section 4.2: the flow is fit by maximising, over the sentence vectors u,

        log p_Z(f^-1(u)) + log |det d f^-1(u) / du|,  p_Z = N(0, I)

    (``latent`` = f^-1(u), ``[batch, dim]``; ``log_det`` = the log-determinant per sample). Returned as the
    authors' code reports it (``glow_1x1.py``, ``objective_tower``): the negative log-likelihood in bits per
    dimension, -(log p_Z + log det) / (dim ln 2), averaged over the batch.
    """
    dim = latent.shape[-1]
    log_prior = -0.5 * (latent.pow(2).sum(-1) + dim * math.log(2 * math.pi))
    return (-(log_prior + log_det) / (dim * math.log(2))).mean()
