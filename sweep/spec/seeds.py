"""The ``seeds`` section: a list of seeds, or adaptive seeds ``{first, more, until: {p, or_above}}``
(:mod:`sweep.run.seed_rounds` runs their rounds)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sweep.spec.budget import Budget
from sweep.spec.problems import Problems
from sweep.spec.rows import Reference


@dataclass(frozen=True)
class SeedRounds:
    """Adaptive seeds: the rows run ``first``; a row whose Welch p against the reference row lies in
    [``p``, ``or_above``] gets the next seed of ``more``, one round at a time (:mod:`sweep.run.seed_rounds`)."""

    first: tuple[int, ...]
    more: tuple[int, ...]
    p: float
    or_above: float

    def within(self, seeds: tuple[int, ...]) -> SeedRounds:
        """The rounds among ``seeds`` (what a budget leaves of the spec's seeds)."""
        return dataclasses.replace(self, first=tuple(s for s in self.first if s in seeds),
                                   more=tuple(s for s in self.more if s in seeds))


@dataclass(frozen=True)
class Seeds:
    """Every seed that may run (with adaptive seeds: first, then more) and the adaptive rule, or None."""

    all: tuple[int, ...]
    rounds: SeedRounds | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, Any], problems: Problems, default: list[int], rows: Sequence[object],
              reference: Reference | None) -> Seeds:
        """``seeds`` of the whole raw ``spec`` (``default`` where it has none). Adaptive seeds compare each row with
        the spec's own reference row by the tables' test, so they need one, and no axis that gives a row several
        lines (grid, sampled) or a search."""
        seeds = spec.get("seeds", default)
        if not isinstance(seeds, Mapping):
            return cls(_parse_list(problems, seeds))
        until = seeds.get("until")
        if (set(seeds) != {"first", "more", "until"} or not isinstance(until, Mapping)
                or set(until) != {"p", "or_above"}
                or not all(isinstance(until[k], (int, float)) and not isinstance(until[k], bool) for k in until)
                or not 0 < until["p"] <= until["or_above"] <= 1):
            problems.add("seeds", "expected a list of seeds or {first: [seeds], more: [seeds], until: {p: P, "
                                  f"or_above: Q}} with 0 < P <= Q <= 1, got {seeds!r}")
            return cls((0,))
        first, more = _parse_list(problems, seeds["first"], "seeds.first"), _parse_list(problems, seeds["more"],
                                                                                         "seeds.more")
        if len(first) < 2:
            problems.add("seeds.first", f"Welch's test needs at least 2 seeds a row, got {list(first)!r}")
        if set(first) & set(more):
            problems.add("seeds.more", f"seeds also in first: {sorted(set(first) & set(more))}")
        if reference is None or reference.spec is not None:
            problems.add("seeds", "adaptive seeds test each row against the reference row: name a row of this spec "
                                  "as reference")
        for key in ("grid", "sample", "search"):
            if spec.get(key):
                problems.add(key, "adaptive seeds decide per row, and this key gives a row several points: drop "
                                  "one of them")
        if len(rows) < 2:
            problems.add("seeds", "adaptive seeds compare rows with the reference row, and this spec has one row")
        return cls((*first, *more), SeedRounds(first, more, until["p"], until["or_above"]))

    def within(self, budget: Budget | None) -> Seeds:
        """The seeds a budget leaves (its first ``max_seeds``), and the rounds among them."""
        if budget is None:
            return self
        seeds = tuple(budget.seeds(list(self.all)))
        return Seeds(seeds, self.rounds.within(seeds) if self.rounds else None)


def _parse_list(problems: Problems, seeds: Any, key: str = "seeds") -> tuple[int, ...]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                           for s in seeds):
        problems.add(key, f"expected a non-empty list of non-negative integers, got {seeds!r}")
        return (0,)
    if len(set(seeds)) != len(seeds):
        problems.add(key, f"seeds repeat: {seeds}")
    return tuple(seeds)
