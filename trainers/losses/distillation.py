"""SCT's distillation losses (Limkonchotiwat et al., Sections 3.4 and 5.4), as pure functions.

``online`` holds the student's unit vectors of views 1 and 2, mapped into the
teacher's space; ``teacher`` holds f_large's unit vectors of the same views;
``queues`` are instance queues of f_large's vectors (T1 of view 1, T2 of view 2).
Every teacher input is under stop-gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from trainers.losses.sct import kl_to_reference, queue_info_nce, sct_loss, similarity_log_distribution

Pair = tuple[Tensor, Tensor]


def cd_loss(online: Pair, teacher: Pair, queues: Pair, tau_online: float, tau_teacher: float) -> Tensor:
    """L_CD (Eq. 4) = 1/2 KL(SG(c2_large) || c1_theta) + 1/2 KL(SG(c1_large) || c2_theta), with
    c1_large = SR(z1_large, D1, tau_ref), c2_large = SR(z2_large, D2, tau_ref): Eq. 2 with f_large
    as the reference network."""
    return sct_loss(online, teacher, queues, tau_online, tau_teacher)


def mse_loss(online: Pair, teacher: Pair) -> Tensor:
    """L_MSE (Section 5.4.2): the mean squared error between z_large and z_theta, averaged over the views."""
    return 0.5 * (F.mse_loss(online[0], teacher[0].detach()) + F.mse_loss(online[1], teacher[1].detach()))


def congen_loss(online: Pair, teacher_first: Tensor, queue: Tensor, tau_online: float, tau_teacher: float) -> Tensor:
    """L_ConGen (Limkonchotiwat et al. 2022): the teacher's distribution of view 1 over its
    queue extended by the batch's teacher vectors is the target of the student's view 1
    (control) and of its view 2 (generalisation); 1/2 KL(SG(p_T) || p_con) + 1/2 KL(SG(p_T) || p_gen).
    (The authors' code writes it as cross-entropy, which differs by the target's constant entropy.)"""
    candidates = torch.cat([queue, teacher_first.detach()])
    target = similarity_log_distribution(teacher_first, candidates, tau_teacher)
    return 0.5 * sum(kl_to_reference(target, similarity_log_distribution(z, candidates, tau_online)) for z in online)


def ckd_loss(online: Pair, teacher: Pair, queues: Pair, temperature: float) -> Tensor:
    """L_CKD (Wu et al. 2021, contrastive distillation with a memory bank): InfoNCE with the
    student's vector as anchor, the teacher's vector of the same view as positive and the
    teacher's queue of that view as negatives, averaged over the two views."""
    return 0.5 * (queue_info_nce(online[0], teacher[0], queues[0], temperature)
                  + queue_info_nce(online[1], teacher[1], queues[1], temperature))
