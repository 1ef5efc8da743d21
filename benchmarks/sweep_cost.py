"""What a sweep no longer computes twice, measured in one run.

    python -m benchmarks.sweep_cost [--parts counts sct sg]

1. For every shipped spec: the trials in the grid against the trials that run
   (seed-free rows once, mirror cells of symmetric axes left out).
2. ``sct_distillation.yaml`` at a small budget (its first rows, 3 epochs; the
   bundled 6-layer model teaches its first 2 layers), with and without shared
   teacher outputs: wall time of the trials, seconds per step from the second
   epoch on, and whether the losses and test scores are equal.
3. ``sg_opt_ablation.yaml`` at a small budget (2 rows x 2 seeds), with and
   without shared BERT_F views: wall time and equality.

The trials of one side run one after another in this process, each from an
empty process-level store (as a fresh Ray worker: it reads what earlier trials
left on the node's disk), the two sides interleaved trial by trial. Figures go
to benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.results_file import write_section
from sweep.spec.sweep_spec import load_spec, trial_config
from trainers.method import TrialConfig
from trainers.models import frozen_outputs
from trainers.registry import get_method
from trainers.training.loop import run_trial

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "search_spaces"


def trial_counts() -> str:
    lines = ["| spec | trials in the grid | trials run | saved |", "| --- | ---: | ---: | --- |"]
    for path in sorted(SPECS.glob("*.yaml")):
        spec = load_spec(path, check_environment=False)
        saved = []
        once = [row.name for row in spec.rows if spec.seed_free(row)]
        if once and len(spec.seeds) > 1:
            saved.append(f"{len(once)} seed-free row(s) once instead of {len(spec.seeds)} times")
        if spec.symmetric:
            saved.append(f"{spec.symmetric[0]} <-> {spec.symmetric[1]} symmetric")
        if spec.glue is not None:  # `sweep glue` fine-tunes every row x seed, untuned rows too
            saved, runs = [], len(spec.rows) * len(spec.seeds)
        else:
            runs = spec.trials_to_run
        lines.append(f"| {path.name} | {spec.trial_count} | {runs} | {'; '.join(saved) or '–'} |")
    return "\n".join(lines)


@dataclass
class Side:
    """One side of a comparison: its trials' wall seconds, first epochs' seconds, step times after epoch 1,
    reports."""

    seconds: float = 0.0
    first_epochs: list[float] = field(default_factory=list)
    later_steps: list[float] = field(default_factory=list)
    losses: list[list[float]] = field(default_factory=list)
    finals: list[dict[str, Any]] = field(default_factory=list)


def timed_trial(config: dict[str, Any], steps_per_epoch: int, side: Side) -> None:
    """Run one trial of ``config`` (a spec's resolved trial config with knobs changed) and time it into ``side``."""
    (stage,) = get_method(config["method"]).stages(config)  # SG and SCT train one stage
    objective = stage.objective_class()
    stamps: list[float] = []
    own = objective.__dict__.get("after_step")
    inherited = objective.after_step

    def timed_after_step(self) -> None:  # per-step wall time, from one step's end to the next
        inherited(self)
        stamps.append(time.perf_counter())

    objective.after_step = timed_after_step
    frozen_outputs._STORES.clear()  # a fresh worker process: only the node's disk is shared
    reports: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        final = run_trial(TrialConfig(config), reports.append)  # resolved already: run as it is
    finally:
        if own is None:
            del objective.after_step
        else:
            objective.after_step = own
    side.seconds += time.perf_counter() - started
    side.first_epochs.append(stamps[steps_per_epoch - 1] - started)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    side.later_steps += gaps[steps_per_epoch - 1 :]  # gap i ends step i + 2: the steps of epoch 2 on
    side.losses.append([r["loss"] for r in reports[:-1]])
    side.finals.append(final)


def compare(spec_name: str, rows: list[str], seeds: list[int], overrides: dict[str, Any]) -> tuple[Side, Side, int]:
    spec = load_spec(SPECS / f"{spec_name}.yaml", overrides=overrides, seeds=seeds)
    steps_per_epoch = overrides["train_limit"] // trial_config(spec, rows[0], seeds[0], {})["batch_size"]
    fresh, shared = Side(), Side()
    with tempfile.TemporaryDirectory() as folder:
        for row in rows:
            for seed in seeds:
                config = trial_config(spec, row, seed, {})
                timed_trial({**config, "share_frozen_outputs": False}, steps_per_epoch, fresh)
                timed_trial({**config, "share_frozen_outputs": True, "frozen_outputs_dir": folder}, steps_per_epoch,
                            shared)
    return fresh, shared, len(rows) * len(seeds)


def equality(fresh: Side, shared: Side) -> str:
    loss = max(abs(a - b) for x, y in zip(fresh.losses, shared.losses) for a, b in zip(x, y))
    scores = max(abs(x[k] - y[k]) for x, y in zip(fresh.finals, shared.finals) for k in x
                 if k.startswith("test_") and k != "test_seconds")
    same = loss == 0 and scores == 0
    return (f"largest difference of a logged loss {loss:.2e}, of a test score {scores:.2e} Spearman points"
            f" ({'bitwise equal' if same else 'equal to float rounding'})")


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def comparison_table(fresh: Side, shared: Side, what: str) -> str:
    computed = sum(f.get("frozen_outputs_computed", 0) for f in shared.finals)
    reused = sum(f.get("frozen_outputs_reused", 0) for f in shared.finals)
    return "\n".join([
        "| | wall seconds (all trials) | s/step, epoch 2 on |",
        "| --- | ---: | ---: |",
        f"| {what}: table computed in each trial | {fresh.seconds:.1f} | {mean(fresh.later_steps):.3f} |",
        f"| {what}: table shared on the node (`share_frozen_outputs`) | {shared.seconds:.1f} | "
        f"{mean(shared.later_steps):.3f} |",
        f"| **speed-up** | **{fresh.seconds / shared.seconds:.2f}x** | "
        f"**{mean(fresh.later_steps) / mean(shared.later_steps):.2f}x** |",
        "",
        f"Shared side: {computed:.0f} inputs run through the frozen model, {reused:.0f} served without a forward. "
        f"Results: {equality(fresh, shared)}.",
    ])


SCT_ROWS = ["SCT-distillation", "L_CD"]
# queue_size 4,096 instead of 65,536: at this model size the queues, not the teacher, dominate a step (both
# sides pay them alike); the paper's teacher (RoBERTa-large) is ~50x the bundled model's forward.
SCT_BUDGET = {"train_limit": 512, "epochs": 3, "eval_every": 4, "eval_max_pairs": 300, "queue_size": 4096}
SG_ROWS = ["SG-OPT (L_opt3)", "+ L_opt2"]
SG_BUDGET = {"train_limit": 160, "epochs": 2, "eval_every": 10, "eval_max_pairs": 300,
             "bert_f_dropout": False}  # BERT_F's views in a table, the thing shared


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_cost")
    parser.add_argument("--parts", nargs="+", default=["counts", "sct", "sg"], choices=["counts", "sct", "sg"])
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    body = [f"Command: `python -m benchmarks.sweep_cost` ({torch.get_num_threads()} torch threads, CPU, "
            f"{time.strftime('%Y-%m-%d')}; trials of a side one after another in one process, each from an empty "
            "in-process store, so only the node's disk is shared, as between Ray workers; the sides interleaved "
            "trial by trial)."]
    if "counts" in args.parts:
        body += ["", "Trials in the grid and trials run, every shipped spec:", "", trial_counts()]
    if "sct" in args.parts:
        fresh, shared, n = compare("sct_distillation", SCT_ROWS, [42], SCT_BUDGET)
        body += ["", f"`sct_distillation.yaml`, rows {', '.join(SCT_ROWS)} ({n} trials), budget {SCT_BUDGET} "
                 "(batch 128: 4 steps an epoch, 3 epochs), teacher the bundled 6-layer model, student its first 2 "
                 "layers. Both sides read the teacher's vectors from one batched table pass over the corpus "
                 "(trainers/models/frozen_outputs.py); sharing saves only the later trials' pass, which at this "
                 "size is a small part of a trial (the per-text path the table replaced: "
                 "`python -m benchmarks.frozen_outputs`).",
                 "",
                 comparison_table(fresh, shared, "teacher vectors")]
    if "sg" in args.parts:
        fresh, shared, n = compare("sg_opt_ablation", SG_ROWS, [1, 2], SG_BUDGET)
        gain = fresh.seconds / shared.seconds
        verdict = ("The gain is small: BERT_F's forward is without gradients and is a small part of an SG step "
                   "(BERT_T's forward and backward, the 4096-wide head)." if gain < 1.3 else "")
        body += ["", f"`sg_opt_ablation.yaml`, rows {', '.join(SG_ROWS)} x seeds 1, 2 ({n} trials), budget "
                 f"{SG_BUDGET} (batch 16: 10 steps an epoch, 2 epochs), bundled model.", "",
                 comparison_table(fresh, shared, "BERT_F views"), "", verdict]
    text = "\n".join(body).strip()
    write_section("Sweep cost", text)
    print(text)


if __name__ == "__main__":
    main()
