"""DiffCSE's replaced-token detection (Chuang et al. 2022, "DiffCSE: Difference-based Contrastive
Learning for Sentence Embeddings", Section 3), as a pure function. Its contrastive part is SimCSE's
:func:`trainers.losses.contrastive.info_nce`; the objective adds the two as L = L_contrast + lambda L_RTD.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def rtd_loss(logits: Tensor, replaced: Tensor, positions: Tensor | None = None) -> Tensor:
    """L_RTD (Section 3): the cross-entropy of the discriminator's two-way prediction (kept, replaced) for
    every token of the edited sentence x'', -1(x''_t = x_t) log D(x'', h, t) - 1(x''_t != x_t)
    log(1 - D(x'', h, t)), averaged over ``positions``, or over all the batch's positions when None (the
    authors' code: padding included, labelled kept).

    ``logits`` is ``[n, T, 2]`` (class 1: replaced), ``replaced`` ``[n, T]``; ``positions`` are indices into the
    ``n * T`` positions, row by row: the real tokens' (:meth:`TokenBatch.real_positions`, found in the host's
    mask: a boolean index by the device's mask would read it back to count them)."""
    logits, replaced = logits.flatten(0, 1), replaced.flatten()
    if positions is not None:
        logits, replaced = logits.index_select(0, positions), replaced.index_select(0, positions)
    return F.cross_entropy(logits.float(), replaced.long())
