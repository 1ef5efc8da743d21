"""transformers' AdamW: the optimiser every author's code here trained with (``adam_implementation: transformers``).

SG-BERT's, ConSERT's and SCT's sentence-transformers ``fit()`` take ``transformers.AdamW``
(galsang/SG-BERT ``modules.py``; yym6472/ConSERT ``main.py`` and mrpeerat/SCT ``SCT_main.py`` with
``correct_bias=False``), and SimCSE's, DCLR's and DiffCSE's Hugging Face Trainer (transformers 4.2.1) creates
it too. transformers has since removed it, and torch's AdamW differs from it in two places:

- **epsilon**: transformers adds it to sqrt(v) and folds the bias correction into the step size,

      p <- p - lr (1 - beta1^t)^-1 (1 - beta2^t)^(1/2) m / (sqrt(v) + eps),

  where torch adds it to the corrected sqrt(v / (1 - beta2^t)): transformers' epsilon weighs
  (1 - beta2^t)^(-1/2) times more, 31.6x at step 1, 3.2x at step 100, 1.26x at step 1,000 with beta2 0.999;
- **the decoupled decay** comes after the update, on the updated weights (p <- p - lr weight_decay p), where
  torch decays the weights before it.

With ``correct_bias=False`` (``adam_bias_correction: false``, the ConSERT and SCT authors' choice) the update is
m / (sqrt(v) + eps) itself: early updates larger than Adam's by (1 - beta1^t) / (1 - beta2^t)^(1/2), 3.2x at
step 100, 1.3x at step 1,000. With ``decoupled=False`` (``optimizer: adam``, which transformers' AdamW never
was) the decay is torch Adam's L2 penalty instead: weight_decay p is added to g before the moments.

``decay_first`` (``adam_implementation: bert_tf``) is BERT's TensorFlow ``AdamWeightDecayOptimizer``
(google-research/bert ``optimization.py``, which BERT-flow's code copies): it adds weight_decay p to the uncorrected
update, so the weights decay as they were before it, p <- p - lr (m / (sqrt(v) + eps) + weight_decay p), which is
lr^2 weight_decay m / (sqrt(v) + eps) apart from transformers' order.

The learning rate may be a tensor (``make_optimizer``'s ``rate_tensor``), and each weight's step count is a
tensor on its device, as torch's capturable Adam keeps it: the update then reads nothing back to the host, so
a CUDA graph can record it.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import Tensor


class TransformersAdamW(torch.optim.Optimizer):
    def __init__(self, params: Iterable, lr: float | Tensor, betas: tuple[float, float], eps: float,
                 weight_decay: float, decoupled: bool = True, correct_bias: bool = True, decay_first: bool = False):
        # capturable: torch's load_state_dict puts a restored step count on its weight's device, as this keeps it.
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=decoupled,
                                      correct_bias=correct_bias, decay_first=decay_first, capturable=True))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            for p in params:
                if not self.state[p]:
                    self.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                     "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            states = [self.state[p] for p in params]
            exp_avgs = [state["exp_avg"] for state in states]
            exp_avg_sqs = [state["exp_avg_sq"] for state in states]
            steps = [state["step"] for state in states]
            torch._foreach_add_(steps, 1.0)
            beta1, beta2 = group["betas"]
            lr, decay = group["lr"], group["weight_decay"]
            if decay and not group["decoupled"]:
                grads = torch._foreach_add(grads, params, alpha=decay)
            torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)  # beta1 m + (1 - beta1) g
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
            # p - step_size m / (sqrt(v) + eps), as p + m / ((sqrt(v) + eps) / -step_size): torch's capturable Adam's
            # few passes over the weights, the step sizes (one a weight where corrected) kept on the device.
            denominators = torch._foreach_sqrt(exp_avg_sqs)
            torch._foreach_add_(denominators, group["eps"])
            if group["correct_bias"]:
                step_sizes = bias_corrections(steps, beta1, beta2)
                torch._foreach_mul_(step_sizes, -lr)
                torch._foreach_div_(denominators, step_sizes)
            else:
                torch._foreach_div_(denominators, -lr)
            decays = decay and group["decoupled"]
            if decays and group["decay_first"]:
                torch._foreach_mul_(params, 1.0 - lr * decay)
            torch._foreach_addcdiv_(params, exp_avgs, denominators)
            if decays and not group["decay_first"]:
                torch._foreach_mul_(params, 1.0 - lr * decay)
        return loss


def bias_corrections(steps: list[Tensor], beta1: float, beta2: float) -> list[Tensor]:
    """(1 - beta2^t)^(1/2) / (1 - beta1^t) for each step count t, on the counts' devices. 1 - beta^t is
    -expm1(t log beta): in float32, 1 - beta^t itself would lose a beta2 of 0.999's digits to cancellation
    (1e-5 of the step size at step 1), where transformers computes the step size in Python's float64."""
    first, second = one_minus_powers(steps, beta1), one_minus_powers(steps, beta2)
    torch._foreach_sqrt_(second)
    return torch._foreach_div(second, first)


def one_minus_powers(steps: list[Tensor], beta: float) -> list[Tensor]:
    """1 - beta^t for each step count t (a beta of 0 gives 1: its log is -inf, expm1(-inf) is -1)."""
    powers = torch._foreach_mul(steps, math.log(beta) if beta else -math.inf)
    torch._foreach_expm1_(powers)
    torch._foreach_neg_(powers)
    return powers
