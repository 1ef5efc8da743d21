"""MLflow tracking from the Ray Tune driver.

Only the driver writes to MLflow (a :class:`ray.tune.Callback`), so a SQLite
store is never written by several processes and workers need no access to it.
Layout: one experiment per spec name, one parent run per sweep, one nested
child run per trial, found again by its ``sweep.trial_id`` tag when a sweep is
resumed, so nothing is logged twice. A sweep that ends with trials left (stopped
by Ctrl-C or SIGTERM, or by an error of the driver) marks the runs of the trials
it interrupted and its parent run KILLED; ``sweep resume`` continues those same
runs, which end FINISHED.
"""

from __future__ import annotations

import getpass
import math
import subprocess
from pathlib import Path
from typing import Any, Callable, Mapping

from mlflow.entities import Metric as MlflowMetric
from mlflow.entities import Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from ray.tune.experiment import Trial

from results.reader import child_runs
from results.record import (
    LAYOUT_TAG,
    PARENT_FILTER,
    REPORT_TAGS,
    Role,
    SweepLayout,
    Tag,
    TrialIdentity,
    axes_text,
    children_filter,
    metric_tag,
    runs_view_tag,
)
from sweep.spec.sweep_spec import POINT, SweepSpec
from sweep.spec.trial_key import trial_key
from sweep.tracking.driver_local import DriverLocal
from sweep.tracking.journal import OUTAGE_BOUND_ENV, Event, PendingWrites, outage_bound_s
from sweep.tracking.store import SharedStoreClient, open_client
from trainers.metrics import Metric, ReportKey
from trainers.training.checkpoint import checkpoint_uri

KILLED = RunStatus.to_string(RunStatus.KILLED)
FINISHED = RunStatus.to_string(RunStatus.FINISHED)
PROJECT = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def project_path(path: Path) -> str:
    """``path`` relative to the project when it lies inside it (as the spec-file tag shows it)."""
    try:
        return str(Path(path).resolve().relative_to(PROJECT))
    except ValueError:
        return str(path)


def sweep_tags(spec: SweepSpec) -> dict[str, str]:
    commit = git_commit()
    return {
        # MLflow's own tags, which fill the UI's Source, Version and User columns.
        Tag.SOURCE_NAME: project_path(spec.path),
        Tag.SOURCE_TYPE: "LOCAL",
        Tag.SOURCE_GIT_COMMIT: commit,
        Tag.USER: getpass.getuser(),
        Tag.SPEC_FILE: project_path(spec.path),
        Tag.SPEC_HASH: spec.spec_hash,
        Tag.NAME: spec.name,
        Tag.BUDGET: spec.budget.name if spec.budget else "none",
        Tag.GIT_COMMIT: commit,
        # What reports need to lay out any sweep's table: which axes are sampled, what ranks trials, the grid's
        # order, symmetric pair, sample ranges and reference row as the spec said when the sweep started.
        Tag.SAMPLED_AXES: ", ".join(spec.sample),
        Tag.METRIC: metric_tag(spec.metric, spec.mode),
        LAYOUT_TAG: SweepLayout(grid={axis: tuple(values) for axis, values in spec.grid.items()},
                                symmetric=spec.symmetric, sample=dict(spec.sample),
                                reference=spec.reference.row if spec.reference else None).to_json(),
    }


def experiment_description(spec: SweepSpec) -> str:
    """The experiment's description in the MLflow UI (Markdown): the spec's description, its tags, its file."""
    facts = "\n".join([f"- {key}: {value}" for key, value in spec.tags.items()]
                      + [f"- spec: {project_path(spec.path)}"])
    return f"{spec.description}\n\n{facts}" if spec.description else facts


def experiment_tags(spec: SweepSpec) -> dict[str, str]:
    """Tags of the spec's experiment: its description (MLflow's note), the spec's own tags, the kind
    that earlier MLflow 3 UIs (before the GenAI / Model training switch) open on the runs for, and the
    shared view of its trials that the summary's link opens (there from the sweep's start)."""
    return {Tag.EXPERIMENT_KIND: Tag.MODEL_TRAINING, Tag.NOTE: experiment_description(spec),
            **{Tag.spec(key): value for key, value in spec.tags.items()}, **dict([runs_view_tag()])}


def ensure_experiment(client: SharedStoreClient, spec: SweepSpec) -> str:
    """The id of the spec's experiment, created if new, its tags brought up to date if not; a driver of
    another variant that created it at the same moment wins, and both use it."""
    tags = experiment_tags(spec)
    experiment = client.get_experiment_by_name(spec.name)
    if experiment is None:
        try:
            return client.create_experiment(spec.name, tags=tags)
        except MlflowException as error:
            if error.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
            experiment = client.get_experiment_by_name(spec.name)
    for key, value in tags.items():  # an experiment made before these tags, or by an edited spec
        if experiment.tags.get(key) != value:
            client.set_experiment_tag(experiment.experiment_id, key, value)
    return experiment.experiment_id


def ensure_parent_run(client: SharedStoreClient, spec: SweepSpec) -> tuple[str, str]:
    """(experiment id, parent run id): the sweep's parent run, created once per spec hash."""
    experiment_id = ensure_experiment(client, spec)
    existing = client.search_runs(
        [experiment_id], filter_string=f"{PARENT_FILTER} and tags.`{Tag.SPEC_HASH}` = '{spec.spec_hash}'",
        max_results=1,
    )
    if existing:
        return experiment_id, existing[0].info.run_id
    tags = {**sweep_tags(spec), Tag.ROLE: Role.PARENT, Tag.RUN_NAME: spec.name}
    tags.update({Tag.spec(k): v for k, v in spec.tags.items()})
    parent = client.create_run(experiment_id, tags=tags, run_name=spec.name)
    if spec.description:
        client.set_tag(parent.info.run_id, Tag.NOTE, spec.description)
    return experiment_id, parent.info.run_id


def trial_identity(spec: SweepSpec, row: str, seed: int, axes: Mapping[str, Any], config: Mapping[str, Any],
                   seeds: tuple[int, ...]) -> TrialIdentity:
    """The identity of a trial of ``spec``: its row, seed, grid and sampled axes' values (``axes``), the config
    it runs, and the seeds its one run stands for (a seed-free trial; empty otherwise)."""
    return TrialIdentity(
        method=config["method"], row=row, seed=seed, seeds=seeds,
        grid_point={knob: axes[knob] for knob in spec.grid}, sampled={knob: axes[knob] for knob in spec.sample},
        knobs=dict(config), metric=spec.metric, mode=spec.mode,
    )


def create_trial_run(client, spec: SweepSpec, experiment_id: str, parent_run_id: str, identity: TrialIdentity,
                     trial_id: str, run_name: str, reused_from: Mapping[str, str] | None = None) -> str:
    """A trial's child run under the sweep's parent: the one writer of trial runs (the tracker's, GLUE's).
    Its tags are the sweep's, the identity's and its key's (:mod:`sweep.spec.trial_key`), and for a reused trial
    those of its source (:meth:`sweep.run.reuse.Source.run_tags`); its params are the knobs it ran, as MLflow's
    strings for the UI's columns and search (readers read the typed identity)."""
    tags = {**sweep_tags(spec), Tag.ROLE: Role.TRIAL, **identity.tags(), **trial_key(identity.knobs).tags(),
            Tag.TRIAL_ID: trial_id, Tag.PARENT_RUN_ID: parent_run_id, **(reused_from or {})}
    run_id = client.create_run(experiment_id, tags=tags, run_name=run_name).info.run_id
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in sorted(identity.knobs.items())])
    return run_id


def numeric_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The trainable's own numeric figures (Ray's bookkeeping keys are left out)."""
    from ray.tune.result import AUTO_RESULT_KEYS

    skip = set(AUTO_RESULT_KEYS) | {"done", "training_iteration", "iterations_since_restore", "seed", *REPORT_TAGS}
    return {
        k: float(v)
        for k, v in result.items()
        if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class MLflowTracker(DriverLocal):
    """Logs each trial as a child run of the sweep's parent run.

    Each callback becomes an event (:mod:`sweep.tracking.journal`) that is written at once while the store
    answers and waits, journalled, while a tracking server does not; past the outage bound the tracker
    asks the sweep to stop (``request_stop``, set by the engine), as Ctrl-C does."""

    def __init__(self, spec: SweepSpec, tracking_uri: str, journal: Path | None = None,
                 note: Callable[[str], None] = print):
        super().__init__(f"tracker:{spec.name}-{spec.spec_hash}")
        self.spec = spec
        self.tracking_uri = tracking_uri
        self._client: SharedStoreClient | None = None
        self._runs: dict[str, str] = {}
        self._last_step: dict[str, int] = {}
        self.experiment_id, self.parent_run_id = ensure_parent_run(self.client, spec)
        self._pending = PendingWrites(tracking_uri, journal, note)
        self._pending.deliver(self._apply)  # what an earlier driver of this sweep could not write
        self._finished: set[str] = set()
        self._open: set[str] = set()
        self._opened: set[str] = set()
        self.reused: Mapping[int, Mapping[str, str]] = {}
        """Index of a trial in the spec -> the tags its run takes from the run it is reused from (sweep.run.reuse)."""
        self.request_stop: Callable[[str], None] | None = None
        self.stop_reason: str | None = None
        self.trials_left = 0
        """Trials the sweep still has to run when it ended (0 when every trial finished or failed)."""

    def setup(self, **info) -> None:
        # Called when the experiment starts, also after a restore. A driver killed right
        # after a trial finished can leave Ray believing the trial unfinished; MLflow's
        # record wins, so nothing is logged twice.
        self._runs, self._last_step, self._open, self._opened = {}, {}, set(), set()
        self._finished = set(self.finished_trials())
        self.client.update_run(self.parent_run_id, status="RUNNING")

    @property
    def client(self) -> SharedStoreClient:
        if self._client is None:
            self._client = open_client(self.tracking_uri)
        return self._client

    @property
    def waiting(self) -> int:
        """Events not yet written (the tracking server did not answer)."""
        return len(self._pending.events)

    def child_runs(self) -> list:
        return child_runs(self.client, self.experiment_id, self.parent_run_id)

    def finished_trials(self) -> dict[str, dict[str, float]]:
        """Final metrics of the trials already FINISHED in MLflow, by Ray trial id."""
        return {
            run.data.tags[Tag.TRIAL_ID]: dict(run.data.metrics)
            for run in self.child_runs()
            if run.info.status == FINISHED and Tag.TRIAL_ID in run.data.tags
        }

    def close_unfinished_runs(self) -> None:
        """Mark KILLED the child runs left RUNNING by a driver whose Ray state is gone:
        their trials run again under new trial ids."""
        for run in self.child_runs():
            if run.info.status in (RunStatus.to_string(RunStatus.RUNNING), RunStatus.to_string(RunStatus.SCHEDULED)):
                self.client.set_tag(run.info.run_id, Tag.ERROR,
                                    "the driver stopped and Ray kept no state of this trial")
                self.client.set_terminated(run.info.run_id, KILLED)

    # ------------------------------------------------------------ callbacks -> events

    def _record(self, trial, event: Event, at_once: bool = False) -> None:
        """Write ``event`` of ``trial`` (after the event that opens its run, the first time), or keep it;
        ``at_once``: try a store that did not answer now, not at its next probe."""
        if trial is not None and trial.trial_id not in self._opened:
            self._opened.add(trial.trial_id)
            identity, name = self._opening(trial)
            source = self.reused.get(trial.config.get(POINT))  # empty for a sampled sweep (SweepSpec.trials_known)
            self._pending.add({"kind": "open", "trial": trial.trial_id, "identity": identity, "name": name,
                               "reused_from": dict(source or {})}, self._apply)
        self._pending.add(event, self._apply, at_once)
        bound = outage_bound_s()
        if self._pending.down_for_s > bound and self.request_stop is not None and self.stop_reason is None:
            self.stop_reason = (f"the tracking server {self.tracking_uri} has not answered for "
                                f"{self._pending.down_for_s:.0f} s (the bound, ${OUTAGE_BOUND_ENV}, is {bound:.0f} s)")
            self.request_stop(self.stop_reason)

    def _opening(self, trial) -> tuple[str, str]:
        """The identity (JSON) and run name of the trial's run, from the config its worker runs
        (:meth:`SweepSpec.config_of`, the same config for the same Tune config)."""
        params = self.spec.trial_params(trial.config)
        row, seed = params["row"], params["seed"]
        seeds = self.spec.stands_for(row)  # a seed-free trial runs once and stands for every seed of the spec
        identity = trial_identity(self.spec, row, seed, params, self.spec.config_of(trial.config), seeds)
        seed_text = f"seed-free (seeds {','.join(map(str, seeds))})" if seeds else f"seed {seed}"
        name = f"{row or axes_text(identity.axes) or self.spec.name} | {seed_text} | {trial.trial_id}"
        return identity.to_json(), name

    def _is_finished(self, trial) -> bool:
        return trial.trial_id in self._finished

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        if not self._is_finished(trial):
            self._open.add(trial.trial_id)
            self._record(trial, {"kind": "start", "trial": trial.trial_id})

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        if self._is_finished(trial):
            return
        # Where it ran, and what 'auto' precisions became on the trial's node.
        tags = {tag: str(result[key]) for key, tag in REPORT_TAGS.items() if key in result}
        tags.update(result.get(ReportKey.REUSED_TAGS) or {})  # another sweep trained it while this one waited
        if Metric.FROZEN_OUTPUTS_COMPUTED in result:  # the trial shared frozen-model outputs (final report)
            tags[Tag.SHARED_FROZEN_OUTPUTS] = "true"
        self._record(trial, {
            "kind": "result", "trial": trial.trial_id, "step": int(result.get(Metric.STEP, 0)),
            "evaluation": Metric.DEV in result and not Metric.is_final(result),
            "timestamp": int(1000 * result.get("timestamp", 0)) or 0, "metrics": numeric_metrics(result),
            "tags": tags,
        })

    def on_checkpoint(self, iteration: int, trials: list, trial, checkpoint, **info) -> None:
        if not self._is_finished(trial):
            self._record(trial, {"kind": "checkpoint", "trial": trial.trial_id, "uri": checkpoint_uri(checkpoint),
                                 "step": (trial.last_result or {}).get(Metric.STEP, 0)})

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        if self._is_finished(trial):
            return
        self._open.discard(trial.trial_id)
        # Stopped by the scheduler (ASHA) before its final test: its run has progress metrics only.
        self._record(trial, {"kind": "complete", "trial": trial.trial_id,
                             "stopped_early": not Metric.is_final(trial.last_result or {})})

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        # Failed, to be retried in the same run: count the failures so far.
        self._record(trial, {"kind": "recover", "trial": trial.trial_id, "failures": trial.num_failures})

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._open.discard(trial.trial_id)
        self._record(trial, {"kind": "error", "trial": trial.trial_id, "failures": trial.num_failures,
                             "error": _trial_error(trial)[:5000]})

    def on_experiment_end(self, trials: list, **info) -> None:
        """The parent run ends FINISHED when no trial is left to run, KILLED otherwise. Ray's cleanup
        marks the trials it interrupted TERMINATED, as if they had ended: they are the trials whose run
        this driver opened and saw neither complete nor fail. Their runs end KILLED, not FINISHED, and
        a resume opens them again."""
        waiting = {t.trial_id for t in trials if t.status in (Trial.PENDING, Trial.PAUSED)}
        self.trials_left = len(self._open | waiting) + max(0, self.spec.trials_to_run - len(trials))
        # The last event: a server back since its last probe gets the backlog now, not at a probe to come.
        self._record(None, {"kind": "end", "killed": sorted(self._open), "left": self.trials_left,
                            "failed": sum(t.status == Trial.ERROR for t in trials)}, at_once=True)
        if self.waiting and self.stop_reason is None:
            self.stop_reason = (f"the tracking server {self.tracking_uri} did not answer at the end of the sweep "
                                f"({self.waiting} records kept in {self._pending.journal}; a resume writes them)")

    # ------------------------------------------------------------ events -> the store

    def _apply(self, event: Event) -> None:
        kind, trial_id = event["kind"], event.get("trial")
        if kind == "open":
            self._runs[trial_id] = self._find_or_create_run(trial_id, event["identity"], event["name"],
                                                            event.get("reused_from"))
            return
        if kind == "end":
            for killed in event["killed"]:
                self.client.set_terminated(self._run_of(killed), KILLED)
            self.client.set_tag(self.parent_run_id, Tag.FAILED_TRIALS, str(event["failed"]))
            self.client.set_terminated(self.parent_run_id, KILLED if event["left"] else FINISHED)
            return
        run_id = self._run_of(trial_id)  # a "start" needs nothing more than its run opened
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
            self.client.set_tag(run_id, Tag.FAILURES, str(event["failures"]))
            self.client.set_tag(run_id, Tag.ERROR, event["error"])
            self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))

    def _found_run(self, trial_id: str):
        """The trial's run under this parent in the store, or None."""
        found = self.client.search_runs(
            [self.experiment_id], filter_string=children_filter(self.parent_run_id, trial_id), max_results=1)
        return found[0] if found else None

    def _run_of(self, trial_id: str) -> str:
        """The run of a trial opened before (by this driver, or by the driver whose journal this one writes)."""
        if trial_id not in self._runs:
            self._runs[trial_id] = self._found_run(trial_id).info.run_id
        return self._runs[trial_id]

    def _find_or_create_run(self, trial_id: str, identity: str, name: str,
                            reused_from: Mapping[str, str] | None = None) -> str:
        """The trial's run under this parent: found again (a resumed trial, a new driver), else created."""
        found = self._found_run(trial_id)
        if found is None:
            return create_trial_run(self.client, self.spec, self.experiment_id, self.parent_run_id,
                                    TrialIdentity.from_json(identity), trial_id, name, reused_from)
        if found.info.status != FINISHED:
            self.client.update_run(found.info.run_id, status="RUNNING")
        return found.info.run_id

    def _logged_up_to(self, run_id: str) -> int:
        """The last evaluation step this run has logged (read once from MLflow, e.g. after a restart)."""
        if run_id not in self._last_step:
            history = self.client.get_metric_history(run_id, Metric.DEV)
            self._last_step[run_id] = max((m.step for m in history), default=0)
        return self._last_step[run_id]

    def _log_result(self, run_id: str, event: Event) -> None:
        step = event["step"]
        # A trial resumed from a checkpoint computes the steps after it again, exactly: log each step once.
        if event["evaluation"] and step <= self._logged_up_to(run_id):
            return
        metrics = [MlflowMetric(k, v, event["timestamp"], step) for k, v in event["metrics"].items()]
        tags = [RunTag(tag, value) for tag, value in event["tags"].items()]
        # One store transaction per report; MLflow takes at most 1000 metrics per call.
        for start in range(0, max(len(metrics), 1), 1000):
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000], tags=tags if start == 0 else [])
        if event["evaluation"]:
            self._last_step[run_id] = step


def _trial_error(trial) -> str:
    path = getattr(trial, "error_file", None)
    if path and Path(path).is_file():
        return Path(path).read_text(encoding="utf-8", errors="replace")
    return str(getattr(trial, "error_msg", None) or "the trial failed; Ray gave no message")
