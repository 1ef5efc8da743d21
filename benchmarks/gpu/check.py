"""The device check's command line: its parts in order, each recorded as it ends, a failing one beside the rest."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.gpu.bare import bare_simcse, fixed_shape_steps
from benchmarks.gpu.carry import carried_commits, commit_here, pack, unpack
from benchmarks.gpu.common import METHODS, PRECISIONS, WARMUP, build_bert, loop_steps, matmul_tflops
from benchmarks.gpu.evaluation import evaluation
from benchmarks.gpu.graphs import GRAPHED, graph_agreement, graphed_loop_steps
from benchmarks.gpu.legacy import legacy_steps
from benchmarks.gpu.profiling import PROFILED, evaluation_profile, profile
from benchmarks.gpu.report import body, render
from benchmarks.gpu.sharing import SHARING, shared_under_mps, sharing, worker
from benchmarks.gpu.trials import TRIAL_SEEDS, trial_scores
from trainers.models.pretrained import BUNDLED_MODEL

DESCRIPTION = ("The device check: a trial's training steps, its evaluation and several trials on one GPU, "
               "measured in one call (docs/gpu.md).")
COMPILED_PRECISIONS = ("tf32", "bf16")
"""The precisions of the compiled SimCSE steps (``torch_compile: true``) on a GPU; fp32 in the tiny version."""
COMPILED_MODES = ("default", "reduce-overhead")
"""The ``torch_compile_mode`` values the compiled part measures on a GPU (``--compile-modes``); 'default' in the
tiny version (a CPU records no CUDA graphs, so its 'reduce-overhead' is 'default')."""
PARTS = ("rates", "steps", "optimizer", "compiled", "bare", "graphed", "loop_graphed", "agreement", "trials", "legacy",
         "profile", "evaluation", "sharing", "sharing_mps", "sharing_graphed", "sharing_compiled")
"""The parts of the device check, in the order it measures them (``--skip`` leaves some out)."""


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
        section("optimizer", lambda: optimizer_rows(device, tiny))
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


def optimizer_rows(device: torch.device, tiny: bool) -> list[dict[str, Any]]:
    """One Adam update of BERT-base by ``adam_implementation`` (:mod:`benchmarks.optimizer_update`), with the rate a
    float and, on a GPU, in a device tensor (what a CUDA graph records)."""
    from benchmarks.optimizer_update import update_times  # at run time: a --legacy child imports older trainers/

    layers, hidden = (2, 64) if tiny else (12, 768)
    return [{**row, "rate_tensor": rate_tensor}
            for rate_tensor in ((False, True) if device.type == "cuda" else (False,))
            for row in update_times(layers, hidden, device, 3 if tiny else 20, 2 if tiny else 5, rate_tensor)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=DESCRIPTION)
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
        return render(json.loads(Path(args.render).read_text()), args.results)
    commits = carried_commits()
    args.commit = commits.get("commit") or commit_here()
    args.commit_before = commits.get("before", "?")
    results = measure(args)
    if not args.steps_only:
        print(body(results))
