"""The ``search`` section: a searcher of the sampled axes (``{algorithm, trials}``, :mod:`sweep.run.searchers`)
and what it cannot go with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sweep.spec.problems import Problems

SEARCH_ALGORITHMS = {"optuna": ("optuna",), "hyperopt": ("hyperopt",), "bohb": ("ConfigSpace", "hpbandster"),
                     "random": ("optuna",)}
"""Each searcher a spec may name (``search.algorithm``) and the modules it needs: the ``search`` extra
(random is Optuna's RandomSampler, so that every searcher is driven alike)."""
SEARCH_EXTRA = "pip install -e '.[search]'"


@dataclass(frozen=True)
class Search:
    """A searcher suggests ``trials`` points of the sampled axes, runs each with every seed and learns their
    mean; the spec's ``num_samples`` is its ``trials``."""

    algorithm: str
    trials: int

    @classmethod
    def parse(cls, spec: Mapping[str, Any], problems: Problems, sample: Mapping[str, Any], grid: Mapping[str, Any],
              rows: Sequence[object]) -> Search | None:
        """``search`` of the whole raw ``spec``, and what it cannot go with: a searcher needs sampled axes and no
        grid axis or second row (they would be averaged into its score); PBT changes knobs while a trial trains,
        which a searcher chose before it started; BOHB learns from its own HyperBand's budgets."""
        search, scheduler = spec.get("search"), spec.get("scheduler") or {}
        bohb_scheduler = isinstance(scheduler, Mapping) and "hyperband_for_bohb" in scheduler
        if search is None:
            if bohb_scheduler:
                problems.add("scheduler.hyperband_for_bohb", "goes with its searcher: add search: {algorithm: bohb, "
                                                             "trials: N}")
            return None
        if (not isinstance(search, Mapping) or set(search) != {"algorithm", "trials"}
                or search["algorithm"] not in SEARCH_ALGORITHMS or not isinstance(search["trials"], int)
                or isinstance(search["trials"], bool) or search["trials"] < 1):
            problems.add("search", f"expected {{algorithm: {'|'.join(SEARCH_ALGORITHMS)}, trials: N >= 1}}, "
                                   f"got {search!r}")
            return None
        if not sample:
            problems.add("search", "a searcher suggests values of the sampled axes, and this spec has none "
                                   "(add sample: {knob: {loguniform: [low, high]}})")
        if grid:
            problems.add("grid", f"a searcher scores each suggestion by the mean over its seeds; grid axes "
                                 f"({', '.join(grid)}) would be averaged into it: make them sampled axes or drop "
                                 "search")
        if len(rows) > 1:
            problems.add("rows", "a searcher scores each suggestion by the mean over its seeds; several rows would be "
                                 "averaged into it: search one row per spec")
        if "num_samples" in spec:
            problems.add("num_samples", "search.trials says how many points the searcher suggests: drop num_samples")
        if isinstance(scheduler, Mapping) and "pbt" in scheduler:
            problems.add("scheduler.pbt", "PBT changes a trial's knobs while it trains, and a searcher chose them "
                                          "before it started: use one of them")
        if search["algorithm"] == "bohb" and not bohb_scheduler:
            problems.add("search.algorithm", "bohb learns from its HyperBand scheduler's budgets: add scheduler: "
                                             "{hyperband_for_bohb: {max_t: N}}")
        if search["algorithm"] != "bohb" and bohb_scheduler:
            problems.add("scheduler.hyperband_for_bohb", f"goes with search algorithm bohb, not "
                                                         f"{search['algorithm']!r} (use asha, or algorithm: bohb)")
        return cls(search["algorithm"], search["trials"])
