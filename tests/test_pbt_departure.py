"""Synchronous PBT goes on when a trial leaves the population before a perturbation point (docs/specs.md, PBT), on a
real Ray sweep of the tiny BERT.

Two trials differ in length: ``short`` evaluates once, ``long`` twice, and PBT perturbs at every evaluation,
synchronised. Both wait at the first point; then ``short`` ends while ``long`` reports its second evaluation: the
probe holds ``short``'s final report until ``long`` has reported, so ``long`` is paused to wait for a trial that
then ends without reporting there. Ray's own synchronous PBT leaves ``long`` paused for ever
(ray-project/ray#12122): the sweep never ends and the test runs into its timeout.
:class:`sweep.run.pbt.SynchronisablePBT` perturbs ``long`` alone, and it ends. (Each pause restarts a
trial's worker: minutes on a loaded machine, so the trials are short.)
``quantile_fraction`` 0 makes no exploit, so that each trial keeps its own length.
"""

from __future__ import annotations

import pytest

from results.record import Tag
from sweep.run.engine import SweepOptions, run
from tests import ray_probes
from tests.conftest import child_runs, spec_file
from trainers.metrics import Metric

pytestmark = pytest.mark.slow
NAME = "departure"
EVAL_EVERY = 2
ROWS = [{"name": "short", "set": {"max_steps": EVAL_EVERY}}, {"name": "long", "set": {"max_steps": 2 * EVAL_EVERY}}]
PBT = {"pbt": {"perturbation_interval": 1, "quantile_fraction": 0.0, "synch": True,
               "hyperparam_mutations": {"learning_rate": {"loguniform": [1.0e-7, 1.0e-5]}}}}


def test_a_trial_waiting_for_one_that_ended_goes_on(tmp_path, tiny_bert, local_ray, monkeypatch):
    probe, uri = tmp_path / "probe.jsonl", f"sqlite:///{tmp_path}/mlflow.db"
    path = spec_file(tmp_path, tiny_bert, NAME, rows=ROWS, seeds=[1], scheduler=PBT, max_concurrent_trials=2,
                     base={"model": tiny_bert, "batch_size": 8, "train_limit": 48, "eval_every": EVAL_EVERY,
                           "epochs": 10, "lr_schedule": "constant"})
    ray_probes.install(monkeypatch, probe, hold_end_until_step=2 * EVAL_EVERY)
    run(SweepOptions(str(path), {}, tracking_uri=uri, storage=str(tmp_path / "ray")))

    runs = {r.data.tags[Tag.ROW]: r for r in child_runs(uri, NAME)}
    assert sorted(runs) == ["long", "short"] and all(r.info.status == "FINISHED" for r in runs.values())
    assert runs["long"].data.metrics[Metric.STEPS] == 2 * EVAL_EVERY
    assert runs["short"].data.metrics[Metric.STEPS] == EVAL_EVERY
    # The order the test is about: long's second evaluation came before short's end.
    events = [e for e in ray_probes.events(probe) if e["event"] == "report"]
    second = next(i for i, e in enumerate(events) if e["step"] == 2 * EVAL_EVERY)
    short_end = next(i for i, e in enumerate(events) if e["final"] and e["step"] == EVAL_EVERY)
    assert second < short_end, events
