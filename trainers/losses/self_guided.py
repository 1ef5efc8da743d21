"""SG-BERT's losses (Kim et al., ACL 2021, section 3), as pure functions.

``c`` holds the sentence vectors c_i of BERT_T (``[b, d]``); ``h`` holds views
of BERT_F: one view per sentence (``[b, d]``) for the single-view losses, or
every layer's view (``[b, l+1, d]``) for L_opt. Vectors arrive already passed
through the projection head f; similarities are cosines divided by tau.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainers.losses.contrastive import cosine_matrix, info_nce, nt_xent


def sg_base_loss(c: Tensor, h: Tensor, temperature: float) -> Tensor:
    """L^base without the regulariser: NT-Xent over X = {c_i} u {h_i}, 2b vectors,
    with mu matching c_i and h_i (Section 3.1), averaged over the 2b anchors.

    Also the loss of the Contrastive (BT) baseline (Appendix A.2, "identical with our Contrastive (SG) model,
    except that it utilizes back-translation to generate positive samples"): there h_i is BERT_T's [CLS] of
    sentence i's back-translation."""
    return nt_xent(c, h, temperature)


def sg_opt1_loss(c: Tensor, h: Tensor, temperature: float) -> Tensor:
    """L^opt1 (Section 3.2): -log phi(c_i, h_i) / Z^, with
    Z^ = sum_{j != i} phi(c_i, c_j) + sum_j phi(c_i, h_j); mean over i."""
    to_views = cosine_matrix(c, h) / temperature
    to_sentences = cosine_matrix(c, c) / temperature
    eye = torch.eye(len(c), dtype=torch.bool, device=c.device)
    logits = torch.cat([to_views, to_sentences.masked_fill(eye, float("-inf"))], dim=1)
    return F.cross_entropy(logits, torch.arange(len(c), device=c.device))


def sg_opt2_loss(c: Tensor, h: Tensor, temperature: float) -> Tensor:
    """L^opt2 (Section 3.2): -log phi(c_i, h_i) / sum_j phi(c_i, h_j); mean over i."""
    return info_nce(c, h, temperature)


def sg_opt3_loss(c: Tensor, h: Tensor, temperature: float) -> Tensor:
    """L^opt without the regulariser (Section 3.2): every layer's view guides c_i.

    L_{i,k} = -log phi(c_i, h_{i,k}) / (phi(c_i, h_{i,k}) + sum_{m != i} sum_n phi(c_i, h_{m,n})),
    summed over i = 1..b and k = 0..l and divided by b(l+1). ``h`` is ``[b, l+1, d]``.
    """
    b, layers, _ = h.shape
    scores = (F.normalize(c, dim=-1) @ F.normalize(h, dim=-1).reshape(b * layers, -1).T) / temperature
    scores = scores.view(b, b, layers)  # scores[i, m, n] = log phi(c_i, h_{m,n})
    pairs = torch.arange(b, device=c.device)  # made on the device: a CUDA graph records no host copy
    positives = scores[pairs, pairs]  # [b, l+1]
    others = scores.masked_fill(torch.eye(b, dtype=torch.bool, device=c.device)[:, :, None], float("-inf"))
    negatives = torch.logsumexp(others.view(b, -1), dim=1, keepdim=True)  # log sum_{m != i, n} phi
    # -log(p / (p + N)) = log(1 + N / p) = softplus(log N - log p)
    return F.softplus(negatives - positives).mean()


def sg_opt_bt_loss(
    c: Tensor, views: Tensor | None, back_translation: Tensor, temperature: float, bt_into: str
) -> Tensor:
    """L^opt without the regulariser (Section 3.2, L^opt3_{i,k} averaged over i and k) with each sentence's
    back-translation joined as a positive: SG-BERT's "BT + SG-OPT" (Section 6, Table 7: "inserting the
    original sentence into BERT_T and its back-translation into BERT_T when running our framework").

    The paper leaves open which network reads the back-translation, so ``bt_into`` chooses; in every case the
    back-translation gives positives of the same kind as the views h_{i,k} (all through f), and
    :func:`sg_opt3_loss` runs over the guides, so that sentence m's guides are sentence i's negatives:

    - ``fixed`` (the framework's two inputs filled, the second BERT_T read as BERT_F): BERT_F reads the
      back-translation instead of the original; its l+1 views (``back_translation``, ``[b, l+1, d]``) are the
      guides, ``views`` is not used (None);
    - ``tuned`` (as printed, BERT_F keeps the original): BERT_T also reads the back-translation; its [CLS]
      vector c'_i (``back_translation``, ``[b, d]``, with gradient) is one more guide h_{i,l+1} beside the
      l+1 views (``views``, ``[b, l+1, d]``) of the original;
    - ``fixed_join``: BERT_F reads both; the 2(l+1) views of the original and of its back-translation guide c_i.
    """
    if bt_into == "tuned":
        guides = torch.cat([views, back_translation[:, None]], dim=1)
    elif bt_into == "fixed":
        guides = back_translation
    elif bt_into == "fixed_join":
        guides = torch.cat([views, back_translation], dim=1)
    else:
        raise ValueError(f"unknown bt_into {bt_into!r} (the knob of trainers.methods.sg lists the choices)")
    return sg_opt3_loss(c, guides, temperature)


def parameter_distance(tuned: nn.Module, fixed: nn.Module) -> Tensor:
    """L^reg = ||BERT_F - BERT_T||_2^2: the sum of squared differences of all parameters."""
    fixed_parameters = dict(fixed.named_parameters())
    return sum(((p - fixed_parameters[name]) ** 2).sum() for name, p in tuned.named_parameters())
