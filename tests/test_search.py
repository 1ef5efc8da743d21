"""Searchers of a spec's sampled axes (sweep.run.searchers): what validation refuses, the seed mean each searcher
learns from, its saved state, and TPE finding a known optimum sooner than random search."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from ray import tune
from ray.tune.search import Searcher

from sweep.commands.cli import main as sweep_main
from sweep.run.searchers import SeedMean, searcher
from sweep.spec.search import Search
from sweep.spec.sweep_spec import POINT, load_spec
from tests.conftest import write_spec


def searched_spec(folder: Path, tiny_bert: str, **changes: Any) -> Path:
    raw = {"name": "searched", "method": "simcse", "base": {"model": tiny_bert, "max_steps": 4},
           "sample": {"temperature": {"loguniform": [0.01, 0.2]}}, "seeds": [1, 2],
           "search": {"algorithm": "optuna", "trials": 3}, **changes}
    return write_spec(folder, {key: value for key, value in raw.items() if value is not None})


@pytest.mark.parametrize("changes, key, says", [
    ({"search": {"algorithm": "bohb", "trials": 3}}, "search.algorithm",
     "bohb learns from its HyperBand scheduler's budgets: add scheduler: {hyperband_for_bohb: {max_t: N}}"),
    ({"scheduler": {"hyperband_for_bohb": {"max_t": 4}}}, "scheduler.hyperband_for_bohb",
     "goes with search algorithm bohb, not 'optuna'"),
    ({"sample": None}, "search", "a searcher suggests values of the sampled axes, and this spec has none"),
    ({"scheduler": {"pbt": {"perturbation_interval": 2, "hyperparam_mutations": {"temperature": [0.05, 0.1]}}}},
     "scheduler.pbt", "PBT changes a trial's knobs while it trains, and a searcher chose them before it started"),
    ({"search": {"algorithm": "tpe", "trials": 3}}, "search", "expected {algorithm: optuna|hyperopt|bohb|random"),
    ({"grid": {"learning_rate": [1e-5, 3e-5]}}, "grid", "grid axes (learning_rate) would be averaged into it"),
    ({"num_samples": 4}, "num_samples", "search.trials says how many points the searcher suggests"),
])
def test_validation_refuses_what_a_searcher_cannot_go_with(tmp_path, tiny_bert, capsys, changes, key, says):
    path = searched_spec(tmp_path, tiny_bert, **changes)
    assert sweep_main(["plan", str(path)]) == 2
    header, *problems = capsys.readouterr().err.splitlines()
    assert header == "invalid sweep spec:" and len(problems) == 1, problems
    assert problems[0].strip().startswith(f"{path}: {key}: ") and says in problems[0]


def test_a_searched_spec_loads_with_its_trials_as_points(tmp_path, tiny_bert):
    spec = load_spec(searched_spec(tmp_path, tiny_bert), check_environment=False)
    assert spec.search == Search("optuna", 3)
    assert spec.num_samples == 3 and [t.point.seed for t in spec.trials] == [1, 2]
    assert spec.trials_to_run == 6


def test_a_missing_search_extra_is_refused_with_its_install_line(tmp_path, tiny_bert, capsys, monkeypatch):
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hpbandster" else found(name, *a))
    path = searched_spec(tmp_path, tiny_bert, search={"algorithm": "bohb", "trials": 2},
                         scheduler={"hyperband_for_bohb": {"max_t": 4}})
    assert sweep_main(["plan", str(path)]) == 2
    assert (f"{path}: search.algorithm: bohb needs hpbandster, not installed: pip install -e '.[search]'"
            in capsys.readouterr().err)
    assert sweep_main(["plan", str(searched_spec(tmp_path, tiny_bert))]) == 0  # optuna does not need it


class Recorder(Searcher):
    """A searcher that suggests a fixed point and records what it is told."""

    def __init__(self):
        super().__init__(metric="score", mode="max")
        self.told: list[tuple[str, dict]] = []
        self.progress: list[tuple[str, dict]] = []

    def suggest(self, trial_id: str) -> dict:
        return {"x": len(self.told)}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.progress.append((trial_id, result))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, **kwargs) -> None:
        self.told.append((trial_id, result))


def test_each_suggestion_runs_every_point_and_the_searcher_learns_their_mean():
    recorder = Recorder()
    points = [{"row": "", "seed": 1}, {"row": "", "seed": 2}, {"row": "", "seed": 3}]
    wrapped = SeedMean(recorder, points)
    configs = [wrapped.suggest(f"t{i}") for i in range(3)]
    assert configs == [{"x": 0, POINT: i, **points[i]} for i in range(3)]
    for i, score in enumerate((0.2, 0.4, 0.9)):
        wrapped.on_trial_result(f"t{i}", {"training_iteration": 1, "score": score})
        assert len(recorder.progress) == (1 if i == 2 else 0)  # told at an iteration every seed reached
    assert recorder.progress[0][0] == "t0" and recorder.progress[0][1]["score"] == pytest.approx(0.5)
    wrapped.on_trial_complete("t0", {"score": 0.2})
    wrapped.on_trial_complete("t1", {"score": 0.4})
    restored = SeedMean(recorder, points)  # as Ray restores a wrapper: its saved state, the groups included
    restored.set_state(pickle.loads(pickle.dumps(wrapped.get_state())))
    restored.on_trial_complete("t2", {"score": 0.9})
    assert restored.searcher.told == [("t0", {"score": pytest.approx(0.5)})]
    assert restored.suggest("t3")[POINT] == 0  # the next suggestion starts a new group


SPACE = {"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)}
OPTIMUM = (2.0, -1.0)
MOST = 80


def trials_to_optimum(algorithm: str, seed: int) -> int:
    """Suggestions ``algorithm`` (built as the engine builds it) needs until one lies within 0.5 of
    :data:`OPTIMUM` of a quadratic whose two seeds add a little noise; :data:`MOST` + 1 when none does."""
    found = searcher(algorithm, "score", "max", seed, [{"seed": 1}, {"seed": 2}])
    found.set_search_properties("score", "max", SPACE)  # what Tune does with the sweep's param space
    for n in range(1, MOST + 1):
        ids = [f"{n}-{copy}" for copy in range(2)]
        configs = [found.suggest(trial_id) for trial_id in ids]
        distance = (configs[0]["x"] - OPTIMUM[0]) ** 2 + (configs[0]["y"] - OPTIMUM[1]) ** 2
        for trial_id, config in zip(ids, configs):
            found.on_trial_complete(trial_id, {"score": -distance + 0.05 * (config["seed"] - 1.5)})
        if distance < 0.25:
            return n
    return MOST + 1


def test_tpe_reaches_a_known_optimum_in_fewer_trials_than_random_search():
    seeds = range(5)
    tpe = [trials_to_optimum("optuna", seed) for seed in seeds]
    random = [trials_to_optimum("random", seed) for seed in seeds]
    assert all(n <= MOST for n in tpe), tpe
    assert sum(tpe) < 0.8 * sum(random), (tpe, random)


@pytest.mark.parametrize("algorithm", ["hyperopt", "bohb"])
def test_the_other_searchers_suggest_points_of_the_space(algorithm):
    found = searcher(algorithm, "score", "max", 0, [{"seed": 1}])
    found.set_search_properties("score", "max", SPACE)
    config = found.suggest("t0")
    assert set(config) == {"x", "y", POINT, "seed"} and -5 <= config["x"] <= 5
