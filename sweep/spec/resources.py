"""The ``resources`` section: what each trial reserves of a node (Ray's ``tune.with_resources``), and whether
the trials that run at once fit on the cluster's GPUs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from sweep.spec.problems import Problems


@dataclass(frozen=True)
class Resources:
    """CPUs and GPUs (a fraction of one, or a whole number) each trial reserves."""

    cpu: float
    gpu: float

    @classmethod
    def parse(cls, raw: Any, problems: Problems, defaults: Mapping[str, float]) -> Resources:
        """``resources`` (``raw``), each of cpu and gpu falling back to ``defaults``."""
        resources = {**defaults, **(raw or {})}
        for key, value in resources.items():
            if key not in ("cpu", "gpu") or not isinstance(value, (int, float)) or value < 0:
                problems.add(f"resources.{key}", f"expected cpu or gpu with a non-negative number, got {value!r}")
        gpu = resources["gpu"]
        if isinstance(gpu, (int, float)) and gpu > 1 and gpu != int(gpu):
            problems.add("resources.gpu", f"expected a fraction of one GPU (such as 0.25) or a whole number of GPUs, "
                                          f"got {gpu!r} (Ray gives a trial no more than one GPU in parts)")
        return cls(resources["cpu"], resources["gpu"])


def gpu_problem(gpu: float, concurrency: int, cluster_gpus: int) -> str | None:
    """Why ``max_concurrent_trials`` trials of ``gpu`` GPUs each cannot run at once on ``cluster_gpus``
    GPUs (None when they can): Ray packs floor(1 / gpu) trials of a fraction onto each GPU and never
    splits a trial across GPUs, so the rest would wait."""
    if gpu <= 0:
        return None
    if cluster_gpus == 0:
        return f"resources.gpu: {gpu:g} asks for a GPU, and the cluster has none (drop resources.gpu to run on CPUs)"
    per_gpu = math.floor(1 / gpu + 1e-9) if gpu <= 1 else 0
    at_once = per_gpu * cluster_gpus if gpu <= 1 else math.floor(cluster_gpus / gpu)
    if concurrency <= at_once:
        return None
    fraction = 1 / math.ceil(concurrency / cluster_gpus)
    return (f"resources.gpu: {gpu:g} with max_concurrent_trials {concurrency}: {at_once} trials fit at once on the "
            f"cluster's {cluster_gpus} GPU(s); expected max_concurrent_trials <= {at_once}, or resources.gpu <= "
            f"{fraction:.4g}")
