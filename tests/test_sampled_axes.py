"""A spec's sampled axes draw the same values each time it runs (Ray Tune's generator seeded by the spec
hash), and another spec hash draws other values."""

from __future__ import annotations

from pathlib import Path

import ray
import yaml
from ray import tune

from sweep.run.engine import param_space, search_algorithm
from sweep.spec.sweep_spec import SweepSpec, load_spec
from tests.conftest import write_spec

SEARCHED = Path(__file__).resolve().parent.parent / "search_spaces" / "simcse_search.yaml"
SAMPLED = ("temperature", "learning_rate", "mlp_during_training")


def draws(spec: SweepSpec, storage: Path) -> list[tuple]:
    """The sampled values of the trial configs that Ray Tune runs with the sweep's generator, in trial order."""

    def no_op_trainable(config: dict) -> None:  # local, so Ray ships it by value to a worker
        tune.report({"ran": 1})

    tuner = tune.Tuner(no_op_trainable, param_space=param_space(spec),
                       tune_config=tune.TuneConfig(num_samples=spec.num_samples, search_alg=search_algorithm(spec)),
                       run_config=tune.RunConfig(storage_path=str(storage), verbose=0))
    results = tuner.fit()
    return [tuple(results[i].config[knob] for knob in SAMPLED) for i in range(len(results))]


def test_the_same_spec_draws_the_same_samples_and_another_spec_hash_other_ones(tmp_path):
    raw = {key: value for key, value in yaml.safe_load(SEARCHED.read_text()).items() if key != "search"}
    path = write_spec(tmp_path, {**raw, "num_samples": 8})  # the shipped search, drawn at random by Tune
    spec = load_spec(path)
    ray.shutdown()  # a Ray left by another test would refuse this one's start
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        first, again = draws(spec, tmp_path / "a"), draws(load_spec(path), tmp_path / "b")
        other = load_spec(path, overrides={"epochs": 2})
        other_draws = draws(other, tmp_path / "c")
    finally:
        ray.shutdown()
    assert len(first) == spec.num_samples == 8
    assert len(set(first)) == 8  # eight different draws, not one value repeated
    assert again == first
    assert other.spec_hash != spec.spec_hash
    assert other_draws != first
