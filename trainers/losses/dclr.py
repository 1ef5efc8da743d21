"""DCLR's losses (Zhou et al. 2022, "Debiased Contrastive Learning of Unsupervised Sentence
Representations", Section 4: noise-based negatives, instance weighting and
the debiased objective), as pure functions.

``anchors`` and ``positives`` are the ``[b, d]`` vectors of the two dropout views (row i of each is
sentence i); ``noise`` is ``[m, d]``. Similarities are cosines over the temperature tau, as in SimCSE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from trainers.losses.contrastive import cosine_matrix


def false_negative_weights(anchors: Tensor, positives: Tensor, phi: float) -> Tensor:
    """Instance weights alpha (the paper's instance weighting) from the complementary model's vectors of the
    anchors and of the positives (the same sentences; two dropout views of them in the authors' code): ``[b, b]``,
    alpha_ij = 0 when the cosine of anchor i and positive j exceeds phi (a likely false negative), else 1; the
    positive (i = j) always weighs 1."""
    weights = (cosine_matrix(anchors, positives) <= phi).to(anchors.dtype)
    return weights.fill_diagonal_(1.0)


def refine_noise(anchors: Tensor, positives: Tensor, noise: Tensor, temperature: float, steps: int,
                 step_size: float) -> Tensor:
    """The paper's noise-based negatives: Gaussian vectors moved ``steps`` times by gradient
    ascent on the contrastive loss (InfoNCE of the anchors over the positives and the noise), each step
    the gradient normalised per vector and scaled by ``step_size``. The views are fixed here (no gradient
    reaches them); the result carries no gradient."""
    anchors, positives = anchors.detach(), positives.detach()
    in_batch = cosine_matrix(anchors, positives) / temperature
    targets = torch.arange(len(anchors), device=anchors.device)
    noise = noise.detach()
    for _ in range(steps):
        noise.requires_grad_(True)
        logits = torch.cat([in_batch, cosine_matrix(anchors, noise) / temperature], dim=1)
        (gradient,) = torch.autograd.grad(F.cross_entropy(logits, targets), noise)
        noise = (noise + step_size * F.normalize(gradient, dim=1)).detach()
    return noise


def dclr_loss(anchors: Tensor, positives: Tensor, noise: Tensor, weights: Tensor, temperature: float) -> Tensor:
    """DCLR's debiased objective: a weighted InfoNCE with the noise vectors as extra negatives,
    l_i = -log e^{s(h_i, h_i+)} / (sum_j alpha_ij e^{s(h_i, h_j+)} + sum_k e^{s(h_i, n_k)}),
    s = cos / tau, averaged over i; a weight of 0 takes a negative out of the denominator."""
    logits = torch.cat([cosine_matrix(anchors, positives), cosine_matrix(anchors, noise)], dim=1) / temperature
    log_weights = torch.cat([weights.to(logits).log(), logits.new_zeros(len(anchors), len(noise))], dim=1)
    return (torch.logsumexp(logits + log_weights, dim=1) - logits.diagonal()).mean()
