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

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from ray.tune.experiment import Trial

from results.reader import trial_tags, variant_parent
from results.record import (
    LAYOUT_TAG,
    REPORT_TAGS,
    Role,
    SweepLayout,
    Tag,
    TrialIdentity,
    axes_text,
    metric_tag,
    runs_view_tag,
)
from sweep.spec.sweep_spec import POINT, SweepSpec
from sweep.tracking.driver_local import DriverLocal
from sweep.tracking.store import SharedStoreClient, open_client
from sweep.tracking.trial_run import FINISHED, TrialRuns, trial_identity
from trainers.metrics import Metric, ReportKey
from trainers.training.checkpoint import checkpoint_uri

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
    existing = variant_parent(client, experiment_id, spec.spec_hash)
    if existing is not None:
        return experiment_id, existing.info.run_id
    tags = {**sweep_tags(spec), Tag.ROLE: Role.PARENT, Tag.RUN_NAME: spec.name}
    tags.update({Tag.spec(k): v for k, v in spec.tags.items()})
    parent = client.create_run(experiment_id, tags=tags, run_name=spec.name)
    if spec.description:
        client.set_tag(parent.info.run_id, Tag.NOTE, spec.description)
    return experiment_id, parent.info.run_id


def open_trial_runs(spec: SweepSpec, tracking_uri: str, journal: Path | None = None,
                    note: Callable[[str], None] = print) -> TrialRuns:
    """The trial runs of ``spec``'s sweep variant, under its parent run (created once per spec hash)."""
    client = open_client(tracking_uri)
    experiment_id, parent_run_id = ensure_parent_run(client, spec)
    return TrialRuns(client, experiment_id, parent_run_id, sweep_tags(spec), tracking_uri, journal, note)


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

    Each callback becomes an event of the trial's run (:class:`sweep.tracking.trial_run.TrialRuns`), written at
    once while the store answers and kept, journalled, while a tracking server does not; past the outage bound
    the tracker asks the sweep to stop (``request_stop``, set by the engine), as Ctrl-C does."""

    def __init__(self, spec: SweepSpec, tracking_uri: str, journal: Path | None = None,
                 note: Callable[[str], None] = print):
        super().__init__(f"tracker:{spec.name}-{spec.spec_hash}")
        self.spec = spec
        self.tracking_uri = tracking_uri
        self.runs = open_trial_runs(spec, tracking_uri, journal, note)
        self.client: SharedStoreClient = self.runs.client
        self.experiment_id, self.parent_run_id = self.runs.experiment_id, self.runs.parent_run_id
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
        self.runs.forget()
        self._open, self._opened = set(), set()
        self._finished = set(self.finished_trials())
        self.client.update_run(self.parent_run_id, status="RUNNING")

    @property
    def waiting(self) -> int:
        """Events not yet written (the tracking server did not answer)."""
        return self.runs.waiting

    def child_runs(self) -> list:
        return self.runs.child_runs()

    def finished_trials(self) -> dict[str, dict[str, float]]:
        """Final metrics of the trials already FINISHED in MLflow, by Ray trial id."""
        finished = [(trial_tags(run).trial_id, run) for run in self.child_runs() if run.info.status == FINISHED]
        return {trial_id: dict(run.data.metrics) for trial_id, run in finished if trial_id is not None}

    def close_unfinished_runs(self) -> None:
        """Mark KILLED the child runs left RUNNING by a driver whose Ray state is gone:
        their trials run again under new trial ids."""
        self.runs.close_unfinished()

    # ------------------------------------------------------------ callbacks -> the trial runs' events

    def _opened_run(self, trial) -> str:
        """The trial's id, its run opened first the first time (the event that opens it, then this one's)."""
        if trial.trial_id not in self._opened:
            self._opened.add(trial.trial_id)
            source = self.reused.get(trial.config.get(POINT))  # empty for a sampled sweep (SweepSpec.trials_known)
            self.runs.open(trial.trial_id, *self._opening(trial), reused_from=source)
        return trial.trial_id

    def _check_outage(self) -> None:
        """Past the outage bound, ask the sweep to stop (once)."""
        reason = self.runs.outage()
        if reason and self.request_stop is not None and self.stop_reason is None:
            self.stop_reason = reason
            self.request_stop(reason)

    def _opening(self, trial) -> tuple[TrialIdentity, str]:
        """The identity and run name of the trial's run, from the config its worker runs
        (:meth:`SweepSpec.config_of`, the same config for the same Tune config)."""
        params = self.spec.trial_params(trial.config)
        row, seed = params["row"], params["seed"]
        seeds = self.spec.stands_for(row)  # a seed-free trial runs once and stands for every seed of the spec
        identity = trial_identity(self.spec, row, seed, params, self.spec.config_of(trial.config), seeds)
        seed_text = f"seed-free (seeds {','.join(map(str, seeds))})" if seeds else f"seed {seed}"
        name = f"{row or axes_text(identity.axes) or self.spec.name} | {seed_text} | {trial.trial_id}"
        return identity, name

    def _is_finished(self, trial) -> bool:
        return trial.trial_id in self._finished

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        if not self._is_finished(trial):
            self._open.add(trial.trial_id)
            self._opened_run(trial)
            self._check_outage()

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        if self._is_finished(trial):
            return
        # Where it ran, and what 'auto' precisions became on the trial's node.
        tags = {tag: str(result[key]) for key, tag in REPORT_TAGS.items() if key in result}
        tags.update(result.get(ReportKey.REUSED_TAGS) or {})  # another sweep trained it while this one waited
        if Metric.FROZEN_OUTPUTS_COMPUTED in result:  # the trial shared frozen-model outputs (final report)
            tags[Tag.SHARED_FROZEN_OUTPUTS] = "true"
        self.runs.log(self._opened_run(trial), numeric_metrics(result), int(result.get(Metric.STEP, 0)),
                      int(1000 * result.get("timestamp", 0)) or 0,
                      evaluation=Metric.DEV in result and not Metric.is_final(result), tags=tags)
        self._check_outage()

    def on_checkpoint(self, iteration: int, trials: list, trial, checkpoint, **info) -> None:
        if not self._is_finished(trial):
            self.runs.checkpoint(self._opened_run(trial), checkpoint_uri(checkpoint),
                                 (trial.last_result or {}).get(Metric.STEP, 0))
            self._check_outage()

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        if self._is_finished(trial):
            return
        self._open.discard(trial.trial_id)
        # Stopped by the scheduler (ASHA) before its final test: its run has progress metrics only.
        self.runs.complete(self._opened_run(trial), stopped_early=not Metric.is_final(trial.last_result or {}))
        self._check_outage()

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        # Failed, to be retried in the same run: count the failures so far.
        self.runs.recover(self._opened_run(trial), trial.num_failures)
        self._check_outage()

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._open.discard(trial.trial_id)
        self.runs.fail(self._opened_run(trial), _trial_error(trial), trial.num_failures)
        self._check_outage()

    def on_experiment_end(self, trials: list, **info) -> None:
        """The parent run ends FINISHED when no trial is left to run, KILLED otherwise. Ray's cleanup
        marks the trials it interrupted TERMINATED, as if they had ended: they are the trials whose run
        this driver opened and saw neither complete nor fail. Their runs end KILLED, not FINISHED, and
        a resume opens them again."""
        waiting = {t.trial_id for t in trials if t.status in (Trial.PENDING, Trial.PAUSED)}
        self.trials_left = len(self._open | waiting) + max(0, self.spec.trials_to_run - len(trials))
        self.runs.end(self._open, self.trials_left, sum(t.status == Trial.ERROR for t in trials))
        self._check_outage()
        if self.waiting and self.stop_reason is None:
            self.stop_reason = (f"the tracking server {self.tracking_uri} did not answer at the end of the sweep "
                                f"({self.waiting} records kept in {self.runs.journal}; a resume writes them)")


def _trial_error(trial) -> str:
    path = getattr(trial, "error_file", None)
    if path and Path(path).is_file():
        return Path(path).read_text(encoding="utf-8", errors="replace")
    return str(getattr(trial, "error_msg", None) or "the trial failed; Ray gave no message")
