"""Searchers that learn from finished trials, for a spec's ``search:`` key: Ray Tune's Optuna (TPE),
HyperOpt and BOHB integrations, and random sampling (Optuna's RandomSampler, driven like the others).

A suggestion is a point of the spec's sampled axes. :class:`SeedMean` (Ray Tune's :class:`Repeater`) runs
it once per trial of the spec (:attr:`sweep.spec.SweepSpec.trials`: its seeds) and tells the searcher the
mean over them, so that one lucky seed does not steer it. Each copy's Tune config carries the trial's
index (``point``), row and seed, as a trial of an unsearched sweep does, so the worker and the tracker
resolve its config with :meth:`~sweep.spec.SweepSpec.config_of`, the one resolution path. Its identity is
known only once the searcher suggests it, so such trials are never reused from the store
(:func:`sweep.reuse.reusable`: sampled axes reuse nothing).

The searcher's state, the groups of copies included, is saved in the sweep's Ray experiment; a resumed
sweep restores it with the experiment (:meth:`SeedMean.save`, :meth:`SeedMean.restore`).
"""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from ray.tune.result import TRAINING_ITERATION
from ray.tune.search import ConcurrencyLimiter, Repeater, Searcher

from sweep.spec import POINT, SweepSpec


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

    def save(self, checkpoint_path: str) -> None:
        """The searcher's own checkpoint and the groups of copies, in the one file Ray keeps."""
        self.searcher.save(checkpoint_path)
        saved = {"searcher": Path(checkpoint_path).read_bytes(), "groups": self.get_state()}
        Path(checkpoint_path).write_bytes(pickle.dumps(saved))

    def restore(self, checkpoint_path: str) -> None:
        saved = pickle.loads(Path(checkpoint_path).read_bytes())
        with tempfile.TemporaryDirectory() as folder:
            inner = Path(folder) / "searcher.pkl"
            inner.write_bytes(saved["searcher"])
            self.searcher.restore(str(inner))
        self.set_state(saved["groups"])


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
    """The spec's searcher over its trials, seeded by the spec's hash (as the unsearched sweep's random
    draws are), at most ``max_concurrent_trials`` trials at once."""
    seed = int(spec.spec_hash[:8], 16)
    found = searcher(spec.search["algorithm"], spec.metric, spec.mode, seed,
                     [trial.point.params() for trial in spec.trials])
    return ConcurrencyLimiter(found, max_concurrent=spec.max_concurrent_trials)
