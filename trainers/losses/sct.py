"""SCT's losses (Limkonchotiwat et al., Section 3.2-3.3), as pure functions.

Vectors are unit-normalised; ``queue`` tensors are ``[k, d]``. SR(z, D, tau)
is the softmax over z . d_j / tau for the k queue entries (Eq. 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def similarity_log_distribution(z: Tensor, queue: Tensor, temperature: float) -> Tensor:
    """log SR(z, D, tau): log-softmax of dot products with the queue (Eq. 1), ``[b, k]``."""
    return F.log_softmax(z @ queue.T / temperature, dim=1)


def kl_to_reference(reference_log: Tensor, online_log: Tensor) -> Tensor:
    """KL(SG(p_ref) || p_online), averaged over the batch; no gradient reaches the reference."""
    reference_log = reference_log.detach()
    return (reference_log.exp() * (reference_log - online_log)).sum(1).mean()


def soft_cross_entropy(reference_log: Tensor, online_log: Tensor) -> Tensor:
    """Tables 4 and 6's "KL -> CE" as the authors' code writes it (the reading 'ce' takes):
    H(SG(p_ref), p_online) = -sum_j p_ref(j) log p_online(j), averaged over the batch, in place of
    Eq. 2's L_KL. It is KL(SG(p_ref) || p_online) + H(p_ref), and H(p_ref) has no gradient, so it
    trains exactly as KL does; only the loss value differs (by the reference's entropy). The paper
    does not define CE; its Table 4 drops (0.20, 0.32) are within its seed SD (~0.30).
    Source: github.com/mrpeerat/SCT, commit 79f8275,
    build/lib/sentence_transformers/losses/ARLSymLoss_v2_debug_CE.py, the lines (commented out there,
    beside the KL lines they replace) ``-torch.mul(momentum_Dist_A.detach(),
    F.log_softmax(sentence_Dist_A, dim=1)).sum() / batch_size``; no argmax-target CE is in that code."""
    return -(reference_log.detach().exp() * online_log).sum(1).mean()


def hard_cross_entropy(reference_log: Tensor, online_log: Tensor) -> Tensor:
    """Another reading of "KL -> CE" (Tables 4 and 6; 'ce_hard'): in place of Eq. 2's L_KL, the
    cross-entropy of p_online against the reference's most similar queue entry, argmax_j p_ref(j),
    as a one-hot target, averaged over the batch. Not in the authors' code; unlike the soft
    cross-entropy it changes the gradient (the reference's other similarities are dropped)."""
    return F.nll_loss(online_log, reference_log.detach().argmax(1))


DIVERGENCES = {"kl": kl_to_reference, "ce": soft_cross_entropy, "ce_hard": hard_cross_entropy}
"""D in Eq. 2, by its name in SCT's ``objective`` knob."""


def sct_loss(
    online: tuple[Tensor, Tensor],
    reference: tuple[Tensor, Tensor],
    queues: tuple[Tensor, Tensor],
    tau_online: float,
    tau_reference: float,
    divergence: str = "kl",
    cross_view: bool = True,
) -> Tensor:
    """L_SCT (Eq. 2) = 1/2 D(SG(c2_ref) || c1_theta) + 1/2 D(SG(c1_ref) || c2_theta), with
    c1_theta = SR(z1_theta, D2, tau_theta), c2_theta = SR(z2_theta, D1, tau_theta),
    c1_ref = SR(z1_ref, D1, tau_ref), c2_ref = SR(z2_ref, D2, tau_ref) and D = KL by default
    (``divergence``: a name in :data:`DIVERGENCES`, the "KL -> CE" ablation's readings).

    ``cross_view=False`` is the identical-view ablation: each online view is
    compared with the reference of the same view, through that view's queue.
    """
    (z1, z2), (r1, r2), (d1, d2) = online, reference, queues
    measure = DIVERGENCES[divergence]
    if cross_view:
        c1_online, c2_online = (similarity_log_distribution(z1, d2, tau_online),
                                similarity_log_distribution(z2, d1, tau_online))
        targets = (similarity_log_distribution(r2, d2, tau_reference),
                   similarity_log_distribution(r1, d1, tau_reference))
    else:
        c1_online, c2_online = (similarity_log_distribution(z1, d1, tau_online),
                                similarity_log_distribution(z2, d2, tau_online))
        targets = (similarity_log_distribution(r1, d1, tau_reference),
                   similarity_log_distribution(r2, d2, tau_reference))
    return 0.5 * measure(targets[0], c1_online) + 0.5 * measure(targets[1], c2_online)


def queue_info_nce(anchor: Tensor, positive: Tensor, queue: Tensor, temperature: float) -> Tensor:
    """InfoNCE of ``anchor`` against SG(``positive``) with the ``queue`` as negatives (MoCo-style),
    averaged over the batch."""
    logits = torch.cat([(anchor * positive.detach()).sum(1, keepdim=True), anchor @ queue.T], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(len(anchor), dtype=torch.long, device=anchor.device))


def queue_contrastive_loss(
    online: tuple[Tensor, Tensor], reference: tuple[Tensor, Tensor], queues: tuple[Tensor, Tensor], temperature: float
) -> Tensor:
    """The 'distribution -> contrastive' ablation (Table 4) with queues, MoCo-like: InfoNCE where z1_theta's
    positive is SG(z2_ref) and its negatives are D2, and symmetrically for view 2."""
    (z1, z2), (r1, r2), (d1, d2) = online, reference, queues
    return 0.5 * queue_info_nce(z1, r2, d2, temperature) + 0.5 * queue_info_nce(z2, r1, d1, temperature)


def in_batch_contrastive_loss(online: tuple[Tensor, Tensor], reference: tuple[Tensor, Tensor],
                              temperature: float) -> Tensor:
    """The 'distribution -> contrastive' ablation (Table 4) without queues, "contrastive learning similar to
    SimCSE" (Section 5.4): SimCSE's in-batch InfoNCE (its Eq. 1) of z1_theta against the batch's SG(z2_ref),
    its own the positive and the others the negatives, each counted once, and symmetrically for view 2. All
    vectors are unit vectors, so the dot product is the cosine."""
    (z1, z2), (r1, r2) = online, reference
    targets = torch.arange(len(z1), device=z1.device)
    return 0.5 * (F.cross_entropy(z1 @ r2.detach().T / temperature, targets)
                  + F.cross_entropy(z2 @ r1.detach().T / temperature, targets))
