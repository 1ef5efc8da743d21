"""The worker's side of a sweep: one trial inside Ray Tune.

Kept apart from :mod:`sweep.run.engine` (the driver) so that a trial worker imports Ray Tune and the trainers
only, not the driver's MLflow tracker, progress view and reports: a worker starts that much sooner.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

import ray
from ray import tune

from sweep.run.claims import Awaited, wait_for_run
from sweep.spec.sweep_spec import POINT, SweepSpec
from trainers.errors import first_line
from trainers.metrics import ReportKey
from trainers.training.checkpoint import TrialSession, checkpoint_uri, sibling_checkpoints, trial_folder

STORAGE_OUTAGE_ENV = "SWEEP_STORAGE_OUTAGE_S"
"""How long a trial tries again to store or read a checkpoint that the sweep's storage does not answer for
(seconds)."""
DEFAULT_STORAGE_OUTAGE_S = 600.0
RETRY_PAUSES_S = (1.0, 2.0, 5.0, 10.0)
"""The pauses between a checkpoint's tries, the last one repeated."""


T = TypeVar("T")


def storage_outage_bound_s() -> float:
    return float(os.environ.get(STORAGE_OUTAGE_ENV, DEFAULT_STORAGE_OUTAGE_S))


def storage_may_come_back(error: BaseException) -> bool:
    """Whether ``error``, raised while Ray stored a checkpoint, is storage that did not answer (an object
    store or network mount gone for a while: pyarrow's S3/GCS errors are OSErrors without an errno), which a
    later try may get past. A local disk's error carries its errno (ENOSPC, EDQUOT, EROFS): that one fails
    the trial at once, as docs/checkpoints.md says, and Ray retries it from its last stored checkpoint."""
    return isinstance(error, OSError) and error.errno is None


def with_storage_retries(call: Callable[[], T], failed: str, bound_s: float | None = None) -> T:
    """``call()`` (a checkpoint stored or read), tried again while the storage does not answer, for up to
    ``bound_s`` (:data:`STORAGE_OUTAGE_ENV`), each failed try a line ``{failed} (try N): ...`` on stderr (the
    trial's log); past the bound its error is raised (the trial fails; Ray retries it from the last checkpoint
    it stored). The trial holds meanwhile: training on without a checkpoint would leave nothing to resume
    from, the final checkpoint (the encoder) must be stored at all, and a trial Ray retries during the outage
    must read its checkpoint, not start afresh.

    A store that fails has reported nothing: Ray persists the checkpoint before it hands the result on, and
    names each try's checkpoint folder anew, so a half-written folder is left under its own name, never under
    the last sealed one's, and nothing reads it as whole (its seal, :func:`trainers.training.checkpoint.incomplete`)."""
    deadline = time.monotonic() + (storage_outage_bound_s() if bound_s is None else bound_s)
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except OSError as error:
            if not storage_may_come_back(error) or time.monotonic() >= deadline:
                raise
            pause = RETRY_PAUSES_S[min(attempt, len(RETRY_PAUSES_S)) - 1]
            print(f"{failed} (try {attempt}): {first_line(error)}; trying again in {pause:.0f} s "
                  f"(for up to {STORAGE_OUTAGE_ENV}={storage_outage_bound_s():.0f} s in all)",
                  file=sys.stderr, flush=True)
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))


class RaySession(TrialSession):
    """A trial inside Ray Tune: reports and checkpoints go to ``tune.report``, and the checkpoints to
    resume from are ``tune.get_checkpoint()`` (set by Ray after a failure, a resumed sweep or a PBT
    exploit), then the older ones Ray keeps beside it, so that an unreadable newest checkpoint falls
    back to the previous one as it does outside Ray. ``worker`` (node id, process id) goes with every
    report, for the tracker's tags; ``restored_from`` names the checkpoint the trial last opened."""

    keeps_checkpoints = True

    def __init__(self, worker: Mapping[str, Any], may_pause: bool = False):
        super().__init__()
        self.worker = dict(worker)
        self.may_pause = may_pause
        self._sources: dict[str, str] = {}  # a downloaded copy's folder -> the checkpoint's URI in the storage

    def report(self, metrics: dict[str, Any], checkpoint: Path | None = None) -> None:
        if checkpoint is None:
            tune.report({**metrics, **self.worker})
            return
        with_storage_retries(lambda: tune.report({**metrics, **self.worker},
                                                 checkpoint=tune.Checkpoint.from_directory(checkpoint)),
                             f"checkpoint of step {metrics.get('step')} not stored")

    def checkpoints(self) -> Iterator[Path]:
        """Ray's checkpoint, then the older ones in its folder (the trial's own, or its PBT donor's),
        newest first. A remote checkpoint is downloaded only when the reader gets to it."""
        latest = tune.get_checkpoint()
        if latest is None:
            return
        older = with_storage_retries(lambda: self._older_than(latest), f"checkpoints beside {checkpoint_uri(latest)} "
                                     "not listed")
        for checkpoint in (latest, *older):
            uri = checkpoint_uri(checkpoint)
            self.worker[ReportKey.RESTORED_FROM] = uri
            with ExitStack() as opened:  # a remote checkpoint is downloaded as it is entered
                directory = with_storage_retries(lambda: opened.enter_context(checkpoint.as_directory()),
                                                 f"checkpoint {uri} not read")
                self._sources[str(Path(directory))] = uri
                yield Path(directory)

    def source(self, directory: Path) -> str:
        return self._sources.get(str(Path(directory)), str(directory))

    @classmethod
    def _older_than(cls, latest: tune.Checkpoint) -> list[tune.Checkpoint]:
        """The checkpoints beside ``latest`` with a lower number, newest first. Newer ones are left alone: Ray's
        state did not name them."""
        _, index = trial_folder(latest)
        return [tune.Checkpoint(path, latest.filesystem)
                for found, path in reversed(sibling_checkpoints(latest)) if found < index]


def run_sweep_trial(params: dict[str, Any], spec: SweepSpec, finished: Mapping[str, Mapping[str, float]],
                    reused: Mapping[int, Mapping[str, float]] | None = None,
                    awaited: Mapping[int, Awaited] | None = None, tracking_uri: str | None = None) -> None:
    """The Ray Tune function trainable: one trial of ``spec``.

    ``finished`` holds the final metrics of trials MLflow already records as
    finished; such a trial (re-queued by Ray after a driver crash) reports
    them again instead of training again. ``reused`` holds, by the trial's index
    in the spec, the metrics of the run another sweep trained with the same key
    (:mod:`sweep.run.reuse`): such a trial reports them and trains nothing. ``awaited`` holds the trials that
    another running sweep has claimed (:mod:`sweep.run.claims`): such a trial waits for that sweep's run, read from
    the store at ``tracking_uri``, and reports it as reused, or trains when that sweep stopped without it.
    """
    import torch

    from trainers.training.loop import run_trial

    trial_id = tune.get_context().get_trial_id()
    if trial_id in finished:
        tune.report(dict(finished[trial_id]))
        return
    if reused and params.get(POINT) in reused:
        tune.report(dict(reused[params[POINT]]))
        return
    if awaited and params.get(POINT) in awaited:
        found = wait_for_run(tracking_uri, awaited[params[POINT]])
        if found is not None:
            tune.report({**found["metrics"], ReportKey.REUSED_TAGS: found["tags"]})
            return

    torch.set_num_threads(max(1, int(spec.resources.cpu)))
    worker = {ReportKey.NODE_ID: ray.get_runtime_context().get_node_id(), ReportKey.WORKER_PID: os.getpid()}
    run_trial(spec.config_of(params), RaySession(worker, may_pause=spec.scheduler is not None
                                                 and spec.scheduler.pauses_trials))
