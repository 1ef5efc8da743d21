"""Ray Tune's PBT, whose synchronous mode also moves on when a trial leaves the population.

Synchronous PBT (``synch: true``) pauses each trial at a perturbation point and perturbs when the last live
trial reports there. A trial that ends before it gets there (its last evaluation came earlier, patience
stopped it, it failed) never reports there, and Ray leaves the trials waiting at the point paused for ever
(ray-project/ray#12122; its fix #23472 only stopped counting trials that had already ended when the last
report came). Here the point is also reached when every live trial waits at it: the trials are perturbed
among themselves, as if the one that ended had never been in the population, and go on.
"""

from __future__ import annotations

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining


class SynchronisablePBT(PopulationBasedTraining):
    """:class:`PopulationBasedTraining` that perturbs the trials waiting at a synchronous perturbation point
    when no live trial is left to report there (see the module's docstring). Asynchronous PBT is Ray's own."""

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        # Ray asks every step which paused trial to run: a trial that ended since the last step has left.
        if self._synch:
            self._perturb_if_every_live_trial_waits(tune_controller)
        return super().choose_trial_to_run(tune_controller)

    def _perturb_if_every_live_trial_waits(self, tune_controller) -> None:
        """What Ray's ``on_trial_result`` does when the last trial reports at the point, over the live trials."""
        live = tune_controller.get_live_trials()
        point = self._next_perturbation_sync
        if not live or any(trial.status != Trial.PAUSED or self._trial_state[trial].last_train_time < point
                           for trial in live):
            return
        lower, upper = self._quantiles()  # of the unfinished trials with a score: the live ones
        middle = [trial for trial in live if trial not in lower and trial not in upper]
        for trial in upper + middle + lower:  # the strong trials' checkpoints before the weak ones copy them
            self._trial_state[trial].last_perturbation_time = self._trial_state[trial].last_train_time
            self._checkpoint_or_exploit(trial, tune_controller, upper, lower)
        newest = max(self._trial_state[trial].last_train_time for trial in live)
        self._next_perturbation_sync = max(point, newest) + self._perturbation_interval
