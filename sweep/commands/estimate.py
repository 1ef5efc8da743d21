"""``python -m sweep plan SPEC --estimate``: how long the whole sweep will take on this machine.

Each distinct method and model of the spec (method, model, layers, teacher, batch size, token limit) is timed once
here: loading it, the frozen-output table pass per training example (SG, SCT distillation), :data:`TIMED_STEPS`
training steps through the real loop on batches drawn across the whole training set (its first examples are not
typical: STS-B's train file starts with short captions), after the steps whose cost is paid once per trial (the
first; with ``cuda_graph`` also the graph's warm-up and recording, so that the timed steps are replays), which
count as setup, and one STS-B dev evaluation. Every trial is then costed from its own planned steps (the loop's
count: corpus, batch size, epochs, max_steps) and dev evaluations (where its ``eval_grid`` puts them), plus its
final test, which is timed as the dev evaluation scaled by the pairs of the seven test sets. Early stopping is
ignored, so the estimate is an upper bound for a spec with ``patience``. The trials go onto the slots the spec's
``resources`` and ``max_concurrent_trials`` leave on this machine in the order Ray Tune starts them (the spec's
order, each trial when a slot is free), and each slot first starts its worker process (timed here: a fresh Python
importing the trial's code); the last slot to finish is the sweep's wall time. Trials that share a GPU
(``resources.gpu`` below 1) run slower than timed alone, by what :data:`GPU_SHARING` measured; trials that share
CPU cores with others run slower too, which the estimate does not model, nor Ray's own start (a few seconds).
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from sweep.spec.resources import Resources
from sweep.spec.sweep_spec import SweepSpec

TIMED_STEPS = 4
"""Training steps timed per distinct method and model, after its :func:`warmup_steps`."""


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
class Timing:
    """Seconds measured for one distinct method and model."""

    setup: float  # loading the model, the evaluation sets and the objective
    table_per_example: float  # the frozen-output table pass, per training example (0: no table)
    step: float  # one training step
    dev: float  # one STS-B dev evaluation
    test: float  # the final evaluation on the seven test sets
    parameters: float = 0.0  # the encoder's: how the trial shares a GPU (GPU_SHARING)


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


def trial_seconds(timing: Timing, steps: int, evaluations: int, examples: int) -> float:
    """One trial's expected seconds: setup, table, ``steps`` steps, its ``evaluations`` STS-B dev evaluations
    and the final test (a trial that trains nothing: setup, one dev, the test)."""
    if steps == 0:
        return timing.setup + timing.dev + timing.test
    return (timing.setup + timing.table_per_example * examples + steps * timing.step + evaluations * timing.dev
            + timing.test)


def wall_seconds(durations: Sequence[float], slots: int, worker_start: float = 0.0) -> float:
    """The sweep's wall time: the trials, in the order Ray Tune starts them, each on the first of ``slots``
    workers to be free; a worker first starts (``worker_start`` seconds); the last to finish."""
    loads = [worker_start] * min(max(1, slots), len(durations))
    for duration in durations:
        loads[loads.index(min(loads))] += duration
    return max(loads, default=0.0)


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


def slots(resources: Resources, max_concurrent_trials: int, cpus: int, gpus: int) -> int:
    """Trials that run at once: max_concurrent_trials, capped by the CPUs (and GPUs) each trial reserves."""
    fit = math.floor(cpus / resources.cpu) if resources.cpu else max_concurrent_trials
    if resources.gpu:
        per_gpu = math.floor(1 / resources.gpu + 1e-9) if resources.gpu <= 1 else 1 / resources.gpu
        fit = min(fit, math.floor(per_gpu * gpus))
    return max(1, min(max_concurrent_trials, fit))


STEP_MODE_KNOBS = ("train_precision", "eval_precision", "torch_compile", "torch_compile_mode", "pad_to_max_length",
                   "cuda_graph")
"""Knobs that change how fast the same step runs, not what it computes (beyond float rounding): rows that differ
only in them are timed apart (``search_spaces/simcse_step_modes.yaml``)."""


def timing_key(config: Mapping[str, Any]) -> tuple:
    """What decides a trial's step and evaluation times (its seed and loss knobs barely move them)."""
    return (config["method"], config["model"], config["model_layers"], config.get("teacher", ""),
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
    from trainers.training import precision
    from trainers.training.loop import encode_fn, train
    from trainers.training.steps import load_examples

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
    if not method.trains:
        setup = time.perf_counter() - started
        dev_started = time.perf_counter()
        evaluator.dev(encode_fn(encoder, config))
        dev = time.perf_counter() - dev_started
        return Timing(setup, 0.0, 0.0, dev, dev * test_pairs / dev_pairs, parameters)
    warmup = warmup_steps(config)
    with tempfile.TemporaryDirectory() as folder:
        # A shared table in a folder of its own: prepared here (timed), then found in-process by the loop.
        steps = warmup + TIMED_STEPS
        timed = {**config, "max_steps": steps, "epochs": steps, "eval_every": steps, "checkpoint_every": 0,
                 **({"share_frozen_outputs": True, "frozen_outputs_dir": folder}
                    if "share_frozen_outputs" in config else {})}
        stage = method.stages(timed)[0]
        stage_config = {**timed, **stage.overrides}
        objective = stage.build(stage_config, encoder).to(device)
        # Whole batches only: an epoch's short last batch would run eagerly beside a graph's replays.
        batch_size = config["batch_size"]
        examples = spread_sample(load_examples(stage, stage_config),
                                 batch_size * max(warmup + TIMED_STEPS, math.ceil(256 / batch_size)))
        setup = time.perf_counter() - started
        table_started = time.perf_counter()
        with precision.autocast(precision.of_training(stage_config, device), device):
            objective.prepare(examples)
        table = (time.perf_counter() - table_started) / len(examples)
        devs, warm = DevTimes(evaluator), note_when_warm(objective, warmup, device)
        # A full garbage collection of this process's heap (a plan has read every row's data; a test session
        # more) falling among the few timed steps made one step time 0.1 s for 0.015: collected here first.
        gc.collect()
        train_started = time.perf_counter()
        train(objective, examples, stage_config, devs, lambda report: None)
    torch.set_grad_enabled(True)
    # The timed steps run from the warm-up's end to the evaluation after them (the loop reads the losses first).
    step = (devs.started - warm[0]) / TIMED_STEPS
    setup += warm[0] - train_started  # the warm-up steps (and the loop's own set-up): once per trial
    return Timing(setup, table, step, devs.seconds, devs.seconds * test_pairs / dev_pairs, parameters)


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

    from sweep.spec.regime import planned_dev_evaluations, planned_steps
    from trainers.training.steps import load_examples

    torch.set_num_threads(max(1, int(spec.resources.cpu)))  # as each trial's worker runs (sweep.run.engine)
    timings: dict[tuple, Timing] = {}
    counted: dict = {}
    durations: list[float] = []  # one per trial of the grid, in the spec's order
    lines = [f"timed a worker's start: {worker_start:.1f} s"]
    for trial in spec.trials:
        method, config = spec.method_of(trial.point.row), trial.config
        key = timing_key(config)
        if key not in timings:
            timings[key] = measure_fn(config)
            t = timings[key]
            lines.append(f"timed {config['method']} {config['model']} (layers {config['model_layers'] or 'all'}, "
                         f"batch {config.get('batch_size', '-')}): setup {t.setup:.1f} s, table "
                         f"{1000 * t.table_per_example:.1f} ms/example, step {t.step:.3f} s, dev {t.dev:.1f} s, "
                         f"test {t.test:.1f} s")
        steps = (planned_steps(method, config, counted) or 0) if method.trains else 0
        evaluations, examples = 0, 0
        if steps:
            evaluations = planned_dev_evaluations(method, config, counted)
            if evaluations is None:  # an NLI corpus, not counted offline: its max_steps on the stage grid
                evaluations = math.ceil(steps / config["eval_every"])
        if method.trains and method.frozen_table(config) is not None:
            examples = sum(len(load_examples(stage, {**config, **stage.overrides})) for stage in method.stages(config))
        durations.append(trial_seconds(timings[key], steps, evaluations, examples))
    durations *= spec.num_samples  # Ray Tune generates the whole grid once per sample
    used = slots(spec.resources, spec.max_concurrent_trials, cpus or machine_cpus(), gpus)
    if gpus and spec.resources.gpu:
        sharing = math.ceil(min(used, len(durations)) / gpus)
        slowdowns = [gpu_sharing_slowdown(sharing, timings[timing_key(trial.config)].parameters,
                                          bool(trial.config.get("cuda_graph"))) for trial in spec.trials]
        slowdowns *= spec.num_samples
        durations = [duration * slowdown for duration, slowdown in zip(durations, slowdowns)]
        if sharing > 1:
            spread = f"{min(slowdowns):.2f}x" + (f" to {max(slowdowns):.2f}x" if max(slowdowns) > min(slowdowns)
                                                 else "")
            lines.append(f"{sharing} trials share each GPU: each takes {spread} as long as alone "
                         "(GPU_SHARING, measured on an H100 and an H200)")
    wall = wall_seconds(durations, used, worker_start)
    lines.append(f"estimate: {len(durations)} trials, {sum(durations) / 60:.1f} trial-minutes, {used} at once "
                 f"(max_concurrent_trials {spec.max_concurrent_trials}, resources {asdict(spec.resources)}, "
                 f"{cpus or machine_cpus()} CPUs here): about {wall / 60:.1f} minutes of wall time "
                 "(early stopping ignored: an upper bound; trials sharing CPU cores may run slower)")
    return lines
