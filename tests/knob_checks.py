"""The check every "this knob changes the loss" test of a method makes, with its control case.

Both losses must come from the same seeded state (the same head and classifier weights, the same
augmentation draws), so that the knob is the only difference. Then a knob at the default on both sides
gives the same loss to the bit, which shows that the comparison can fail, and any other value gives
another loss.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest


def assert_knob_changes_the_loss(loss: Callable[..., float], knob: str, value: Any, default: Any) -> None:
    """``loss(**{knob: value})`` against ``loss()``: equal when ``value`` is ``default`` (the control),
    different otherwise."""
    changed, reference = loss(**{knob: value}), loss()
    if value == default:
        assert changed == reference, f"{knob}={value!r} is the default, yet the loss moved: the two sides differ"
    else:
        assert changed != pytest.approx(reference, rel=1e-6), f"{knob}={value!r} left the loss as it was"
