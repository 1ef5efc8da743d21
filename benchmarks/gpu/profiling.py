"""torch.profiler tables of a few steps, and of one evaluation with the host's time by function (``--profile``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu.common import loop_steps, synchronize
from benchmarks.gpu.evaluation import evaluation_setup

PROFILED = (("BERT-base", "simcse", "fp32"), ("BERT-base", "simcse", "tf32"), ("MiniLM", "sct", "fp32"),
            ("tiny BERT", "simcse", "fp32"))


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
    """The seven STS test sets scored once at the device's default ``eval_batch_size``, after a warm-up pass, under
    torch.profiler (the device's busy share) and cProfile (where the host's time goes, function by function), to
    ``out``: what keeps evaluation at the default batch size from the card's speed."""
    import cProfile
    import io
    import pstats

    from trainers.common_knobs import eval_batch_size  # not at import: the legacy steps' trainers lack it
    from trainers.training.encoding import encode_fn

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
    size = eval_batch_size(config["eval_batch_size"], device.type)
    out.write_text(f"evaluation {size} a batch: {seconds:.3f} s under the profilers\n\n" + functions.getvalue() + "\n\n"
                   + tables)
    return {"method": "evaluation", "model": name, "precision": "tf32", "seconds": seconds,
            "device_busy": device_seconds / seconds if device_seconds else None}
