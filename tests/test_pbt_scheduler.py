""":class:`sweep.run.pbt.SynchronisablePBT` driven through Ray's scheduler calls, with no cluster: trials are Ray's
own stub trials, and the controller keeps only the list of trials the scheduler asks for.

The subclass reads Ray's private PBT state; a Ray that renames it fails here in seconds, where the sweeps of
``test_pbt_departure`` and ``test_pbt_exploit`` would hang into their timeouts.
"""

from __future__ import annotations

import pytest
from ray.train import Checkpoint
from ray.train._internal.session import _TrainingResult
from ray.tune import loguniform
from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

from sweep.run.pbt import SynchronisablePBT

STRONG_RATE, WEAK_RATE = 2.0e-5, 1.0e-5


class Controller:
    """What PBT asks of Tune's controller for paused trials: the trials, and the live ones among them."""

    search_alg = None

    def __init__(self, trials: list[Trial]):
        self.trials = trials

    def get_trials(self) -> list[Trial]:
        return self.trials

    def get_live_trials(self) -> list[Trial]:
        return [trial for trial in self.trials if not trial.is_finished()]


def scheduler(kind: type[PopulationBasedTraining]) -> PopulationBasedTraining:
    # No resampling: an exploited rate is the donor's times 0.8 or 1.2. (The stub trials have no folder for
    # the log of configs.)
    return kind(time_attr="training_iteration", metric="dev", mode="max", perturbation_interval=1,
                quantile_fraction=0.5, resample_probability=0.0, synch=True, require_attrs=False, log_config=False,
                hyperparam_mutations={"learning_rate": loguniform(1.0e-7, 1.0e-3)})


def report(pbt: PopulationBasedTraining, controller: Controller, trial: Trial, step: int, dev: float, path) -> str:
    """``trial`` reports ``dev`` at evaluation ``step`` with a checkpoint at ``path``; paused if PBT says so."""
    trial.set_status(Trial.RUNNING)
    decision = pbt.on_trial_result(controller, trial, {"training_iteration": step, "dev": dev})
    path.mkdir()
    trial.run_metadata.checkpoint_manager._latest_checkpoint_result = _TrainingResult(
        checkpoint=Checkpoint.from_directory(str(path)), metrics={"dev": dev})
    if decision == TrialScheduler.PAUSE:
        trial.set_status(Trial.PAUSED)
    return decision


def population(pbt: PopulationBasedTraining, tmp_path, leaver_ends: bool = True):
    """``strong`` and ``weak`` wait at the first perturbation point; ``leaver`` ends without reaching it (or, with
    ``leaver_ends`` false, is still running towards it)."""
    strong, weak, leaver = (Trial("__fake", config={"learning_rate": rate}, stub=True)
                            for rate in (STRONG_RATE, WEAK_RATE, WEAK_RATE))
    controller = Controller([strong, weak, leaver])
    for trial in controller.trials:
        pbt.on_trial_add(controller, trial)
    assert report(pbt, controller, strong, 1, 0.9, tmp_path / "strong") == TrialScheduler.PAUSE
    assert report(pbt, controller, weak, 1, 0.1, tmp_path / "weak") == TrialScheduler.PAUSE
    leaver.set_status(Trial.RUNNING)
    if leaver_ends:
        pbt.on_trial_complete(controller, leaver, {"training_iteration": 0})
        leaver.set_status(Trial.TERMINATED)
    return controller, strong, weak


def test_rays_synchronous_pbt_leaves_the_population_waiting_for_a_trial_that_ended(tmp_path):
    """The defect the subclass mends (ray-project/ray#12122). If a Ray fixes it, this fails: the subclass can go."""
    pbt = scheduler(PopulationBasedTraining)
    controller, strong, weak = population(pbt, tmp_path)
    assert pbt.choose_trial_to_run(controller) is None
    assert weak.config["learning_rate"] == WEAK_RATE


def test_the_waiting_trials_are_perturbed_among_themselves_when_the_last_other_one_ended(tmp_path):
    pbt = scheduler(SynchronisablePBT)
    controller, strong, weak = population(pbt, tmp_path)
    chosen = pbt.choose_trial_to_run(controller)

    assert chosen in (strong, weak)
    assert weak.config["learning_rate"] == pytest.approx(STRONG_RATE * 0.8) or \
        weak.config["learning_rate"] == pytest.approx(STRONG_RATE * 1.2)
    assert strong.config["learning_rate"] == STRONG_RATE
    assert weak.checkpoint.path == str(tmp_path / "strong")  # the weak trial goes on from the strong one's state
    assert strong.checkpoint.path == str(tmp_path / "strong")
    assert pbt._next_perturbation_sync == 2  # the next point, which both must reach again
    assert pbt.choose_trial_to_run(controller) in (strong, weak)  # and nothing is perturbed twice
    assert pbt._num_perturbations == 1


def test_nothing_is_perturbed_while_a_live_trial_has_yet_to_reach_the_point(tmp_path):
    pbt = scheduler(SynchronisablePBT)
    controller, strong, weak = population(pbt, tmp_path, leaver_ends=False)
    assert pbt.choose_trial_to_run(controller) is None
    assert weak.config["learning_rate"] == WEAK_RATE
    assert pbt._next_perturbation_sync == 1
    assert pbt._num_perturbations == 0

