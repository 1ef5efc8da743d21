"""``python -m sweep plan SPEC --estimate``: how long the whole sweep will take on this machine.

Each distinct method and model of the spec (method, model, layers, teacher, batch size, token limit) is timed once
here: loading it, then each of its stages in turn (an NLI stage, then the flow or the transfer): the frozen-output
table pass per training example (SG, SCT distillation), :data:`TIMED_STEPS` training steps through the real loop
on batches drawn across the whole training set (its first examples are not typical: STS-B's train file starts
with short captions), after the steps whose cost is paid once per stage (the first; with ``cuda_graph`` also the
graph's warm-up and recording, so that the timed steps are replays), which count as the stage's setup, and one
STS-B dev evaluation. Every trial is then costed from its stages' planned steps (the loop's count: corpus, batch
size, epochs, max_steps; labelled NLI by its known size) and dev evaluations (where its ``eval_grid`` puts them),
plus its final test, which is timed as the dev evaluation scaled by the pairs of the seven test sets. Early
stopping is ignored, so the estimate is an upper bound for a spec with ``patience``. The trials go onto the slots
the spec's ``resources`` and ``max_concurrent_trials`` leave on this machine in the order Ray Tune starts them (the
spec's order, each trial when a slot is free), and each slot first starts its worker process (timed here: a fresh
Python importing the trial's code); the last slot to finish is the sweep's wall time. Stages before a trial's last
that an earlier trial of the node trains alike (``share_stages``) are trained once: the later trial waits for
them in its slot, then trains only its last stage (reading the kept state is not costed). Trials that share a GPU
(``resources.gpu`` below 1) run slower than timed alone, by what ``GPU_SHARING`` measured; trials that share CPU
cores with others run slower too, which the estimate does not model, nor Ray's own start (a few seconds). Here the
timing and the lines printed; the arithmetic from the timings to the wall time is :mod:`sweep.commands.trial_costs`.
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any, Callable, Mapping, Sequence

from sweep.commands.trial_costs import (
    StagePlan,
    StageTiming,
    Timing,
    TrialCost,
    gpu_sharing_slowdown,
    own_seconds,
    reads_prefix,
    slots,
    trial_cost,
    wall_seconds,
)
from sweep.spec.sweep_spec import SweepSpec

TIMED_STEPS = 4
"""Training steps timed per distinct method and model, after its :func:`warmup_steps`."""


def worker_start_seconds() -> float:
    """How long a fresh trial worker takes to import the trial's code (torch, transformers, Ray Tune)."""
    started = time.perf_counter()
    imports = "import sweep.run.trial, trainers.training.loop"
    subprocess.run([sys.executable, "-c", imports], check=True, capture_output=True)
    return time.perf_counter() - started


def spread_sample(examples: Sequence[Any], count: int) -> list[Any]:
    """``count`` examples taken at even intervals across ``examples``: typical lengths, unlike its head."""
    stride = max(1, len(examples) // count)
    return list(examples[::stride][:count])


STEP_MODE_KNOBS = ("train_precision", "eval_precision", "torch_compile", "torch_compile_mode", "pad_to_max_length",
                   "cuda_graph")
"""Knobs that change how fast the same step runs, not what it computes (beyond float rounding): rows that differ
only in them are timed apart (``search_spaces/simcse_step_modes.yaml``)."""


def timing_key(config: Mapping[str, Any]) -> tuple:
    """What decides a trial's step and evaluation times (its seed and loss knobs barely move them): with its
    stages (ConSERT's supervision, the flow's NLI stage), each timed."""
    from trainers.registry import get_method

    method = get_method(config["method"])
    stages = tuple(stage.name for stage in method.stages(config)) if method.trains else ()
    return (config["method"], stages, config["model"], config["model_layers"], config.get("teacher", ""),
            config.get("batch_size"), config.get("max_seq_length"), config["eval_max_pairs"], config["device"],
            *(config.get(knob) for knob in STEP_MODE_KNOBS))


def warmup_steps(config: Mapping[str, Any]) -> int:
    """The steps of a trial that cost more than the rest, once: the first (lazy set-up: the optimiser's state,
    the kernels' choice, compiling); with ``cuda_graph``, the eager steps before the graph and its recording."""
    from trainers.training.graphs import WARMUP_STEPS

    return WARMUP_STEPS + 1 if config.get("cuda_graph") else 1


class DevTimes:
    """An STS evaluator whose dev evaluation notes when it started and how long it took."""

    def __init__(self, evaluator: Any):
        self.evaluator = evaluator
        self.started = self.seconds = 0.0

    def dev(self, encode: Callable) -> dict[str, float]:
        self.started = time.perf_counter()
        scores = self.evaluator.dev(encode)
        self.seconds = time.perf_counter() - self.started
        return scores


def note_when_warm(objective: Any, warmup: int, device: Any) -> list[float]:
    """The time at which ``objective``'s first ``warmup`` steps are done, the device's queue drained (a list,
    empty until then): noted after its ``after_step`` of step ``warmup``."""
    import torch

    warm: list[float] = []
    after_step, steps = objective.after_step, [0]

    def after_step_noting_the_warmup() -> None:
        after_step()
        steps[0] += 1
        if steps[0] == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            warm.append(time.perf_counter())

    objective.after_step = after_step_noting_the_warmup
    return warm


def measure(config: Mapping[str, Any]) -> Timing:
    """Time one trial's parts on this machine (see the module's docstring)."""
    import torch

    from trainers.data.sources import TEST_SETS
    from trainers.models.encoder import SentenceEncoder, pick_device
    from trainers.registry import get_method
    from trainers.suites.sts import STSEvaluator
    from trainers.training.encoding import encode_fn

    method = get_method(config["method"])
    started = time.perf_counter()
    device = pick_device(config["device"])
    encoder = SentenceEncoder.from_config(config).to(device)
    parameters = float(sum(p.numel() for p in encoder.parameters()))
    evaluator = STSEvaluator.of_trial(config)
    # The final test: the seven test sets, then STS-B test again at batch 16 (SG-BERT Table 6's inference time).
    test_pairs = sum(len(evaluator.sets[f"{name}-test"].head(config["eval_max_pairs"]))
                     for name in (*TEST_SETS, "stsb"))
    dev_pairs = len(evaluator.sets["stsb-dev"].head(config["eval_max_pairs"]))
    setup = time.perf_counter() - started
    if not method.trains:
        dev_started = time.perf_counter()
        evaluator.dev(encode_fn(encoder, config))
        dev = time.perf_counter() - dev_started
        return Timing(setup, (), dev, dev * test_pairs / dev_pairs, parameters)
    warmup = warmup_steps(config)
    steps = warmup + TIMED_STEPS
    timed = {**config, "max_steps": steps, "epochs": steps, "eval_every": steps, "checkpoint_every": 0}
    with tempfile.TemporaryDirectory() as folder:
        # A shared table in a folder of its own: prepared here (timed), then found in-process by the loop.
        if "share_frozen_outputs" in config:
            timed |= {"share_frozen_outputs": True, "frozen_outputs_dir": folder}
        stages = tuple(time_stage(stage, {**timed, **stage.overrides}, encoder, evaluator, warmup, device)
                       for stage in method.stages(timed))
    torch.set_grad_enabled(True)
    dev = stages[-1].dev
    return Timing(setup, stages, dev, dev * test_pairs / dev_pairs, parameters)


def time_stage(stage: Any, config: Mapping[str, Any], encoder: Any, evaluator: Any, warmup: int,
               device: Any) -> StageTiming:
    """Time one stage's parts on ``encoder`` (left as the stage leaves it, for the next stage)."""
    from trainers.training import precision
    from trainers.training.loop import train
    from trainers.training.steps import load_examples

    started = time.perf_counter()
    objective = stage.build(config, encoder).to(device)
    # Whole batches only: an epoch's short last batch would run eagerly beside a graph's replays.
    batch_size = config["batch_size"]
    examples = spread_sample(load_examples(stage, config),
                             batch_size * max(warmup + TIMED_STEPS, math.ceil(256 / batch_size)))
    table_started = time.perf_counter()
    with precision.autocast(precision.of_training(config, device), device):
        objective.prepare(examples)
    table = time.perf_counter() - table_started
    devs, warm = DevTimes(evaluator), note_when_warm(objective, warmup, device)
    # A full garbage collection of this process's heap (a plan has read every row's data; a test session
    # more) falling among the few timed steps made one step time 0.1 s for 0.015: collected here first.
    gc.collect()
    train(objective, examples, config, devs, lambda report: None)
    # The timed steps run from the warm-up's end to the evaluation after them (the loop reads the losses first);
    # the warm-up steps (and the loop's own set-up) are paid once per stage.
    step = (devs.started - warm[0]) / TIMED_STEPS
    return StageTiming(stage.name, warm[0] - started - table, table / len(examples), step, devs.seconds)


def machine_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def estimate(spec: SweepSpec, measure_fn: Callable[[Mapping[str, Any]], Timing] | None = None,
             cpus: int | None = None, gpus: int = 0, worker_start: float | None = None) -> list[str]:
    """The lines ``--estimate`` prints: each timing (by ``measure_fn``, :func:`measure` by default), and the
    sweep's expected wall time on ``cpus`` CPUs (this machine's by default) and ``gpus`` GPUs, each worker
    starting in ``worker_start`` seconds (:func:`worker_start_seconds` by default)."""
    measure_fn = measure_fn or measure
    worker_start = worker_start_seconds() if worker_start is None else worker_start
    import torch

    from sweep.spec.regime import shared_prefix

    torch.set_num_threads(max(1, int(spec.resources.cpu)))  # as each trial's worker runs (sweep.run.engine)
    timings: dict[tuple, Timing] = {}
    counted: dict = {}
    costs: list[TrialCost] = []  # one per trial of the grid, in the spec's order
    lines = [f"timed a worker's start: {worker_start:.1f} s"]
    for trial in spec.trials:
        method, config = spec.method_of(trial.point.row), trial.config
        key = timing_key(config)
        if key not in timings:
            timings[key] = measure_fn(config)
            lines.append(timing_line(config, timings[key]))
        plans = stage_plans(method, config, counted) if method.trains else []
        costs.append(trial_cost(timings[key], plans, shared_prefix(method, config)))
    costs *= spec.num_samples  # Ray Tune generates the whole grid once per sample
    used = slots(spec.resources, spec.max_concurrent_trials, cpus or machine_cpus(), gpus)
    if gpus and spec.resources.gpu:
        sharing = math.ceil(min(used, len(costs)) / gpus)
        slowdowns = [gpu_sharing_slowdown(sharing, timings[timing_key(trial.config)].parameters,
                                          bool(trial.config.get("cuda_graph"))) for trial in spec.trials]
        slowdowns *= spec.num_samples
        costs = [cost.times(slowdown) for cost, slowdown in zip(costs, slowdowns)]
        if sharing > 1:
            spread = f"{min(slowdowns):.2f}x" + (f" to {max(slowdowns):.2f}x" if max(slowdowns) > min(slowdowns)
                                                 else "")
            lines.append(f"{sharing} trials share each GPU: each takes {spread} as long as alone "
                         "(GPU_SHARING, measured on an H100 and an H200)")
    if readers := sum(reads_prefix(costs)):
        lines.append(f"{readers} trials read their stages before the last from an earlier trial (share_stages): "
                     "each costed as its last stage, after a wait for those stages")
    wall = wall_seconds(costs, used, worker_start)
    lines.append(f"estimate: {len(costs)} trials, {sum(own_seconds(costs)) / 60:.1f} trial-minutes, {used} at once "
                 f"(max_concurrent_trials {spec.max_concurrent_trials}, resources {asdict(spec.resources)}, "
                 f"{cpus or machine_cpus()} CPUs here): about {wall / 60:.1f} minutes of wall time "
                 "(early stopping ignored: an upper bound; trials sharing CPU cores may run slower)")
    return lines


def timing_line(config: Mapping[str, Any], timing: Timing) -> str:
    """What was timed for a distinct method and model, a part per stage."""
    stages = "".join(f", {stage.name}: setup {stage.setup:.1f} s, table {1000 * stage.table_per_example:.1f} "
                     f"ms/example, step {stage.step:.3f} s, dev {stage.dev:.1f} s" for stage in timing.stages)
    stages = stages or f", dev {timing.dev:.1f} s"  # a method that trains nothing
    return (f"timed {config['method']} {config['model']} (layers {config['model_layers'] or 'all'}, batch "
            f"{config.get('batch_size', '-')}): setup {timing.setup:.1f} s{stages}, test {timing.test:.1f} s")


def stage_plans(method: Any, config: Mapping[str, Any], counted: dict) -> list[StagePlan]:
    """Each stage's planned steps, dev evaluations and frozen-output table examples. A stage whose examples
    cannot be counted here (a corpus on the hub): its ``max_steps`` (0 without), a dev evaluation every
    ``eval_every`` of them, no table."""
    from sweep.spec.regime import stage_counts
    from trainers.training.steps import planned_evaluations, total_steps

    has_table = method.frozen_table(config) is not None
    plans = []
    for stage_config, examples in stage_counts(method, config, counted):
        if examples is None:
            steps = stage_config["max_steps"] or 0
            plans.append(StagePlan(steps, math.ceil(steps / stage_config["eval_every"])))
            continue
        plans.append(StagePlan(total_steps(stage_config, examples), planned_evaluations(stage_config, examples),
                               examples if has_table else 0))
    return plans
