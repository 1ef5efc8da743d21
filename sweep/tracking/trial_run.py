"""The one owner of a sweep's trial runs, from their opening to their end: the Tune callback
(:class:`sweep.tracking.tracker.MLflowTracker`) and GLUE fine-tuning (:mod:`sweep.run.glue`) alike.

Each thing a trial run records (opened, a report, a checkpoint, its end, the sweep's end on the parent run)
is an event (:mod:`sweep.tracking.journal`): written at once while the store answers, kept in order, and
journalled, while a tracking server does not. Events are plain JSON, so the next driver of the sweep writes
what an earlier one could not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mlflow.entities import Metric as MlflowMetric
from mlflow.entities import Param, RunStatus, RunTag

from results.reader import child_runs
from results.record import Role, Tag, TrialIdentity, children_filter
from sweep.spec.sweep_spec import SweepSpec
from sweep.spec.trial_key import trial_key
from sweep.tracking.journal import OUTAGE_BOUND_ENV, Event, PendingWrites, outage_bound_s
from sweep.tracking.store import SharedStoreClient
from trainers.metrics import Metric

KILLED = RunStatus.to_string(RunStatus.KILLED)
FINISHED = RunStatus.to_string(RunStatus.FINISHED)
FAILED = RunStatus.to_string(RunStatus.FAILED)


def trial_identity(spec: SweepSpec, row: str, seed: int, axes: Mapping[str, Any], config: Mapping[str, Any],
                   seeds: tuple[int, ...]) -> TrialIdentity:
    """The identity of a trial of ``spec``: its row, seed, grid and sampled axes' values (``axes``), the config
    it runs, and the seeds its one run stands for (a seed-free trial; empty otherwise)."""
    return TrialIdentity(
        method=config["method"], row=row, seed=seed, seeds=seeds,
        grid_point={knob: axes[knob] for knob in spec.grid}, sampled={knob: axes[knob] for knob in spec.sample},
        knobs=dict(config), metric=spec.metric, mode=spec.mode,
    )


class TrialRuns:
    """The trial runs under one sweep variant's parent run, and the events that write them.

    ``sweep_tags`` are the tags every run of the sweep carries (:func:`sweep.tracking.tracker.sweep_tags`);
    ``journal`` is where events wait while a tracking server does not answer (None: in memory only)."""

    def __init__(self, client: SharedStoreClient, experiment_id: str, parent_run_id: str,
                 sweep_tags: Mapping[str, str], tracking_uri: str, journal: Path | None = None,
                 note: Callable[[str], None] = print):
        self.client = client
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.sweep_tags = dict(sweep_tags)
        self.tracking_uri = tracking_uri
        self._runs: dict[str, str] = {}
        self._last_step: dict[str, int] = {}
        self._pending = PendingWrites(tracking_uri, journal, note)
        self._pending.deliver(self._apply)  # what an earlier driver of this sweep could not write

    def forget(self) -> None:
        """Forget which runs were opened (a restored experiment finds them again in the store)."""
        self._runs, self._last_step = {}, {}

    @property
    def waiting(self) -> int:
        """Events not yet written (the tracking server did not answer)."""
        return len(self._pending.events)

    @property
    def journal(self) -> Path | None:
        return self._pending.journal

    def outage(self) -> str | None:
        """Why the sweep must stop (its tracking server has not answered for longer than the bound), or None."""
        bound = outage_bound_s()
        if self._pending.down_for_s <= bound:
            return None
        return (f"the tracking server {self.tracking_uri} has not answered for "
                f"{self._pending.down_for_s:.0f} s (the bound, ${OUTAGE_BOUND_ENV}, is {bound:.0f} s)")

    def child_runs(self) -> list:
        return child_runs(self.client, self.experiment_id, self.parent_run_id)

    def run_of(self, trial_id: str) -> str:
        """The run of a trial opened before (by this driver, or by the driver whose journal this one writes)."""
        if trial_id not in self._runs:
            self._runs[trial_id] = self._found_run(trial_id).info.run_id
        return self._runs[trial_id]

    def close_unfinished(self) -> None:
        """Mark KILLED the runs left RUNNING by a driver whose Ray state is gone: their trials run again under
        new trial ids."""
        for run in self.child_runs():
            if run.info.status in (RunStatus.to_string(RunStatus.RUNNING), RunStatus.to_string(RunStatus.SCHEDULED)):
                self.client.set_tag(run.info.run_id, Tag.ERROR,
                                    "the driver stopped and Ray kept no state of this trial")
                self.client.set_terminated(run.info.run_id, KILLED)

    # ------------------------------------------------------------ a run's life, as events

    def record(self, event: Event, at_once: bool = False) -> None:
        """Write ``event``, or keep it while the store does not answer; ``at_once``: try a store that did not
        answer now, not at its next probe."""
        self._pending.add(event, self._apply, at_once)

    def open(self, trial_id: str, identity: TrialIdentity, name: str, reused_from: Mapping[str, str] | None = None,
             again: bool = True) -> None:
        """Open the trial's run: found again under the parent when it exists and ``again`` (a resumed trial, a
        new driver), else created (tagged as the run ``reused_from`` says, for a reused trial)."""
        self.record({"kind": "open", "trial": trial_id, "identity": identity.to_json(), "name": name,
                     "reused_from": dict(reused_from or {}), **({} if again else {"again": False})})

    def log(self, trial_id: str, metrics: Mapping[str, float], step: int = 0, timestamp: int = 0,
            evaluation: bool = False, tags: Mapping[str, str] | None = None,
            curves: Mapping[str, Sequence[tuple[int, float]]] | None = None) -> None:
        """Log a report: ``metrics`` at ``step`` (an ``evaluation`` step is logged once, also when a resumed
        trial reports it again), ``tags``, and ``curves`` (each metric's (step, value) points)."""
        self.record({"kind": "result", "trial": trial_id, "step": step, "evaluation": evaluation,
                     "timestamp": timestamp, "metrics": dict(metrics), "tags": dict(tags or {}),
                     **({"curves": {name: [list(point) for point in points] for name, points in curves.items()}}
                        if curves else {})})

    def checkpoint(self, trial_id: str, uri: str, step: int) -> None:
        self.record({"kind": "checkpoint", "trial": trial_id, "uri": uri, "step": step})

    def complete(self, trial_id: str, stopped_early: bool = False) -> None:
        """End the run FINISHED (``stopped_early``: a scheduler stopped it before its final test)."""
        self.record({"kind": "complete", "trial": trial_id, "stopped_early": stopped_early})

    def recover(self, trial_id: str, failures: int) -> None:
        """The trial failed and is retried in the same run."""
        self.record({"kind": "recover", "trial": trial_id, "failures": failures})

    def fail(self, trial_id: str, error: str, failures: int | None = None) -> None:
        """End the run FAILED, saying why (and how often it failed, when it was retried)."""
        self.record({"kind": "error", "trial": trial_id, "error": error[:5000],
                     **({} if failures is None else {"failures": failures})})

    def end(self, killed: Sequence[str], left: int, failed: int) -> None:
        """The sweep's end: the runs of ``killed`` trials end KILLED, the parent FINISHED unless trials are
        ``left``, with its count of ``failed`` trials. The last event: a server back since its last probe gets
        the backlog now."""
        self.record({"kind": "end", "killed": sorted(killed), "left": left, "failed": failed}, at_once=True)

    def model_state(self, run_id: str, state: str) -> None:
        """What became of a finished trial's encoder when its sweep ended (:class:`results.record.ModelState`)."""
        self.record({"kind": "model", "run": run_id, "state": state})

    # ------------------------------------------------------------ events -> the store

    def _apply(self, event: Event) -> None:
        kind, trial_id = event["kind"], event.get("trial")
        if kind == "open":
            self._runs[trial_id] = self._open_run(trial_id, TrialIdentity.from_json(event["identity"]),
                                                  event["name"], event.get("reused_from"), event.get("again", True))
            return
        if kind == "end":
            for killed in event["killed"]:
                self.client.set_terminated(self.run_of(killed), KILLED)
            self.client.set_tag(self.parent_run_id, Tag.FAILED_TRIALS, str(event["failed"]))
            self.client.set_terminated(self.parent_run_id, KILLED if event["left"] else FINISHED)
            return
        if kind == "model":  # by run id: the sweep has ended, its trials are no longer Tune's
            self.client.set_tag(event["run"], Tag.MODEL, event["state"])
            return
        run_id = self.run_of(trial_id)  # a "start" needs nothing more than its run opened
        if kind == "result":
            self._log_result(run_id, event)
        elif kind == "checkpoint":
            self.client.log_batch(run_id, tags=[RunTag(Tag.CHECKPOINT, event["uri"]),
                                                RunTag(Tag.CHECKPOINT_STEP, str(event["step"]))])
        elif kind == "complete":
            if event["stopped_early"]:
                self.client.set_tag(run_id, Tag.STOPPED_BY_SCHEDULER, "true")
            self.client.set_terminated(run_id, FINISHED)
        elif kind == "recover":
            self.client.set_tag(run_id, Tag.FAILURES, str(event["failures"]))
        elif kind == "error":
            if "failures" in event:
                self.client.set_tag(run_id, Tag.FAILURES, str(event["failures"]))
            self.client.set_tag(run_id, Tag.ERROR, event["error"])
            self.client.set_terminated(run_id, FAILED)

    def _found_run(self, trial_id: str):
        """The trial's newest run under this parent in the store, or None."""
        found = self.client.search_runs(
            [self.experiment_id], filter_string=children_filter(self.parent_run_id, trial_id), max_results=1,
            order_by=["attributes.start_time DESC"])
        return found[0] if found else None

    def _open_run(self, trial_id: str, identity: TrialIdentity, name: str, reused_from: Mapping[str, str] | None,
                  again: bool) -> str:
        found = self._found_run(trial_id) if again else None
        if found is None:
            return self._create_run(identity, trial_id, name, reused_from)
        if found.info.status != FINISHED:
            self.client.update_run(found.info.run_id, status="RUNNING")
        return found.info.run_id

    def _create_run(self, identity: TrialIdentity, trial_id: str, name: str,
                    reused_from: Mapping[str, str] | None = None) -> str:
        """A trial's child run under the sweep's parent: the one place trial runs are created. Its tags are the
        sweep's, the identity's and its key's (:mod:`sweep.spec.trial_key`), and for a reused trial those of its
        source (:meth:`sweep.run.reuse.Source.run_tags`); its params are the knobs it ran, as MLflow's strings for
        the UI's columns and search (readers read the typed identity)."""
        tags = {**self.sweep_tags, Tag.ROLE: Role.TRIAL, **identity.tags(), **trial_key(identity.knobs).tags(),
                Tag.TRIAL_ID: trial_id, Tag.PARENT_RUN_ID: self.parent_run_id, **(reused_from or {})}
        run_id = self.client.create_run(self.experiment_id, tags=tags, run_name=name).info.run_id
        self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in sorted(identity.knobs.items())])
        return run_id

    def _logged_up_to(self, run_id: str) -> int:
        """The last evaluation step this run has logged (read once from MLflow, e.g. after a restart)."""
        if run_id not in self._last_step:
            history = self.client.get_metric_history(run_id, Metric.DEV)
            self._last_step[run_id] = max((m.step for m in history), default=0)
        return self._last_step[run_id]

    def _log_result(self, run_id: str, event: Event) -> None:
        step, stamp = event["step"], event["timestamp"]
        # A trial resumed from a checkpoint computes the steps after it again, exactly: log each step once.
        if event["evaluation"] and step <= self._logged_up_to(run_id):
            return
        metrics = [MlflowMetric(k, v, stamp, step) for k, v in event["metrics"].items()]
        metrics += [MlflowMetric(name, value, stamp, at) for name, points in event.get("curves", {}).items()
                    for at, value in points]
        tags = [RunTag(tag, value) for tag, value in event["tags"].items()]
        # One store transaction per report; MLflow takes at most 1000 metrics per call.
        for start in range(0, max(len(metrics), 1), 1000):
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000], tags=tags if start == 0 else [])
        if event["evaluation"]:
            self._last_step[run_id] = step
