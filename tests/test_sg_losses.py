"""SG-BERT's losses against slow versions written as loops straight from the equations."""

import pytest
import torch
from torch import nn

from trainers.losses.self_guided import (
    parameter_distance,
    sg_base_loss,
    sg_opt1_loss,
    sg_opt2_loss,
    sg_opt3_loss,
    sg_opt_bt_loss,
)


def phi(u, v, tau):
    """exp(cos(u, v) / tau)"""
    return torch.exp(torch.dot(u, v) / (u.norm() * v.norm()) / tau)


def slow_base(c, h, tau):
    x = list(c) + list(h)
    b = len(c)
    total = 0
    for m in range(2 * b):
        match = m + b if m < b else m - b
        z = sum(phi(x[m], x[n], tau) for n in range(2 * b) if n != m)
        total = total - torch.log(phi(x[m], x[match], tau) / z)
    return total / (2 * b)


def slow_opt1(c, h, tau):
    b = len(c)
    total = 0
    for i in range(b):
        z = sum(phi(c[i], c[j], tau) for j in range(b) if j != i) + sum(phi(c[i], h[j], tau) for j in range(b))
        total = total - torch.log(phi(c[i], h[i], tau) / z)
    return total / b


def slow_opt2(c, h, tau):
    b = len(c)
    total = 0
    for i in range(b):
        total = total - torch.log(phi(c[i], h[i], tau) / sum(phi(c[i], h[j], tau) for j in range(b)))
    return total / b


def slow_opt3(c, h, tau):
    b, layers = h.shape[:2]
    total = 0
    for i in range(b):
        for k in range(layers):
            positive = phi(c[i], h[i, k], tau)
            others = sum(phi(c[i], h[m, n], tau) for m in range(b) if m != i for n in range(layers))
            total = total - torch.log(positive / (positive + others))
    return total / (b * layers)


CASES = [
    (sg_base_loss, slow_base, False),
    (sg_opt1_loss, slow_opt1, False),
    (sg_opt2_loss, slow_opt2, False),
    (sg_opt3_loss, slow_opt3, True),
]


@pytest.mark.parametrize("fast, slow, all_layers", CASES, ids=["sg", "opt1", "opt2", "opt3"])
@pytest.mark.parametrize("tau", [0.5, 0.05])
def test_loss_and_gradient_match_the_equation(fast, slow, all_layers, tau):
    torch.manual_seed(0)
    c = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    h = torch.randn(5, 4, 6, dtype=torch.float64) if all_layers else torch.randn(5, 6, dtype=torch.float64)
    h.requires_grad_(True)
    fast_value = fast(c, h, tau)
    fast_grads = torch.autograd.grad(fast_value, (c, h))
    slow_value = slow(c, h, tau)
    slow_grads = torch.autograd.grad(slow_value, (c, h))
    torch.testing.assert_close(fast_value, slow_value)
    for a, b in zip(fast_grads, slow_grads):
        torch.testing.assert_close(a, b)


def test_losses_differ_from_each_other():
    torch.manual_seed(1)
    c, h = torch.randn(6, 8), torch.randn(6, 8)
    values = {f.__name__: float(f(c, h, 0.1)) for f in (sg_base_loss, sg_opt1_loss, sg_opt2_loss)}
    assert len(set(round(v, 6) for v in values.values())) == 3


def test_parameter_distance_is_the_sum_of_squared_differences():
    torch.manual_seed(2)
    fixed, tuned = nn.Linear(3, 2), nn.Linear(3, 2)
    expected = sum(((a - b) ** 2).sum().item() for a, b in zip(tuned.parameters(), fixed.parameters()))
    assert parameter_distance(tuned, fixed).item() == pytest.approx(expected)
    assert parameter_distance(fixed, fixed).item() == 0.0


def slow_opt_bt(c, views, bt, tau, bt_into):
    """L^opt3 over each sentence's guides, listed one by one: the original's views and/or the back-translation's
    (BERT_F's views of it, or BERT_T's vector of it); every other sentence's guides are the negatives."""
    b = len(c)
    guides = []
    for i in range(b):
        if bt_into == "fixed":
            guides.append(list(bt[i]))
        elif bt_into == "tuned":
            guides.append(list(views[i]) + [bt[i]])
        else:
            guides.append(list(views[i]) + list(bt[i]))
    total, count = 0, 0
    for i in range(b):
        others = sum(phi(c[i], g, tau) for m in range(b) if m != i for g in guides[m])
        for g in guides[i]:
            positive = phi(c[i], g, tau)
            total, count = total - torch.log(positive / (positive + others)), count + 1
    return total / count


@pytest.mark.parametrize("bt_into", ["fixed", "tuned", "fixed_join"])
def test_bt_loss_and_gradient_match_the_equation(bt_into):
    torch.manual_seed(0)
    c = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    views = torch.randn(5, 4, 6, dtype=torch.float64, requires_grad=True)
    bt = torch.randn(*((5, 6) if bt_into == "tuned" else (5, 4, 6)), dtype=torch.float64, requires_grad=True)
    inputs = (c, bt) if bt_into == "fixed" else (c, views, bt)
    fast = sg_opt_bt_loss(c, None if bt_into == "fixed" else views, bt, 0.1, bt_into)
    slow = slow_opt_bt(c, views, bt, 0.1, bt_into)
    torch.testing.assert_close(fast, slow)
    for a, b in zip(torch.autograd.grad(fast, inputs), torch.autograd.grad(slow, inputs)):
        torch.testing.assert_close(a, b)


def test_bt_losses_differ_from_sg_opt_and_from_each_other():
    torch.manual_seed(2)
    c, views = torch.randn(4, 6), torch.randn(4, 3, 6)
    bt_views, bt_vector = torch.randn(4, 3, 6), torch.randn(4, 6)
    values = [float(sg_opt3_loss(c, views, 0.1)), float(sg_opt_bt_loss(c, None, bt_views, 0.1, "fixed")),
              float(sg_opt_bt_loss(c, views, bt_vector, 0.1, "tuned")),
              float(sg_opt_bt_loss(c, views, bt_views, 0.1, "fixed_join"))]
    assert len({round(v, 6) for v in values}) == 4
