"""Which trial or line is best: by the sweep's metric and mode, the one rule of every ranking.

The end-of-sweep summary's best trial, ``sweep export``'s default trial and the
order of a sweep table's sampled lines are all :func:`best_first`: the scored
items, best first (ties in their given order), then those without a score.
A sweep recorded before its metric was (a run without ``sweep.metric``) ranks
by :data:`DEFAULT_METRIC`, highest first: the spec's default, and the one
fallback (:func:`ranked_by`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from trainers.metrics import Metric

if TYPE_CHECKING:  # the record imports this module, and stays free of pandas
    import pandas as pd

DEFAULT_METRIC = Metric.BEST_DEV
DEFAULT_MODE = "max"
"""What ranks the trials of a sweep that did not record it (the spec's default metric and mode)."""

Item = TypeVar("Item")


def ranked_by(metric: str | None, mode: str | None) -> tuple[str, str]:
    """(metric, mode) as recorded, with :data:`DEFAULT_METRIC` and :data:`DEFAULT_MODE` where either is not."""
    return (str(metric), str(mode or DEFAULT_MODE)) if metric else (DEFAULT_METRIC, DEFAULT_MODE)


def frame_ranking(trials: pd.DataFrame) -> tuple[str, str]:
    """(metric, mode) a trials frame's runs recorded (``sweep_metric``, ``sweep_mode``), or the default."""
    metric = next((str(m) for m in trials["sweep_metric"].dropna() if str(m)), None)
    mode = next((str(m) for m in trials["sweep_mode"].dropna() if str(m)), None)
    return ranked_by(metric, mode)


def best_first(items: Sequence[Item], score: Callable[[Item], float | None], mode: str) -> list[Item]:
    """``items`` with a score, best first by ``mode`` (``max``: highest; ties keep their order), then those
    without one (None or NaN) in their order."""
    scores = [score(item) for item in items]
    ranked = sorted([(value, item) for value, item in zip(scores, items) if _scored(value)],
                    key=lambda pair: pair[0], reverse=mode == "max")
    return [item for _, item in ranked] + [item for value, item in zip(scores, items) if not _scored(value)]


def best(items: Sequence[Item], score: Callable[[Item], float | None], mode: str) -> Item | None:
    """The best scored item (the first of :func:`best_first`), or None where none has a score."""
    ranked = best_first(items, score, mode)
    return ranked[0] if ranked and _scored(score(ranked[0])) else None


def _scored(value: float | None) -> bool:
    return value is not None and not math.isnan(value)
