"""Population-based training on the tiny BERT: exploits restore the donor's checkpoint."""

from __future__ import annotations

import json

import pytest
import ray

from sweep.engine import SweepOptions, run
from sweep.spec import SpecError, load_spec
from tests.test_sweep_run import child_runs, spec_file

PBT = {"pbt": {"perturbation_interval": 1, "quantile_fraction": 0.5,
               "hyperparam_mutations": {"learning_rate": {"loguniform": [1.0e-5, 1.0e-2]}, "temperature": [0.05, 0.1]}}}


def test_pbt_exploits_continue_from_the_donors_checkpoint(tmp_path, tiny_bert, use_tiny_sts):
    ray.shutdown()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = spec_file(
        tmp_path, tiny_bert, "pbt", rows=[{"name": "simcse", "set": {"max_steps": 12, "eval_every": 2, "epochs": 10}}],
        seeds=[1], sample={"learning_rate": {"loguniform": [1.0e-5, 1.0e-2]}}, num_samples=4, scheduler=PBT,
        resources={"cpu": 0.5}, max_concurrent_trials=4,
    )
    try:
        run(SweepOptions(str(path), {}, tracking_uri=uri, storage=str(tmp_path / "ray")))
    finally:
        ray.shutdown()
    (log,) = list((tmp_path / "ray").glob("*/pbt_global.txt"))
    exploits = [json.loads(line) for line in log.read_text().splitlines()]
    assert exploits, "PBT made no exploit"
    runs = {r.data.tags["sweep.trial_id"]: r for r in child_runs(uri, "pbt")}
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs.values())
    by_index = {int(trial_id.split("_")[-1]): r for trial_id, r in runs.items()}  # Ray's tags start with it

    def trial_of(tag: str):
        return by_index[int(tag.split("_")[0])]

    last_exploit = {target: clone for target, clone, _, _, _, _ in exploits}
    continued = []
    for target_tag, clone_tag in last_exploit.items():
        target, clone = trial_of(target_tag), trial_of(clone_tag)
        # A trial may restore again later (its own checkpoint after a pause), so check those whose
        # last restore was the exploit: it loaded the donor's checkpoint of the donor's evaluation.
        if f"{clone.data.tags['sweep.trial_id']}_" in target.data.tags["sweep.restored_from"]:
            assert target.data.metrics["resumed_from_step"] > 0  # not a fresh start
            continued.append(target_tag)
    assert continued, f"no exploiting trial continued from its donor's checkpoint: {exploits}"


@pytest.mark.parametrize("scheduler, message", [
    ({"pbt": {"perturbation_interval": 1, "hyperparam_mutations": {"temprature": [0.1]}}}, "did you mean 'temperature'"),
    ({"pbt": {"perturbation_interval": 0, "hyperparam_mutations": {"temperature": [0.1]}}}, "perturbation_interval"),
    ({"pbt": {"perturbation_interval": 1, "hyperparam_mutations": {"temperature": [99.0]}}}, "expected a value <= 10.0"),
    ({"pbt": {"perturbation_interval": 1, "hyperparam_mutations": {"batch_size": {"uniform": [8, 16]}}}},
     "a int knob takes a list of values"),
    ({"pbt": {"perturbation_interval": 3, "hyperparam_mutations": {"temperature": [0.1]}}},
     "must be a multiple of checkpoint_every (2)"),
    ({"pbt": {"hyperparam_mutations": {"temperature": [0.1]}}}, "expected {perturbation_interval"),
])
def test_pbt_specs_are_validated_like_asha(tmp_path, tiny_bert, scheduler, message):
    path = spec_file(tmp_path, tiny_bert, "pbt-bad", scheduler=scheduler)
    with pytest.raises(SpecError) as error:
        load_spec(path, {"checkpoint_every": 2})
    assert any(message in problem and "scheduler.pbt" in problem for problem in error.value.problems)
