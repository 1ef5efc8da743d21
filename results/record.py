"""What a sweep's MLflow runs are made of: every tag and param name, the filters that find runs, the parent
run's summary and the codec of a trial's typed identity. The metric names are the trainers'
(:mod:`trainers.metrics`).

This is the one place where these names are written as literals. The loop
reports metrics under :class:`Metric` names, the tracker turns them into MLflow
metrics and :class:`Tag` tags on a trial's child run and the sweep's parent run
(:class:`Summary`), and exports, ``sweep status``, ``reports.collect``, the
end-of-sweep summary and the tables read them back by the same names.

It is plain Python (MLflow's filter syntax is text): importing it imports
neither torch nor Ray nor MLflow, so reports read the names for free. The
checkpoint layout is :mod:`trainers.training.checkpoint`'s.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping
from urllib.parse import quote, urlencode

from results.ranking import DEFAULT_METRIC, DEFAULT_MODE, ranked_by
from trainers.metrics import Metric, ReportKey

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
"""Where records go unless a command is given ``--tracking-uri``: MLflow on SQLite in the working folder."""


class Tag:
    """MLflow tag names of a sweep's runs (``sweep.*``), and MLflow's own that the sweep sets."""

    # On every run of a sweep (parent and trials).
    ROLE = "sweep.role"  # "parent" or "trial"
    NAME = "sweep.name"
    SPEC_FILE = "sweep.spec_file"
    SPEC_HASH = "sweep.spec_hash"
    BUDGET = "sweep.budget"
    GIT_COMMIT = "sweep.git_commit"
    SAMPLED_AXES = "sweep.sampled_axes"
    METRIC = "sweep.metric"  # "<metric> <mode>": what ranks the trials
    # A trial's identity.
    ROW = "sweep.row"
    SEED = "sweep.seed"
    SEEDS = "sweep.seeds"  # a seed-free trial: every seed its one run stands for ("" for a seeded trial)
    METHOD = "sweep.method"
    TRIAL_ID = "sweep.trial_id"
    AXES = "sweep.axes"  # "knob=value, ..." of the grid and sampled axes, for the eye and the UI's search
    IDENTITY = "sweep.identity"  # the typed identity (TrialIdentity, JSON): what readers read
    TRIAL_KEY = "sweep.trial_key"  # the digest of what decides the trial's numbers (sweep.spec.trial_key)
    TRIAL_KEY_PARTS = "sweep.trial_key_parts"  # its parts (JSON), to say why another trial's key differs
    REUSED_FROM = "sweep.reused_from"  # a reused trial: the run that trained it (sweep.run.reuse)
    REUSED_SWEEP = "sweep.reused_sweep"  # ... and the sweep that run belongs to
    TRIAL_KEY_WITHOUT_CODE = "sweep.trial_key_without_code"  # the key less its code part (--reuse-other-code)
    REUSED_OTHER_CODE = "sweep.reused_other_code"  # "true": reused from a run of other training code
    # Where and how a trial ran.
    NODE_ID = "sweep.node_id"
    WORKER_PID = "sweep.worker_pid"
    RESTORED_FROM = "sweep.restored_from"
    SHARED_FROZEN_OUTPUTS = "sweep.shared_frozen_outputs"
    EVAL_PRECISION = "sweep.eval_precision"
    TRAIN_PRECISION = "sweep.train_precision"
    EVAL_BATCH_SIZE = "sweep.eval_batch_size"
    # How a trial ended, and what it kept.
    ERROR = "sweep.error"
    FAILURES = "sweep.failures"
    STOPPED_BY_SCHEDULER = "sweep.stopped_by_scheduler"
    CHECKPOINT = "sweep.checkpoint"  # path or URI of its last checkpoint
    CHECKPOINT_STEP = "sweep.checkpoint_step"
    MODEL = "sweep.model"  # "kept", "deleted" or "untrained" (keep_models)
    MODEL_URI = "sweep.model_uri"  # the MLflow model logged from it
    EVALUATED_LATER = "sweep.evaluated_later"  # suites `sweep evaluate` ran on its kept encoder (JSON list)
    EVALUATION_KEYS = "sweep.evaluation_keys"  # JSON {evaluation key: [its metrics]}: not evaluated again
    # On the parent run.
    OPTIONS = "sweep.options"
    STORAGE = "sweep.storage"  # the sweep's Ray folder (path or URI): its record and its trials' checkpoints
    FAILED_TRIALS = "sweep.failed_trials"
    BEST_ROW = "sweep.best_row"
    BEST_SEED = "sweep.best_seed"
    BEST_AXES = "sweep.best_axes"
    BEST_RUN_ID = "sweep.best_run_id"
    # MLflow's own.
    PARENT_RUN_ID = "mlflow.parentRunId"
    RUN_NAME = "mlflow.runName"
    SOURCE_NAME = "mlflow.source.name"
    SOURCE_TYPE = "mlflow.source.type"
    SOURCE_GIT_COMMIT = "mlflow.source.git.commit"
    USER = "mlflow.user"
    NOTE = "mlflow.note.content"
    """A run's or an experiment's description, shown (Markdown) in the MLflow UI."""
    EXPERIMENT_KIND = "mlflow.experimentKind"
    """Earlier MLflow 3 UIs open an experiment on the view of its kind; 3.17's UI ignores it and follows its
    GenAI / Model training switch instead (``runs_view_url``)."""
    MODEL_TRAINING = "custom_model_development"
    """The value of :attr:`EXPERIMENT_KIND` that is Model training (the runs view)."""

    @staticmethod
    def spec(key: str) -> str:
        """A spec's own tag (``tags: {paper: sg-bert}`` -> ``spec.paper``)."""
        return f"spec.{key}"


REPORT_TAGS = {
    ReportKey.NODE_ID: Tag.NODE_ID, ReportKey.WORKER_PID: Tag.WORKER_PID, ReportKey.RESTORED_FROM: Tag.RESTORED_FROM,
    ReportKey.EVAL_PRECISION: Tag.EVAL_PRECISION, ReportKey.TRAIN_PRECISION: Tag.TRAIN_PRECISION,
    ReportKey.EVAL_BATCH_SIZE: Tag.EVAL_BATCH_SIZE,
}
"""A trial's report key -> the trial run's tag it is logged as."""


class Role:
    PARENT = "parent"
    TRIAL = "trial"


class ModelState:
    """Values of :attr:`Tag.MODEL`."""

    KEPT = "kept"
    DELETED = "deleted"
    UNTRAINED = "untrained"


TRIAL_FILTER = f"tags.`{Tag.ROLE}` = '{Role.TRIAL}'"
"""MLflow search filter for a sweep's trial runs."""
PARENT_FILTER = f"tags.`{Tag.ROLE}` = '{Role.PARENT}'"


def children_filter(parent_run_id: str, trial_id: str | None = None) -> str:
    """MLflow search filter for the trial runs of one sweep variant (its parent run), or for one of them."""
    found = f"{TRIAL_FILTER} and tags.`{Tag.PARENT_RUN_ID}` = '{parent_run_id}'"
    return f"{found} and tags.`{Tag.TRIAL_ID}` = '{trial_id}'" if trial_id is not None else found


def metric_tag(metric: str, mode: str) -> str:
    """The value of :attr:`Tag.METRIC`: what ranks a sweep's trials, and which way."""
    return f"{metric} {mode}"


def parse_metric_tag(value: str | None) -> tuple[str, str]:
    """(metric, mode) of a :attr:`Tag.METRIC` value; a run recorded before the tag existed ranked its trials by
    the best dev score, highest first (the spec's default)."""
    metric, _, mode = (value or "").partition(" ")
    return ranked_by(metric, mode)


class Summary:
    """Names on a sweep variant's parent run when the sweep ends."""

    TRIALS_FINISHED = "trials_finished"
    TRIALS_FAILED = "trials_failed"
    SPEC = "spec.yaml"
    MARKDOWN = "summary.md"
    CSV = "summary.csv"
    PLOTS = "plots"
    IMPORTANCE = "importance"  # reports.importance's table and bar plot, logged later, by that command

    @staticmethod
    def best_trial(metric: str) -> str:
        return f"best_trial_{metric}"


# ---------------------------------------------------------------- a trial's typed identity


def plain(value: Any) -> Any:
    """``value`` as the JSON types it is written as: a NumPy number (a sampled knob) as its Python number,
    a tuple as a list, mappings and lists element by element."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a value a run records")


def axes_text(axes: Mapping[str, Any]) -> str:
    """``knob=value, ...``: a point of the axes as its runs show it (:attr:`Tag.AXES`, a line's label)."""
    return ", ".join(f"{knob}={value}" for knob, value in axes.items())


@dataclass(frozen=True)
class TrialIdentity:
    """What one trial run is, with its values' own types: the one thing a trial run's writers write
    (the tracker, GLUE) and its readers read (:mod:`results.reader`), as JSON in :attr:`Tag.IDENTITY`.

    ``grid_point`` and ``sampled`` are the values of the spec's grid and sampled axes (also where the row's
    method lacks the knob), ``knobs`` the resolved config the trial ran, ``seeds`` every seed a seed-free
    trial's one run stands for (empty for a seeded trial), ``metric`` and ``mode`` what ranks the sweep's
    trials. The readable tags beside it (row, seed, method, axes) are written from it, for the MLflow UI.
    """

    method: str
    row: str
    seed: int
    seeds: tuple[int, ...] = ()
    grid_point: Mapping[str, Any] = field(default_factory=dict)
    sampled: Mapping[str, Any] = field(default_factory=dict)
    knobs: Mapping[str, Any] = field(default_factory=dict)
    metric: str = DEFAULT_METRIC
    mode: str = DEFAULT_MODE

    @property
    def axes(self) -> dict[str, Any]:
        return {**self.grid_point, **self.sampled}

    def to_json(self) -> str:
        return json.dumps(plain(asdict(self)), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrialIdentity:
        record = json.loads(text)
        return cls(**{**record, "seeds": tuple(record["seeds"])})

    def tags(self) -> dict[str, str]:
        """The trial run's identity tags: the JSON record, and the readable tags written from it."""
        return {Tag.IDENTITY: self.to_json(), Tag.ROW: self.row, Tag.SEED: str(self.seed), Tag.METHOD: self.method,
                Tag.AXES: axes_text(self.axes), Tag.SEEDS: ",".join(map(str, self.seeds))}


RUNS_VIEW_KEY = "sweep-trials"
"""The share key of the trials' runs view: the MLflow UI reads a shared view's state from the experiment's tag
``mlflow.sharedViewState.<key>`` (:func:`runs_view_tag`) when the URL names it (``viewStateShareKey``)."""
RUNS_VIEW_COLUMNS = (Metric.BEST_DEV, Metric.TEST_AVG)
"""The metric columns of the trials' runs view, the summary's best dev and test avg."""


def runs_view_tag() -> tuple[str, str]:
    """The experiment tag (name, JSON value) that holds the trials' runs view, as MLflow's 'Share' writes it:
    the sweep's trials sorted by best dev, with :data:`RUNS_VIEW_COLUMNS` as columns.

    Sorting by a metric is also what lays the trials out flat: the UI nests child runs under their parent
    run (collapsed) only while the runs are sorted by start time."""
    state = {"searchFilter": TRIAL_FILTER, "orderByKey": f"metrics.`{Metric.BEST_DEV}`", "orderByAsc": False,
             "selectedColumns": [f"metrics.`{metric}`" for metric in RUNS_VIEW_COLUMNS]}
    return f"mlflow.sharedViewState.{RUNS_VIEW_KEY}", json.dumps(state)


def runs_view_url(experiment_id: str, host: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI's runs ('Model training') view of an experiment: the sweep's trials as rows with their
    metrics as columns, the shared view of :func:`runs_view_tag` (which the experiment must carry).

    MLflow 3.17's UI chooses an experiment's views by one setting of the browser, the sidebar's
    GenAI / Model training switch (default GenAI, whose traces page stays empty here), and ignores the
    experiment's ``mlflow.experimentKind`` tag; ``workflowType=machine_learning`` in the URL overrides
    that setting, so this URL opens on the runs whatever the browser chose before. The view's filter and
    sort are in the shared state, not the URL: a URL with either makes the UI ignore the shared state.
    """
    query = urlencode({"workflowType": "machine_learning", "viewStateShareKey": RUNS_VIEW_KEY}, quote_via=quote)
    return f"{host}/#/experiments/{experiment_id}/runs?{query}"


# ---------------------------------------------------------------- a sweep's layout, recorded when it starts

LAYOUT_TAG = "sweep.layout"
"""The sweep's :class:`SweepLayout` (JSON), on its parent run (and, written with the sweep's tags, its trials)."""


@dataclass(frozen=True)
class SweepLayout:
    """What a sweep's tables and importance are laid out by, as its spec declared it when the sweep started
    (:func:`sweep.tracking.tracker.sweep_tags`), so that reports need not load a spec that may have changed since.

    ``grid`` is each grid axis's values in the spec's order (the plan's order of lines), ``symmetric`` the pair
    of grid axes whose mirror points run once, ``sample`` each sampled axis's declaration
    (``{choice|uniform|loguniform: ...}``, its range for Optuna) and ``reference`` the row every line is tested
    against (None: the first line)."""

    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    symmetric: tuple[str, str] | None = None
    sample: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    reference: str | None = None

    def to_json(self) -> str:
        return json.dumps(plain(asdict(self)))  # keys in their order: the grid's axes are in the plan's

    @classmethod
    def from_json(cls, text: str) -> SweepLayout:
        record = json.loads(text)
        symmetric = record["symmetric"]
        return cls(grid={axis: tuple(values) for axis, values in record["grid"].items()},
                   symmetric=(symmetric[0], symmetric[1]) if symmetric else None,
                   sample=record["sample"], reference=record["reference"])
