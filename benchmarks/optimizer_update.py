"""One Adam update of BERT-base's weights, by ``adam_implementation``: torch's against transformers'.

    python -m benchmarks.optimizer_update [--repeats 5] [--steps 5] [--layers 12 --hidden 768] [--device cpu]

Every author's code here trained with ``transformers.AdamW``, the methods' default since 2026-11-29
(:mod:`trainers.training.transformers_adamw`); torch's AdamW is the fused kernel on a GPU (one launch) and its
single-tensor loop on a CPU. A randomly initialised BERT of the given shape gets random gradients once; each
side's optimiser comes from :func:`~trainers.training.optimization.make_optimizer`, as the loop makes it (decay
0.01 but for biases and LayerNorm weights), and is timed over ``--steps`` updates after one untimed one. The
repeats interleave the sides; each figure is its side's fastest, and the ratio is against torch's in the same
run. On a GPU ``--rate-tensor`` times the update a CUDA graph records (the rate in a device tensor). The
section goes to benchmarks/results.md (``--no-write`` leaves it).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from transformers import BertConfig, BertModel

from benchmarks.results_file import write_section
from trainers.registry import get_method
from trainers.training.optimization import make_optimizer

SIDES = {"torch": {"adam_implementation": "torch"},
         "transformers": {"adam_implementation": "transformers"},
         "transformers, uncorrected": {"adam_implementation": "transformers", "adam_bias_correction": False}}
"""The optimisers timed: the two implementations, and transformers' without bias correction (ConSERT's, SCT's)."""


def update_times(layers: int, hidden: int, device: torch.device, steps: int, repeats: int,
                 rate_tensor: bool = False) -> list[dict[str, Any]]:
    """ms per update of each side of :data:`SIDES` (fastest of ``repeats`` interleaved), with its ratio to
    torch's."""
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=max(1, hidden // 64),
                                 intermediate_size=4 * hidden)).to(device)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter) * 1e-3
    optimizers = {side: make_optimizer(get_method("simcse").resolve({"weight_decay": 0.01, **overrides}), model,
                                       rate_tensor)
                  for side, overrides in SIDES.items()}
    best = dict.fromkeys(SIDES, float("inf"))
    for _ in range(repeats):
        for side, optimizer in optimizers.items():
            optimizer.step()  # untimed: the first builds the state; later ones bring the caches back
            synchronize(device)
            started = time.perf_counter()
            for _ in range(steps):
                optimizer.step()
            synchronize(device)
            best[side] = min(best[side], (time.perf_counter() - started) * 1000 / steps)
    count = sum(p.numel() for p in model.parameters())
    return [{"implementation": side, "ms": ms, "ratio": ms / best["torch"], "parameters": count}
            for side, ms in best.items()]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.optimizer_update", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rate-tensor", action="store_true", help="The rate in a device tensor (a CUDA graph's).")
    parser.add_argument("--no-write", action="store_true", help="Print the table; leave benchmarks/results.md.")
    args = parser.parse_args(argv)
    rows = update_times(args.layers, args.hidden, torch.device(args.device), args.steps, args.repeats,
                        args.rate_tensor)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    body = "\n".join([
        f"Command: `python -m benchmarks.optimizer_update --repeats {args.repeats} --steps {args.steps} --layers "
        f"{args.layers} --hidden {args.hidden} --device {args.device}{' --rate-tensor' if args.rate_tensor else ''}`"
        f" ({time.strftime('%Y-%m-%d')}; {name}, {torch.get_num_threads()} threads; a random BERT of "
        f"{rows[0]['parameters'] / 1e6:.1f}M weights, ms per update, fastest of the interleaved repeats).",
        "",
        "| adam_implementation | ms per update | against torch's |",
        "| --- | ---: | ---: |",
        *(f"| {row['implementation']} | {row['ms']:.1f} | {row['ratio']:.2f}x |" for row in rows),
    ])
    print(body)
    if not args.no_write:
        write_section("Adam's update (optimizer_update)", body)


if __name__ == "__main__":
    main()
