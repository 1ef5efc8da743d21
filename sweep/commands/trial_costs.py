"""The arithmetic of ``sweep plan --estimate`` (:mod:`sweep.commands.estimate`), from timings measured on this
machine to a sweep's trial-minutes and wall time: what one trial costs from its stages' plans, which trials read
their stages before the last from an earlier one (``share_stages``), how the trials fill the slots the spec's
resources leave, and how much slower trials that share a GPU run. Nothing here measures or imports torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from sweep.spec.resources import Resources

GPU_SHARING = {
    "small": ((1, 1.0), (2, 1.69), (4, 2.53), (8, 2.63)),
    "base": ((1, 1.0), (2, 1.40), (4, 1.50)),
    "base, cuda_graph": ((1, 1.0), (2, 0.94), (4, 0.94)),
}
"""Steps per second of k SimCSE trials at once on one GPU against one trial alone, for a small model (the
bundled MiniLM, 22M parameters) and BERT-base's shape (110M): ``python -m benchmarks.gpu`` on an NVIDIA H100
80GB HBM3 at commit 1297feb; and BERT-base trials with ``cuda_graph`` (bf16, ``pad_to_max_length``), whose one
replayed trial fills the card, on an NVIDIA H200 at commit 713bfc3 (benchmarks/results.md, docs/gpu.md). A small
model's graphed trials have not been measured sharing a GPU: they are costed as its eager ones."""
SMALL_MODEL_PARAMETERS = 50e6
"""Models up to this size share a GPU as the small model measured in :data:`GPU_SHARING`; larger, as BERT-base."""


@dataclass(frozen=True)
class StageTiming:
    """Seconds measured for one stage of a trial."""

    name: str  # the stage's (trainers.method.Stage)
    setup: float  # building its objective and examples, and its warm-up steps (warmup_steps)
    table_per_example: float  # the frozen-output table pass, per training example (0: no table)
    step: float  # one training step
    dev: float  # one STS-B dev evaluation


@dataclass(frozen=True)
class Timing:
    """Seconds measured for one distinct method and model."""

    setup: float  # loading the model and the evaluation sets
    stages: tuple[StageTiming, ...]  # one per stage of its trials (none: a method that trains nothing)
    dev: float  # one STS-B dev evaluation of the final encoder
    test: float  # the final evaluation on the seven test sets
    parameters: float = 0.0  # the encoder's: how the trial shares a GPU (GPU_SHARING)


@dataclass(frozen=True)
class StagePlan:
    """What a trial's stage will do: its training steps and dev evaluations, and the examples of its frozen-output
    table (0: no table)."""

    steps: int
    evaluations: int
    examples: int = 0


@dataclass(frozen=True)
class TrialCost:
    """One trial's expected seconds, in the parts that trials sharing their stages before the last wait on."""

    setup: float  # loading the model and the evaluation sets
    stages: tuple[float, ...]  # each stage: its setup, table, steps and dev evaluations
    test: float
    shared_prefix: str | None = None  # the key of its stages before the last, shared on a node (None: not shared)

    @property
    def seconds(self) -> float:
        return self.setup + sum(self.stages) + self.test

    @property
    def reading_seconds(self) -> float:
        """Its seconds where it reads its stages before the last (:attr:`shared_prefix`) from another trial."""
        return self.setup + self.stages[-1] + self.test

    def times(self, factor: float) -> TrialCost:
        return TrialCost(self.setup * factor, tuple(s * factor for s in self.stages), self.test * factor,
                         self.shared_prefix)


def gpu_sharing_slowdown(trials_on_gpu: int, parameters: float, graphed: bool = False) -> float:
    """How many times longer each of ``trials_on_gpu`` trials sharing one GPU takes than one alone (``graphed``:
    trials with ``cuda_graph``): ``trials_on_gpu`` over the measured speed-up (:data:`GPU_SHARING`), linear
    between the measured counts, and past the last the last measured speed-up (the GPU is full)."""
    size = "small" if parameters <= SMALL_MODEL_PARAMETERS else "base"
    points = GPU_SHARING[f"{size}, cuda_graph" if graphed and f"{size}, cuda_graph" in GPU_SHARING else size]
    speedup = points[-1][1]
    for (low, low_speedup), (high, high_speedup) in zip(points, points[1:]):
        if low <= trials_on_gpu <= high:
            speedup = low_speedup + (high_speedup - low_speedup) * (trials_on_gpu - low) / (high - low)
            break
    return max(1.0, trials_on_gpu / speedup)


def trial_cost(timing: Timing, plans: Sequence[StagePlan], shared_prefix: str | None = None) -> TrialCost:
    """One trial's expected seconds: setup, then each stage's setup, table, steps and dev evaluations
    (``plans``, one per stage of ``timing``), then the final test. A trial that trains nothing: setup, one dev,
    the test."""
    if not any(plan.steps for plan in plans):
        return TrialCost(timing.setup, (timing.dev,), timing.test)
    stages = tuple(stage.setup + stage.table_per_example * plan.examples + plan.steps * stage.step
                   + plan.evaluations * stage.dev for stage, plan in zip(timing.stages, plans, strict=True))
    return TrialCost(timing.setup, stages, timing.test, shared_prefix)


def reads_prefix(trials: Sequence[TrialCost]) -> list[bool]:
    """Whether each trial reads its stages before the last from an earlier trial of the same ``shared_prefix``
    (the first of a key trains them)."""
    seen: set[str] = set()
    reads = []
    for trial in trials:
        reads.append(trial.shared_prefix in seen)
        if trial.shared_prefix is not None:
            seen.add(trial.shared_prefix)
    return reads


def wall_seconds(trials: Sequence[TrialCost], slots: int, worker_start: float = 0.0) -> float:
    """The sweep's wall time: the trials, in the order Ray Tune starts them, each on the first of ``slots``
    workers to be free; a worker first starts (``worker_start`` seconds); the last to finish. A trial that reads
    its stages before the last (:func:`reads_prefix`) waits, after its setup, until the first trial of its key has
    trained them, then trains its last stage."""
    loads = [worker_start] * min(max(1, slots), len(trials))
    prefix_done: dict[str, float] = {}  # when the first trial of a key has trained its stages before the last
    for trial, reads in zip(trials, reads_prefix(trials)):
        slot = loads.index(min(loads))
        start = loads[slot]
        if reads:
            loads[slot] = max(start + trial.setup, prefix_done[trial.shared_prefix]) + trial.stages[-1] + trial.test
            continue
        if trial.shared_prefix is not None:
            prefix_done[trial.shared_prefix] = start + trial.setup + sum(trial.stages[:-1])
        loads[slot] = start + trial.seconds
    return max(loads, default=0.0)


def own_seconds(trials: Sequence[TrialCost]) -> list[float]:
    """Each trial's seconds of its own work: a trial that reads its stages before the last, only its setup, last
    stage and test (waiting is not work)."""
    return [trial.reading_seconds if reads else trial.seconds for trial, reads in zip(trials, reads_prefix(trials))]


def slots(resources: Resources, max_concurrent_trials: int, cpus: int, gpus: int) -> int:
    """Trials that run at once: max_concurrent_trials, capped by the CPUs (and GPUs) each trial reserves."""
    fit = math.floor(cpus / resources.cpu) if resources.cpu else max_concurrent_trials
    if resources.gpu:
        per_gpu = math.floor(1 / resources.gpu + 1e-9) if resources.gpu <= 1 else 1 / resources.gpu
        fit = min(fit, math.floor(per_gpu * gpus))
    return max(1, min(max_concurrent_trials, fit))
