"""Compute budgets: caps on steps, evaluation pairs, seeds and samples that shorten a spec's trials.

They supply no missing model or data, and a long spec stays long (``sweep plan --estimate`` says how long).

A budget is not another experiment: it keeps every hyperparameter of the spec
and only caps how long each trial trains, how much of each evaluation set is
used, and how many seeds and samples run. It is recorded with the sweep (tag
``sweep.budget``) and is visible in every trial's params.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from trainers.knobs import KnobSet

CAPPED_KNOBS = ("max_steps", "eval_every", "eval_max_pairs")
"""The knobs a budget caps (:meth:`Budget.apply`): no part of what a row changes (:mod:`sweep.spec.contracts`)."""


@dataclass(frozen=True)
class Budget:
    name: str
    max_steps: int
    eval_every: int
    eval_max_pairs: int
    max_seeds: int
    max_samples: int

    def apply(self, overrides: Mapping[str, Any], knobs: KnobSet) -> dict[str, Any]:
        """Cap a trial's overrides (knobs the method lacks are left alone)."""
        capped = dict(overrides)
        if "max_steps" in knobs:
            current = capped.get("max_steps", knobs["max_steps"].default)
            capped["max_steps"] = min(current, self.max_steps) if current else self.max_steps
        if "eval_every" in knobs:
            capped["eval_every"] = min(capped.get("eval_every", knobs["eval_every"].default), self.eval_every)
        if "eval_max_pairs" in knobs:  # GLUE fine-tuning's knobs have none
            current_pairs = capped.get("eval_max_pairs", knobs["eval_max_pairs"].default)
            capped["eval_max_pairs"] = min(current_pairs, self.eval_max_pairs) if current_pairs else self.eval_max_pairs
        return capped

    def seeds(self, seeds: list[int]) -> list[int]:
        return seeds[: self.max_seeds]

    def num_samples(self, num_samples: int) -> int:
        return min(num_samples, self.max_samples)

    def caps(self) -> str:
        """What it caps, each field of its definition with its value: ``max_steps 30, eval_every 10, ...``."""
        return ", ".join(f"{field.name} {getattr(self, field.name)}" for field in fields(self) if field.name != "name")

    def seed_cap_line(self, named: Sequence[int] | None) -> str | None:
        """The line that says which of the seeds named with ``--seeds`` the budget leaves out, or None."""
        if named is None or len(named) <= self.max_seeds:
            return None
        kept = self.seeds(list(named))
        return (f"--budget {self.name} runs at most {self.max_seeds} seed{'s' * (self.max_seeds > 1)} per row: "
                f"seed{'s' * (len(kept) > 1)} {', '.join(map(str, kept))} of the {len(named)} named with --seeds "
                f"({', '.join(map(str, named))}); without --budget all {len(named)} run")


BUDGETS = {
    "smoke": Budget(name="smoke", max_steps=30, eval_every=10, eval_max_pairs=300, max_seeds=1, max_samples=2),
}
