"""Adam without bias correction: the optimiser the ConSERT and SCT authors trained with.

Their code passes ``transformers.AdamW(correct_bias=False)`` to sentence-transformers' ``fit()``
(yym6472/ConSERT ``main.py``, mrpeerat/SCT ``SCT_main.py``), an optimiser transformers has since removed and
torch never had. Without Kingma and Ba's bias correction (Algorithm 1's m_t / (1 - beta1^t) and
v_t / (1 - beta2^t)) the early updates are larger than Adam's, by (1 - beta1^t) / (1 - beta2^t)^(1/2): with
betas (0.9, 0.999), 3.2x at step 100, 1.3x at step 1,000, then towards 1. This class is that update, step for
step:

    m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
    p <- p - lr m / (sqrt(v) + eps)
    p <- p - lr weight_decay p          (decoupled: after the update, on the updated weights; transformers' order)

With ``decoupled=False`` (``optimizer: adam``) the decay is torch Adam's L2 penalty instead: weight_decay p is
added to g before the moments. The learning rate may be a tensor (``make_optimizer``'s ``rate_tensor``): the
update then reads nothing back to the host and has no step count, so a CUDA graph can record it.
"""

from __future__ import annotations

from typing import Iterable

import torch


class UncorrectedAdam(torch.optim.Optimizer):
    def __init__(self, params: Iterable, lr: float | torch.Tensor, betas: tuple[float, float], eps: float,
                 weight_decay: float, decoupled: bool = True):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=decoupled))

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
                    self.state[p] = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            exp_avgs = [self.state[p]["exp_avg"] for p in params]
            exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in params]
            beta1, beta2 = group["betas"]
            lr, decay = group["lr"], group["weight_decay"]
            if decay and not group["decoupled"]:
                grads = torch._foreach_add(grads, params, alpha=decay)
            torch._foreach_mul_(exp_avgs, beta1)
            torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
            denominators = torch._foreach_sqrt(exp_avg_sqs)
            torch._foreach_add_(denominators, group["eps"])
            updates = torch._foreach_div(exp_avgs, denominators)
            torch._foreach_mul_(updates, lr)
            torch._foreach_sub_(params, updates)
            if decay and group["decoupled"]:
                torch._foreach_add_(params, torch._foreach_mul(params, -lr * decay))
        return loss
