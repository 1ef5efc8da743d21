"""The searchers of a sweep: those that learn from finished trials, for a spec's ``search:`` key, and the
rounds of adaptive seeds (:class:`SeedRoundsSearcher`, :mod:`sweep.run.seed_rounds`).

For ``search:``, Ray Tune's Optuna (TPE),
HyperOpt and BOHB integrations, and random sampling (Optuna's RandomSampler, driven like the others).

A suggestion is a point of the spec's sampled axes. :class:`SeedMean` (Ray Tune's :class:`Repeater`) runs
it once per trial of the spec (:attr:`sweep.spec.sweep_spec.SweepSpec.trials`: its seeds) and tells the searcher the
mean over them, so that one lucky seed does not steer it. Each copy's Tune config carries the trial's
index (``point``), row and seed, as a trial of an unsearched sweep does, so the worker and the tracker
resolve its config with :meth:`~sweep.spec.sweep_spec.SweepSpec.config_of`, the one resolution path. Its identity is
known only once the searcher suggests it, so such trials are never reused from the store
(:attr:`~sweep.spec.sweep_spec.SweepSpec.trials_known`: sampled axes reuse nothing).

The searcher's state is saved in the sweep's Ray experiment, the wrapper's groups of copies apart from the
searcher's own (Ray's ``SearchGenerator.save_to_dir``: each wrapper's ``get_state``); a resumed sweep restores
both, and the copies of a suggestion left part way run with its point.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from ray.tune.result import TRAINING_ITERATION
from ray.tune.search import ConcurrencyLimiter, Repeater, Searcher

from sweep.run.seed_rounds import METRIC as ROUNDS_METRIC
from sweep.run.seed_rounds import verdicts
from sweep.spec.sweep_spec import POINT, SweepSpec


class SeedMean(Repeater):
    """Runs each suggestion of ``searcher`` once per entry of ``points`` (a trial's Tune keys: row, seed),
    with the entry's index as ``point``; the searcher hears the mean of their metric, at their end and, for
    a searcher that learns from intermediate results (BOHB), at each iteration all of them reached."""

    def __init__(self, searcher: Searcher, points: Sequence[Mapping[str, Any]]):
        super().__init__(searcher, repeat=len(points), set_index=False)
        self.points = [dict(point) for point in points]
        self._reached: dict[str, dict[int, dict[str, float]]] = {}
        """A suggestion's primary trial id -> iteration -> each copy's metric at that iteration."""

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        config = super().suggest(trial_id)
        if not isinstance(config, dict):
            return config
        index = self._trial_id_to_group[trial_id].count() - 1
        return {**config, POINT: index, **self.points[index]}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        group = self._trial_id_to_group.get(trial_id)
        if group is None or self.searcher.metric not in result:
            return
        reached = self._reached.setdefault(group.primary_trial_id, {}).setdefault(result[TRAINING_ITERATION], {})
        reached[trial_id] = float(result[self.searcher.metric])
        if len(reached) == self.repeat:
            mean = float(np.mean(list(reached.values())))
            self.searcher.on_trial_result(group.primary_trial_id, {**result, self.searcher.metric: mean})

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, **kwargs) -> None:
        super().on_trial_complete(trial_id, result, **kwargs)
        group = self._trial_id_to_group[trial_id]
        if group.finished_reporting():
            self._reached.pop(group.primary_trial_id, None)

    # HyperBandForBOHB pauses and resumes trials through the searcher: the suggestion is its primary trial.
    def on_pause(self, trial_id: str) -> None:
        self.searcher.on_pause(self._trial_id_to_group[trial_id].primary_trial_id)

    def on_unpause(self, trial_id: str) -> None:
        self.searcher.on_unpause(self._trial_id_to_group[trial_id].primary_trial_id)


class SeedRoundsSearcher(Searcher):
    """Ray Tune's source of trials for a spec with adaptive seeds: the trials of the first seeds, then each
    round's as the rows' verdicts ask for them; finished when no row needs a seed that has not run."""

    def __init__(self, spec: SweepSpec):
        super().__init__(metric=ROUNDS_METRIC, mode="max")
        self.spec = spec
        self.index = {(trial.point.row, trial.point.seed): i for i, trial in enumerate(spec.trials)}
        self.scores: dict[str, dict[int, float]] = {}
        self.started: set[int] = set()
        self.running: dict[str, int] = {}

    def wanted(self) -> list[int]:
        """The trials the rows' verdicts need that have not started, in the spec's order."""
        needed = {self.index[(row, seed)] for row, found in verdicts(self.spec, self.scores).items()
                  for seed in found.seeds if (row, seed) in self.index}
        return sorted(needed - self.started)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        pending = self.wanted()
        if not pending:
            return None if self.running else Searcher.FINISHED
        index = pending[0]
        self.started.add(index)
        self.running[trial_id] = index
        return {POINT: index, **self.spec.trials[index].point.params()}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        index = self.running.pop(trial_id, None)
        if index is None:
            return
        point = self.spec.trials[index].point
        value = (result or {}).get(ROUNDS_METRIC)
        self.scores.setdefault(point.row, {})[point.seed] = math.nan if error or value is None else float(value)

    def get_state(self) -> dict[str, Any]:
        return {"scores": self.scores, "started": self.started, "running": self.running}

    def set_state(self, state: dict[str, Any]) -> None:
        self.scores, self.started, self.running = state["scores"], state["started"], state["running"]

    def save(self, checkpoint_path: str) -> None:
        Path(checkpoint_path).write_bytes(pickle.dumps(self.get_state()))

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(pickle.loads(Path(checkpoint_path).read_bytes()))


def searcher(algorithm: str, metric: str, mode: str, seed: int, points: Sequence[Mapping[str, Any]]) -> SeedMean:
    """``algorithm``'s searcher (a ``search.algorithm`` of a spec), its random draws seeded by ``seed``, each
    suggestion run once per entry of ``points``. Its space is Tune's param space, set when the search starts."""
    if algorithm in ("optuna", "random"):
        from optuna.samplers import RandomSampler, TPESampler
        from ray.tune.search.optuna import OptunaSearch

        sampler = TPESampler(seed=seed) if algorithm == "optuna" else RandomSampler(seed=seed)
        inner: Searcher = OptunaSearch(metric=metric, mode=mode, sampler=sampler)
    elif algorithm == "hyperopt":
        from ray.tune.search.hyperopt import HyperOptSearch

        inner = HyperOptSearch(metric=metric, mode=mode, random_state_seed=seed)
    elif algorithm == "bohb":
        from ray.tune.search.bohb import TuneBOHB

        inner = TuneBOHB(metric=metric, mode=mode, seed=seed)
    else:
        raise ValueError(f"unknown search algorithm {algorithm!r}")  # validation refuses it first
    return SeedMean(inner, points)


def spec_searcher(spec: SweepSpec) -> ConcurrencyLimiter:
    """The spec's searcher, at most ``max_concurrent_trials`` trials at once: the rounds of its adaptive seeds,
    or its ``search:`` over its trials, seeded by the spec's hash (as the unsearched sweep's random draws are)."""
    if spec.seed_rounds is not None:
        found: Searcher = SeedRoundsSearcher(spec)
    else:
        found = searcher(spec.search.algorithm, spec.metric, spec.mode, int(spec.spec_hash[:8], 16),
                         [trial.point.params() for trial in spec.trials])
    return ConcurrencyLimiter(found, max_concurrent=spec.max_concurrent_trials)
