"""Population-based training: specs are validated like ASHA's. What an exploit does on a real Ray sweep
(the donor's step, weights and the mutated learning rate) is tests/test_pbt_exploit.py's, marked slow."""

from __future__ import annotations

import pytest

from sweep.run.engine import _scheduler
from sweep.spec.sweep_spec import SpecError, load_spec
from tests.conftest import spec_file


@pytest.mark.parametrize("scheduler, message", [
    ({"pbt": {"perturbation_interval": 1, "hyperparam_mutations": {"temprature": [0.1]}}},
     "did you mean 'temperature'"),
    ({"pbt": {"perturbation_interval": 0, "hyperparam_mutations": {"temperature": [0.1]}}}, "perturbation_interval"),
    ({"pbt": {"perturbation_interval": 1, "hyperparam_mutations": {"temperature": [99.0]}}},
     "expected a value <= 10.0"),
    ({"pbt": {"perturbation_interval": 1, "hyperparam_mutations": {"batch_size": {"uniform": [8, 16]}}}},
     "a int knob takes a list of values"),
    ({"pbt": {"perturbation_interval": 3, "hyperparam_mutations": {"temperature": [0.1]}}},
     "must be a multiple of checkpoint_every (2)"),
    ({"pbt": {"hyperparam_mutations": {"temperature": [0.1]}}}, "expected {perturbation_interval"),
    ({"pbt": {"perturbation_interval": 2, "synch": "yes", "hyperparam_mutations": {"temperature": [0.1]}}},
     "synch: expected true or false, got 'yes'"),
    ({"pbt": {"perturbation_interval": 2, "sync": True, "hyperparam_mutations": {"temperature": [0.1]}}},
     "sync: unknown option"),
])
def test_pbt_specs_are_validated_like_asha(tmp_path, tiny_bert, scheduler, message):
    path = spec_file(tmp_path, tiny_bert, "pbt-bad", scheduler=scheduler)
    with pytest.raises(SpecError) as error:
        load_spec(path, {"checkpoint_every": 2})
    assert any(message in problem and "scheduler.pbt" in problem for problem in error.value.problems)


@pytest.mark.parametrize("synch", [True, False])
def test_synch_reaches_rays_scheduler(tmp_path, tiny_bert, synch):
    """``synch`` is Ray's own flag: the spec's value is the scheduler's (Ray's default, False, when unset)."""
    options = {"perturbation_interval": 2, "hyperparam_mutations": {"temperature": [0.1, 0.05]}}
    scheduler = {"pbt": {**options, **({"synch": True} if synch else {})}}
    path = spec_file(tmp_path, tiny_bert, "pbt-synch", rows=[{"name": "simcse", "set": {}}], scheduler=scheduler)
    assert _scheduler(load_spec(path, {"checkpoint_every": 2}))._synch is synch
