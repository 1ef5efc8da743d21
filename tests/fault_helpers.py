"""Trials that hold at a known step until the test releases them, so that a fault test injects its fault at
that step instead of racing a clock against a trial (a loaded machine makes any such race lose).

The driver of such a test runs ``python -c "from tests.fault_helpers import drive; drive()" run ...`` (the
sweep's own command line, :func:`drive`): its trainable is :func:`held_sweep_trial`, the sweep's trainable
with a hold in the worker's ``RaySession.report``. A trial holds after its report of each step named in
``$SWEEP_TEST_HOLD_STEPS`` (its checkpoint, if any, then stored and handed to Ray), writes
``held-STEP.json`` (its node and process) in ``$SWEEP_TEST_HOLD_DIR``, and goes on once ``held-STEP.release``
exists there. Only the first trial to reach a step holds there (the file exists after it), never a trial
restored from a checkpoint (a retry, a resumed sweep), and, with ``$SWEEP_TEST_HOLD_SEED``, only a trial of
that seed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HOLD_DIR_ENV, HOLD_STEPS_ENV, HOLD_SEED_ENV = "SWEEP_TEST_HOLD_DIR", "SWEEP_TEST_HOLD_STEPS", "SWEEP_TEST_HOLD_SEED"
HOLDING_DRIVER = [sys.executable, "-c", "from tests.fault_helpers import drive; drive()"]
"""``python -m sweep`` with held trials: the driver's command, before the sweep's arguments."""
UNTIL_IT_HAPPENS = float("inf")
"""A wait's cap (``tests.conftest.wait_for``) in a fault test: none of the test's own; a wait ends on its
event, on the driver's exit, or at pytest's timeout (a fixed cap is a race a loaded machine loses)."""


def hold_env(folder: Path, *steps: int, seed: int | None = None) -> dict[str, str]:
    """The variables that make the trials of a driver (and of the Ray nodes it starts) hold at ``steps``."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {HOLD_DIR_ENV: str(folder), HOLD_STEPS_ENV: ",".join(map(str, steps))}
    return env if seed is None else {**env, HOLD_SEED_ENV: str(seed)}


def held_file(folder: Path, step: int) -> Path:
    """Written by the trial held at ``step``: its node id and process id (JSON)."""
    return folder / f"held-{step}.json"


def release(folder: Path, step: int) -> None:
    """Let the trial held at ``step`` go on (also before it got there: it then does not hold)."""
    folder.mkdir(parents=True, exist_ok=True)
    held_file(folder, step).with_suffix(".release").touch()


def release_all(folder: Path, *steps: int) -> None:
    """Release every step a trial may hold at (a test's cleanup: no held worker outlives it)."""
    for step in steps:
        release(folder, step)


_seed_holds = True
"""Whether the trial running in this worker is of the seed that holds (set per trial by held_sweep_trial)."""


def _holds_at(metrics: dict, restored: bool) -> Path | None:
    """The held file of this report's step, when the trial is to hold after it."""
    steps = {int(s) for s in os.environ.get(HOLD_STEPS_ENV, "").split(",") if s}
    step = metrics.get("step")
    if not _seed_holds or restored or step not in steps or "test_avg_spearman" in metrics:
        return None
    held = held_file(Path(os.environ[HOLD_DIR_ENV]), step)
    return None if held.exists() else held


def _hold_after_report(report):
    """``RaySession.report`` that holds after the report of a hold step until it is released."""

    def report_and_hold(self, metrics, checkpoint=None):
        import ray

        report(self, metrics, checkpoint)
        held = _holds_at(metrics, bool(self.worker.get("restored_from")))
        if held is None:
            return
        held.write_text(json.dumps({"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}))
        while not held.with_suffix(".release").exists():  # until released, or the worker is killed
            time.sleep(0.1)

    report_and_hold.held = True
    return report_and_hold


def held_sweep_trial(params, spec, finished, **given) -> None:
    """The sweep's trainable (:func:`sweep.run.trial.run_sweep_trial`), with the hold in place in its worker."""
    import sweep.run.trial as trial

    global _seed_holds
    seed = os.environ.get(HOLD_SEED_ENV)
    _seed_holds = seed is None or str(spec.trial_params(params)["seed"]) == seed
    if not getattr(trial.RaySession.report, "held", False):
        trial.RaySession.report = _hold_after_report(trial.RaySession.report)
    trial.run_sweep_trial(params, spec, finished, **given)


def drive() -> None:
    """``python -m sweep`` with the held trainable: the driver process of a fault test."""
    import sweep.run.engine as engine
    from sweep.commands.cli import main

    engine.run_sweep_trial = held_sweep_trial
    sys.exit(main(sys.argv[1:]))


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True
