"""The teacher's vectors one text at a time against one batched table pass, measured in one run.

    python -m benchmarks.frozen_outputs

``sct_distillation.yaml`` at the SCT budget of :mod:`benchmarks.sweep_cost` (rows SCT-distillation and
L_CD, 512 sentences, batch 128: 4 steps an epoch, 3 epochs; the bundled 6-layer model teaches its
first 2 layers), three ways, the trials of the three sides interleaved:

- per-text: the reference the library had before the table, kept here only: each fixed text's teacher
  vector computed on that text alone, the first time a step asks for it, and kept for the trial's later
  epochs (as the earlier shared path did within a trial);
- batched table, shared (``share_frozen_outputs: true``): one batched pass, kept on node-local disk, so
  the second trial reads it;
- batched table, unshared: the same pass inside each trial.

It reports each side's wall time, first epoch's time (from the trial's start, model loading included, to
the end of its 4th step), the time of its teacher forwards alone, steps per second from epoch 2 on, and \
the largest difference of a logged loss
and of a test score between the two table sides (0: bitwise equal). Figures go to benchmarks/results.md.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor

from benchmarks.results_file import commit_of, write_section
from benchmarks.sweep_cost import SCT_BUDGET, SCT_ROWS, SPECS, Side, timed_trial
from benchmarks.timed_calls import timed_calls
from sweep.spec.sweep_spec import load_spec, trial_config
from trainers.models import frozen_outputs
from trainers.objectives.sct_distillation import Teacher


@contextmanager
def per_text_teacher() -> Iterator[None]:
    """The reference: each fixed text's teacher vector from a forward of that text alone, kept for the trial."""
    prepare, vectors = Teacher.prepare, Teacher.vectors
    kept: dict[str, Tensor] = {}

    def each_alone(self: Teacher, texts, fixed_texts: bool) -> Tensor:
        if not fixed_texts:
            return self.compute_vectors(texts)
        for text in dict.fromkeys(texts):
            if text not in kept:
                kept[text] = self.compute_vectors([text])[0]
        return torch.stack([kept[text] for text in texts])

    Teacher.prepare = lambda self, texts: None
    Teacher.vectors = each_alone
    try:
        yield
    finally:
        Teacher.prepare, Teacher.vectors = prepare, vectors


def largest_differences(a: Side, b: Side) -> tuple[float, float]:
    loss = max(abs(x - y) for p, q in zip(a.losses, b.losses) for x, y in zip(p, q))
    score = max(abs(p[k] - q[k]) for p, q in zip(a.finals, b.finals) for k in p
                if k.startswith("test_") and k != "test_seconds")
    return loss, score


def main(argv: list[str] | None = None) -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    spec = load_spec(SPECS / "sct_distillation.yaml", overrides=SCT_BUDGET, seeds=[42])
    steps_per_epoch = SCT_BUDGET["train_limit"] // trial_config(spec, SCT_ROWS[0], 42, {})["batch_size"]
    per_text, shared, unshared = Side(), Side(), Side()
    teacher: dict[str, list[float]] = {"per-text": [], "shared": [], "unshared": []}
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as alone:
        for row in SCT_ROWS:
            config = trial_config(spec, row, 42, {})
            with per_text_teacher(), timed_calls(Teacher, "compute_vectors", teacher["per-text"]):
                timed_trial({**config, "frozen_outputs_dir": alone}, steps_per_epoch, per_text)
            with timed_calls(Teacher, "compute_vectors", teacher["shared"]):
                timed_trial({**config, "share_frozen_outputs": True, "frozen_outputs_dir": folder}, steps_per_epoch,
                            shared)
            with timed_calls(Teacher, "compute_vectors", teacher["unshared"]):
                timed_trial({**config, "share_frozen_outputs": False}, steps_per_epoch, unshared)
    loss, score = largest_differences(shared, unshared)
    equal = loss == 0 and score == 0
    first = sum(per_text.first_epochs) / sum(unshared.first_epochs)

    def row(name: str, side: Side, key: str) -> str:
        steps = len(side.later_steps) / sum(side.later_steps)
        return (f"| {name} | {side.seconds:.1f} | {' + '.join(f'{s:.1f}' for s in side.first_epochs)} | "
                f"{sum(teacher[key]):.1f} | {steps:.3f} |")

    body = "\n".join([
        f"Command: `python -m benchmarks.frozen_outputs` (commit {commit_of()}, {time.strftime('%Y-%m-%d')}, "
        f"{torch.get_num_threads()} torch threads, CPU, on a machine shared with other jobs: ratios are within "
        "this run, the sides interleaved trial by trial). `sct_distillation.yaml`, rows "
        f"{', '.join(SCT_ROWS)}, budget {SCT_BUDGET} (batch 128: {steps_per_epoch} steps an epoch), teacher the "
        "bundled 6-layer model, student its first 2 layers; the teacher's table holds the 512 training "
        f"sentences, in batches of {frozen_outputs.TABLE_BATCH_SIZE} sorted by length.",
        "",
        "| teacher vectors | wall seconds (2 trials) | first epoch, s (each trial, loading included) | "
        "teacher forwards, s (2 trials) | steps/s, epoch 2 on |",
        "| --- | ---: | ---: | ---: | ---: |",
        row("per-text (each text alone, kept for the trial; the earlier library path)", per_text, "per-text"),
        row("batched table, shared (`share_frozen_outputs: true`)", shared, "shared"),
        row("batched table, unshared (computed in each trial)", unshared, "unshared"),
        "",
        f"First epoch, per-text against the unshared table (both compute the teacher once per trial): "
        f"**{first:.2f}x**. Largest difference between the shared and unshared tables: logged loss {loss:.1e}, "
        f"test score {score:.1e} Spearman points. The teacher's forwards alone: "
        f"**{sum(teacher['per-text']) / sum(teacher['unshared']):.2f}x** faster in the table (per-text against "
        "unshared); the rest of a first epoch (loading, the student's steps, the dev evaluation) is the same on "
        "every side, so the first-epoch ratio is bounded by how much of an epoch the teacher takes: here a "
        "6-layer teacher and a 2-layer student of the same width, where the paper distils a 24-layer teacher "
        "into a 2- or 4-layer one.",
    ])
    write_section("Frozen outputs: batched table against per-text", body)
    print(body)
    print(f"batched table: {first:.2f}x faster than per-text in the first epoch; shared and unshared bitwise "
          f"equal: {'yes' if equal else 'no'}")


if __name__ == "__main__":
    main()
