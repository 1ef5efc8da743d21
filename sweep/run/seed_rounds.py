"""Adaptive seeds: more seeds only for the rows whose gap to the reference row is still undecided.

A spec's ``seeds: {first, more, until: {p, or_above}}`` (:class:`sweep.spec.seeds.SeedRounds`). Every row runs the
first seeds. A row compared with the reference row (Welch's test of the tables, :func:`results.significance.
line_p`, on the tables' metric, the seven test sets' average) is decided when p < ``p`` (it differs) or
p > ``or_above`` (no difference shown); otherwise it gets the next seed of ``more``, and the reference row the
same seed, and is tested again on the seeds both ran: one round at a time, until decided or ``more`` runs
out. A seed whose trial failed counts as run, without a value. :func:`verdict` is that rule; the sweep's
searcher (:class:`sweep.run.searchers.SeedRoundsSearcher`) asks it which trials to start, in one Tune run for
every round, and the summary asks it, from the recorded trials, how many seeds each row took and why it
stopped.

Every trial that may run was resolved when the spec loaded (its index in :attr:`SweepSpec.trials`, as in any
sweep), so a trial of a later round has its identity in advance and is reused from the store like any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from results.significance import line_p
from results.table import COLUMNS, Cell
from sweep.spec.seeds import SeedRounds
from sweep.spec.sweep_spec import SweepSpec

METRIC = COLUMNS["Avg"].metric
"""What the rounds test: the metric of the tables' p column."""


@dataclass(frozen=True)
class Verdict:
    """Where a row stands: the seeds its test needs (``seeds``), and, once they all ran, the p of the last test
    and why it stopped (``reason``; None while seeds it needs have not run)."""

    seeds: tuple[int, ...]
    p: float = math.nan
    reason: str | None = None


def verdict(rounds: SeedRounds, row: Mapping[int, float], reference: Mapping[int, float],
            reference_seed_free: bool = False) -> Verdict:
    """The row's verdict from its and the reference's scores by seed (NaN: the seed's trial failed); a
    seed-free reference has one score, which stands for every seed."""
    seeds = list(rounds.first)
    while True:
        ran = [seed for seed in seeds if seed in row and (reference_seed_free or seed in reference)]
        if len(ran) < len(seeds) or (reference_seed_free and not reference):
            return Verdict(tuple(seeds))
        values = tuple(row[seed] for seed in seeds if not math.isnan(row[seed]))
        against = (tuple(reference.values())[:1] if reference_seed_free
                   else tuple(reference[seed] for seed in seeds if not math.isnan(reference[seed])))
        p = line_p(Cell(values), Cell(against, seed_free=reference_seed_free))
        if p < rounds.p:
            return Verdict(tuple(seeds), p, f"differs: p = {p:.3g} < {rounds.p:g}")
        if p > rounds.or_above:
            return Verdict(tuple(seeds), p, f"no difference shown: p = {p:.3g} > {rounds.or_above:g}")
        if len(seeds) == len(rounds.first) + len(rounds.more):
            return Verdict(tuple(seeds), p, f"undecided when the seeds ran out: p = {p:.3g}")
        seeds.append(rounds.more[len(seeds) - len(rounds.first)])


def verdicts(spec: SweepSpec, scores: Mapping[str, Mapping[int, float]]) -> dict[str, Verdict]:
    """Each row's verdict from ``scores`` (row -> seed -> score): a seed-free row is decided by its one run,
    and the reference row runs the seeds of every row compared with it."""
    rounds, reference = spec.seed_rounds, spec.reference.row
    found = {}
    for row in spec.rows:
        if row.name == reference:
            continue
        if spec.seed_free(row):
            found[row.name] = Verdict(spec.seeds[:1], reason="seed-free: one run stands for every seed")
        else:
            found[row.name] = verdict(rounds, scores.get(row.name, {}), scores.get(reference, {}),
                                      spec.seed_free(spec.row(reference)))
    reference_seeds = spec.seeds[:1] if spec.seed_free(spec.row(reference)) else tuple(
        seed for seed in spec.seeds if any(seed in v.seeds for v in found.values()) or seed in rounds.first)
    found[reference] = Verdict(reference_seeds, reason="the reference: the seeds of the rows tested against it")
    return found
