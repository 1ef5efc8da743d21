"""Whole SimCSE trials in each step mode: whether the fastest step trains to the same scores."""

from __future__ import annotations

from typing import Any, Callable

from benchmarks.gpu.graphs import GRAPHED
from trainers.metrics import Metric

TRIAL_MODES = {
    "eager, fp32": {"train_precision": "fp32"},
    "eager, bf16": {"train_precision": "bf16"},
    "cuda_graph, tf32": {**GRAPHED, "train_precision": "tf32"},
    "cuda_graph, auto": {**GRAPHED, "train_precision": "auto"},
}
"""How the trials part runs each SimCSE trial's steps: the default (fp32, the reference), eager bf16, and the
fastest steps measured on an H200 (``cuda_graph``, TF32, and ``auto``: bf16 on such a card, which each row
records)."""
TRIAL_SEEDS = (1, 2, 3)
TINY_TRIAL = {"train_limit": 48, "batch_size": 8, "max_seq_length": 16, "eval_every": 3, "eval_max_pairs": 50}
"""The tiny version's trial: a few steps, a few pairs of each STS set."""


def trial_scores(model: str, seeds: tuple[int, ...], tiny: bool,
                 measured: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
    """Whole SimCSE trials through :func:`trainers.training.loop.run_trial`, as a sweep's worker runs them, in
    each of :data:`TRIAL_MODES` for each of ``seeds`` (the modes interleaved): scores, seconds, replays.
    ``measured`` gets the rows so far after each trial (the part is the longest; a call may end inside it)."""
    from trainers.metrics import ReportKey
    from trainers.training.loop import run_trial

    rows = []
    kept = (ReportKey.TRAIN_PRECISION, Metric.TEST_AVG, Metric.BEST_DEV, Metric.STEPS, Metric.TRAIN_SECONDS,
            Metric.WALL_SECONDS, Metric.GRAPHED_STEPS)
    for seed in seeds:
        for mode, knobs in TRIAL_MODES.items():
            final = run_trial({"method": "simcse", "model": model, "seed": seed, **knobs,
                               **(TINY_TRIAL if tiny else {})})
            rows.append({"mode": mode, "seed": seed, **{key: final.get(key) for key in kept}})
            measured(rows)
    return rows
