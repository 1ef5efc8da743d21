"""A probe inside the trial workers of a real Ray sweep: what each trial restored and what it reported.

A test swaps the driver's trainable (:func:`sweep.run.trial.run_sweep_trial`, as :mod:`sweep.run.engine` names it) for
:func:`probed_sweep_trial` and adds
:data:`PROBE_FILE_ENV` to the environment the workers get (:func:`install`). In each worker the probe
wraps two methods, without changing what they do, and appends one JSON line per event to that file:

- ``restored``: after an objective loaded a checkpoint's trained state, a digest of the encoder weights
  it now holds;
- ``report``: every report of the trial (step, learning rate, test metrics or not) and the checkpoint it
  had restored from, as :class:`sweep.run.trial.RaySession` names it.

With :data:`HOLD_END_ENV` a trial's end also waits for another trial's report, to order two trials' events.

:func:`sweep_trial_on_fake_nli` is another trainable to swap in: the real one, in workers whose labelled NLI is
a small fake set (the hub cannot be reached here).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

import torch

import sweep.run.engine as engine
import sweep.run.trial as trial

PROBE_FILE_ENV = "SWEEP_TEST_PROBE_FILE"
HOLD_END_ENV = "SWEEP_TEST_HOLD_END_UNTIL_STEP"
"""When set (to a step), the final report of a trial that ended before that step waits until another trial has
reported it, and :data:`HOLD_MARGIN_S` more, so that the other trial's report reaches the driver while this
trial still runs."""
HOLD_MARGIN_S = 5.0
HOLD_BOUND_S = 600.0
RUN_SWEEP_TRIAL = trial.run_sweep_trial
"""The real trainable, which the probe runs."""


def digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """A digest of named tensors (names, dtypes, shapes and bytes), in name order."""
    hasher = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        hasher.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()


def _record(event: dict[str, Any]) -> None:
    from ray import tune

    line = json.dumps({**event, "trial": tune.get_context().get_trial_id(), "pid": os.getpid()}) + "\n"
    with open(os.environ[PROBE_FILE_ENV], "a", encoding="utf-8") as handle:
        handle.write(line)


def _wrap_once() -> None:
    from trainers.objectives.base import Objective

    if getattr(Objective.load_trained_state, "probed", False):
        return  # a reused worker process
    load, report = Objective.load_trained_state, trial.RaySession.report

    def load_and_record(self, state):
        load(self, state)
        _record({"event": "restored", "digest": digest(self.encoder.model.state_dict())})

    def report_and_record(self, metrics, checkpoint=None):
        final, hold_until = "test_avg_spearman" in metrics, int(os.environ.get(HOLD_END_ENV) or 0)
        if final and metrics["step"] < hold_until:
            _hold_until_another_trial_reports(hold_until)
        _record({"event": "report", "step": metrics.get("step"), "lr": metrics.get("lr"),
                 "final": final, "restored_from": self.worker.get("restored_from")})
        report(self, metrics, checkpoint)

    load_and_record.probed = True
    Objective.load_trained_state = load_and_record
    trial.RaySession.report = report_and_record


def _hold_until_another_trial_reports(step: int) -> None:
    from ray import tune

    me, deadline = tune.get_context().get_trial_id(), time.monotonic() + HOLD_BOUND_S
    while not any(e["event"] == "report" and e["trial"] != me and (e["step"] or 0) >= step
                  for e in events(Path(os.environ[PROBE_FILE_ENV]))):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no other trial reported step {step} in {HOLD_BOUND_S:.0f} s")
        time.sleep(0.2)
    time.sleep(HOLD_MARGIN_S)


def probed_sweep_trial(params: dict[str, Any], spec, finished, **given: Any) -> None:
    """The sweep's trainable, with the probe in place."""
    _wrap_once()
    RUN_SWEEP_TRIAL(params, spec, finished, **given)


def install(monkeypatch, probe_file: Path, hold_end_until_step: int | None = None) -> None:
    """In the driver: trials run through the probe, and their workers know where to write (and, with
    ``hold_end_until_step``, how long a trial's end waits: :data:`HOLD_END_ENV`)."""
    monkeypatch.setenv(PROBE_FILE_ENV, str(probe_file))
    forwarded = (PROBE_FILE_ENV,)
    if hold_end_until_step is not None:
        monkeypatch.setenv(HOLD_END_ENV, str(hold_end_until_step))
        forwarded += (HOLD_END_ENV,)
    monkeypatch.setattr(engine, "FORWARDED_ENV", (*engine.FORWARDED_ENV, *forwarded))
    monkeypatch.setattr(engine, "run_sweep_trial", probed_sweep_trial)


def events(probe_file: Path) -> list[dict[str, Any]]:
    """Every event the workers recorded, in the order each trial wrote them."""
    if not probe_file.is_file():
        return []
    return [json.loads(line) for line in probe_file.read_text(encoding="utf-8").splitlines()]


FAKE_NLI = [("A man plays a guitar on stage.", "A man is performing music.", 0),
            ("A man plays a guitar on stage.", "Nobody is playing anything.", 2),
            ("Two dogs run in a field.", "The dogs are brothers.", 1)] * 12
"""Labelled NLI for the workers of a sweep that trains on it: the hub cannot be reached here."""


def sweep_trial_on_fake_nli(params: dict[str, Any], spec, finished, **given: Any) -> None:
    """The sweep's trainable, in a worker whose labelled NLI is :data:`FAKE_NLI`."""
    import trainers.data.nli_examples as nli

    nli.load_nli_pairs = lambda pair_set: list(FAKE_NLI)
    RUN_SWEEP_TRIAL(params, spec, finished, **given)
