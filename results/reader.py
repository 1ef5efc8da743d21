"""Reading a sweep's record back from MLflow: its parent run, its trial runs, a typed trials frame.

``sweep status``, the end-of-sweep summary and ``reports.collect`` all read
through here. It never writes: :func:`read_client` refuses a SQLite store that
does not exist (MLflow would create one). Each trial run becomes one record:
its typed identity (:class:`~results.record.TrialIdentity`, the knobs it
ran included), its data tags (:class:`TrialTags`) and every metric's last
value (docs/results_schema.md). Runs recorded before the identity tag are
read from their older tags and string params (:func:`recorded_identity`).
"""

from __future__ import annotations

import json
import os
from ast import literal_eval
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

import pandas as pd
from filelock import FileLock
from mlflow import MlflowClient

from results.names import UsageError, split_name
from results.record import (
    LAYOUT_TAG,
    PARENT_FILTER,
    TRIAL_FILTER,
    SweepLayout,
    Tag,
    TrialIdentity,
    axes_text,
    children_filter,
    parse_metric_tag,
)
from results.schema import IDENTITY, IDENTITY_DTYPES, STORED_AS_JSON
from trainers.metrics import SuiteName
from trainers.registry import METHODS

SQLITE = "sqlite:///"
CREATE_TIMEOUT_S = 300.0
"""How long to wait for another process that is creating a SQLite store (its migrations take seconds)."""
KIND_DTYPES = {bool: "boolean", int: "Int64", float: "Float64", str: "string"}


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for any other store)."""
    return Path(uri[len(SQLITE):].split("?", 1)[0]) if uri.startswith(SQLITE) else None


def creation_lock(path: Path) -> AbstractContextManager:
    """Held while the SQLite store at ``path`` is opened or inspected. MLflow creates a new store's schema in the
    first client that opens it, table by table; a second process that opens or inspects it meanwhile collides
    with the migrations or sees a half-made store. The lock, a file beside the store (``mlflow.db.lock``), makes
    the creation happen once and everyone else wait for it. A folder this process cannot write to gets no lock
    file: it is read as it is."""
    if not os.access(path.parent, os.W_OK):
        return nullcontext()
    return FileLock(f"{path}.lock", timeout=CREATE_TIMEOUT_S)


def file_store_problem(uri: str) -> str | None:
    """Why MLflow would refuse the store at ``uri``: a file store (``file:`` or a bare path, MLflow's old
    ``./mlruns``) is in maintenance mode, refused unless ``MLFLOW_ALLOW_FILE_STORE`` is true."""
    import mlflow
    from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE

    if urlsplit(uri).scheme not in ("", "file") or MLFLOW_ALLOW_FILE_STORE.get():
        return None
    return (f"{uri} is a file store, which MLflow {mlflow.__version__} refuses (maintenance mode): use a SQLite "
            f"store ({SQLITE}PATH.db) or a tracking server, or set MLFLOW_ALLOW_FILE_STORE=true to use it")


def absolute_tracking_uri(uri: str) -> str:
    """``sqlite:///relative.db`` made absolute, so every process means the same file."""
    if uri.startswith(SQLITE) and not uri.startswith(SQLITE + "/"):
        return SQLITE + str(Path(uri[len(SQLITE):]).resolve())
    return uri


class NoStore(UsageError):
    """No MLflow store at the URI yet (a SQLite file that does not exist): nothing to read, and not a store
    that cannot be used."""


def existing_store_uri(tracking_uri: str) -> str:
    """The absolute URI of a store, refused when it is a SQLite file that does not exist (a client would
    create it) or a file store that MLflow refuses (:func:`file_store_problem`)."""
    problem = file_store_problem(tracking_uri)
    if problem:
        raise UsageError(problem)
    uri = absolute_tracking_uri(tracking_uri)
    if uri.startswith(SQLITE) and not Path(uri[len(SQLITE):]).is_file():
        raise NoStore(f"no MLflow store at {tracking_uri} ({uri[len(SQLITE):]} does not exist)")
    return uri


def read_client(tracking_uri: str) -> MlflowClient:
    """A client for reading: refuses a SQLite store that does not exist (MLflow would create it), and opens one
    that another process is creating once it is made (:func:`creation_lock`)."""
    uri = existing_store_uri(tracking_uri)
    path = sqlite_path(uri)
    with creation_lock(path) if path else nullcontext():
        return MlflowClient(uri)


def variant_parent(client: MlflowClient, experiment_id: str, spec_hash: str):
    """The parent run of the sweep variant of ``spec_hash`` in experiment ``experiment_id``, or None."""
    found = client.search_runs([experiment_id], max_results=1,
                               filter_string=f"{PARENT_FILTER} and tags.`{Tag.SPEC_HASH}` = '{spec_hash}'")
    return found[0] if found else None


def choose_parent(client: MlflowClient, text: str, tracking_uri: str):
    """(experiment, parent run) of the sweep variant ``text`` names: NAME when the spec has one variant,
    NAME-HASH (a unique prefix of the spec hash) among several."""
    experiment = client.get_experiment_by_name(text)
    name, prefix = (text, "") if experiment else split_name(text, set())
    experiment = experiment or client.get_experiment_by_name(name)
    if experiment is None:
        raise UsageError(f"no MLflow experiment named {text!r} at {tracking_uri}")
    parents = client.search_runs([experiment.experiment_id], filter_string=PARENT_FILTER, max_results=1000,
                                 order_by=["attributes.start_time ASC"])
    found = [p for p in parents if p.data.tags.get(Tag.SPEC_HASH, "").startswith(prefix)]
    if len(found) == 1:
        return experiment, found[0]
    if not found:
        hashes = ", ".join(p.data.tags.get(Tag.SPEC_HASH, "?") for p in parents) or "none: it never ran"
        raise UsageError(f"sweep {name!r} at {tracking_uri} has no variant {text!r} (its spec hashes: {hashes})")
    choices = "\n  ".join(
        f"{name}-{p.data.tags.get(Tag.SPEC_HASH, '')}  ({p.data.tags.get(Tag.OPTIONS, 'options not recorded')})"
        for p in found
    )
    raise UsageError(f"sweep {name!r} has {len(found)} variants at {tracking_uri}; choose one:\n  {choices}")


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> list:
    """The trial runs of one sweep variant (its parent run's children), in the plan's order (by trial id)."""
    runs = all_pages(lambda token: client.search_runs(
        [experiment_id], filter_string=children_filter(parent_run_id), max_results=1000, page_token=token))
    return sorted(runs, key=lambda run: trial_tags(run).trial_id or "")


def variant_runs(client: MlflowClient, experiment, parent) -> list:
    """The trial runs of one sweep variant (its parent run), in the plan's order (by trial id)."""
    return child_runs(client, experiment.experiment_id, parent.info.run_id)


def variant_trials(client: MlflowClient, experiment, parent) -> pd.DataFrame:
    """The trials frame of one sweep variant."""
    return trials_frame([(experiment.name, run) for run in variant_runs(client, experiment, parent)])


def all_pages(search: Callable[[str | None], Any]) -> list:
    """Every item of a paginated MLflow search (``search(page_token)`` -> PagedList)."""
    items, token = [], None
    while True:
        page = search(token)
        items.extend(page)
        token = page.token
        if not token:
            return items


def read_trials(tracking_uri: str, experiments: Sequence[str] | None = None) -> pd.DataFrame:
    """Every sweep trial in ``experiments`` (all experiments when None) as a trials frame."""
    client = read_client(tracking_uri)
    if experiments:
        found = [client.get_experiment_by_name(name) for name in experiments]
        missing = [name for name, e in zip(experiments, found) if e is None]
        if missing:
            raise KeyError(f"no MLflow experiment named {missing} at {tracking_uri}")
    else:
        found = all_pages(lambda token: client.search_experiments(max_results=1000, page_token=token))
    named_runs = []
    for experiment in found:
        runs = all_pages(lambda token: client.search_runs(
            [experiment.experiment_id], filter_string=TRIAL_FILTER, max_results=1000, page_token=token,
        ))
        named_runs.extend((experiment.name, run) for run in runs)
    return trials_frame(named_runs)


# ---------------------------------------------------------------- one trial run -> one typed record


def _knob_kinds() -> dict[str, set[type]]:
    kinds: dict[str, set[type]] = {}
    for method in METHODS.values():
        for knob in method.all_knobs:
            kinds.setdefault(knob.name, set()).add(knob.kind)
    return kinds


KNOB_KINDS = _knob_kinds()
"""Knob name -> its declared kind(s), over every registered method."""


def param_dtype(name: str, values: Sequence[Any]) -> str:
    """The column type of a knob: its declared kind, or for a name no method declares (GLUE's ``glue.*``)
    the one kind of its values (an int among floats is a float); string where the kinds differ."""
    kinds = KNOB_KINDS.get(name) or {type(value) for value in values if value is not None}
    if name in STORED_AS_JSON:
        return "object"
    if kinds == {int, float}:
        return KIND_DTYPES[float]
    return KIND_DTYPES.get(next(iter(kinds)), "string") if len(kinds) == 1 else "string"


def metric_column(name: str) -> str:
    """A metric's column: its name, or ``<name>_metric`` where a knob has that name (SG's ``loss``)."""
    return f"{name}_metric" if name in KNOB_KINDS or name in IDENTITY else name


def typed_param(method: str, name: str, text: str) -> Any:
    """A param string of a run recorded before :attr:`Tag.IDENTITY` back as the knob's declared type."""
    knobs = METHODS[method].all_knobs if method in METHODS else None
    if knobs is None or name not in knobs:
        return text
    knob = knobs[name]
    if text == "None":
        return None
    if knob.kind is bool:
        return text == "True"
    return knob.kind(text)


def _typed_axis(name: str, text: str) -> Any:
    """An axis value of a run recorded before :attr:`Tag.IDENTITY`, typed by its knob's one declared kind."""
    kinds = KNOB_KINDS.get(name, set())
    if len(kinds) != 1 or text == "None":
        return None if text == "None" else text
    kind = next(iter(kinds))
    return text == "True" if kind is bool else kind(text)


def recorded_identity(tags: Mapping[str, str], params: Mapping[str, str]) -> TrialIdentity:
    """A trial run's identity: its :attr:`Tag.IDENTITY` record, or, for a run recorded before that tag,
    the same built from its older tags (``sweep.axes`` as ``knob=value, ...``) and string params."""
    if Tag.IDENTITY in tags:
        return TrialIdentity.from_json(tags[Tag.IDENTITY])
    method = tags.get(Tag.METHOD, params.get("method", ""))
    sampled = {knob.strip() for knob in tags.get(Tag.SAMPLED_AXES, "").split(",") if knob.strip()}
    axes = dict(part.split("=", 1) for part in tags.get(Tag.AXES, "").split(", ") if "=" in part)
    metric, mode = parse_metric_tag(tags.get(Tag.METRIC))
    recorded = {name: literal_eval(text) if name == SuiteName.KEY else typed_param(method, name, text)
                for name, text in params.items()}
    # A knob declared after the run was recorded has no param: the run ran as its default does (WK pooling's
    # window and first layer, which no pooling of that time read).
    later = {knob.name: knob.default for knob in METHODS[method].all_knobs if knob.name not in params} \
        if method in METHODS and params else {}
    return TrialIdentity(
        method=method, row=tags.get(Tag.ROW, ""), seed=int(tags.get(Tag.SEED, params.get("seed", -1))),
        seeds=tuple(int(seed) for seed in tags.get(Tag.SEEDS, "").split(",") if seed),
        grid_point={k: _typed_axis(k, v) for k, v in axes.items() if k not in sampled},
        sampled={k: _typed_axis(k, v) for k, v in axes.items() if k in sampled},
        knobs={**later, **recorded},
        metric=metric, mode=mode,
    )


def _time(milliseconds: int | None) -> pd.Timestamp:
    return pd.Timestamp(milliseconds, unit="ms", tz="UTC") if milliseconds else pd.NaT


def run_identity(run) -> TrialIdentity:
    """The typed identity of an MLflow trial run (:func:`recorded_identity`)."""
    return recorded_identity(run.data.tags, run.data.params)


@dataclass(frozen=True)
class TrialTags:
    """A trial run's data tags, typed: what the sweep, ``sweep status``, export, evaluate and reuse read back
    beside its identity (:func:`run_identity`). Built once per run by :func:`trial_tags`, the one place these
    tags are read and their JSON and ``"true"`` decoded; a tag an older run lacks reads as None, or as the
    empty value given, as each reader read it before. The tags are written by the tracker
    (:mod:`sweep.tracking.trial_run`), keep_models, ``sweep evaluate`` and reuse, under :class:`Tag`'s names."""

    sweep_name: str | None = None
    spec_file: str = ""
    spec_hash: str = ""
    budget: str = ""
    git_commit: str = ""
    trial_id: str | None = None
    parent_run_id: str | None = None
    trial_key: str | None = None  # None: recorded before trial keys
    trial_key_parts: Mapping[str, str] = field(default_factory=dict)
    trial_key_without_code: str | None = None
    reused_from: str | None = None  # a reused trial: the run that trained it
    reused_sweep: str = ""
    reused_other_code: bool = False
    error: str = ""
    failures: int = 0
    stopped_by_scheduler: bool = False
    checkpoint: str | None = None  # path or URI of its last checkpoint
    checkpoint_step: int | None = None
    model_state: str | None = None  # a ModelState value, set when its sweep ended (keep_models)
    model_uri: str | None = None
    evaluated_later: tuple[Mapping[str, Any], ...] = ()  # suites `sweep evaluate` ran on its kept encoder
    evaluation_keys: Mapping[str, list[str]] = field(default_factory=dict)  # evaluation key -> its metrics
    train_precision: str | None = None
    eval_precision: str | None = None


def trial_tags(run) -> TrialTags:
    """The typed data tags of an MLflow trial run (:class:`TrialTags`)."""
    tags = run.data.tags
    step = tags.get(Tag.CHECKPOINT_STEP)
    return TrialTags(
        sweep_name=tags.get(Tag.NAME), spec_file=tags.get(Tag.SPEC_FILE, ""), spec_hash=tags.get(Tag.SPEC_HASH, ""),
        budget=tags.get(Tag.BUDGET, ""), git_commit=tags.get(Tag.GIT_COMMIT, ""),
        trial_id=tags.get(Tag.TRIAL_ID), parent_run_id=tags.get(Tag.PARENT_RUN_ID),
        trial_key=tags.get(Tag.TRIAL_KEY), trial_key_parts=json.loads(tags.get(Tag.TRIAL_KEY_PARTS, "{}")),
        trial_key_without_code=tags.get(Tag.TRIAL_KEY_WITHOUT_CODE),
        reused_from=tags.get(Tag.REUSED_FROM), reused_sweep=tags.get(Tag.REUSED_SWEEP, ""),
        reused_other_code=tags.get(Tag.REUSED_OTHER_CODE) == "true",
        error=tags.get(Tag.ERROR, ""), failures=int(tags.get(Tag.FAILURES, 0)),
        stopped_by_scheduler=tags.get(Tag.STOPPED_BY_SCHEDULER) == "true",
        checkpoint=tags.get(Tag.CHECKPOINT), checkpoint_step=int(step) if step is not None else None,
        model_state=tags.get(Tag.MODEL), model_uri=tags.get(Tag.MODEL_URI),
        evaluated_later=tuple(json.loads(tags.get(Tag.EVALUATED_LATER, "[]"))),
        evaluation_keys=json.loads(tags.get(Tag.EVALUATION_KEYS, "{}")),
        train_precision=tags.get(Tag.TRAIN_PRECISION), eval_precision=tags.get(Tag.EVAL_PRECISION),
    )


def identity_columns(identity: TrialIdentity) -> dict[str, Any]:
    """A trial's identity as a trials frame's columns (:data:`results.schema.IDENTITY`)."""
    return {"row": identity.row, "axes": axes_text(identity.axes), "grid_point": dict(identity.grid_point),
            "sampled_point": dict(identity.sampled), "sweep_metric": identity.metric, "sweep_mode": identity.mode,
            "seed": identity.seed, "seeds": identity.seeds, "method": identity.method}


def trial_record(experiment: str, run) -> dict[str, Any]:
    """One trial run as a flat record: its identity, its knobs (typed), its last metrics."""
    tags, identity = trial_tags(run), run_identity(run)
    record: dict[str, Any] = {
        "experiment": experiment,
        "sweep": tags.sweep_name or experiment,
        "spec_hash": tags.spec_hash,
        "spec_file": tags.spec_file,
        "budget": tags.budget,
        "git_commit": tags.git_commit,
        **identity_columns(identity),
        "trial_id": tags.trial_id or "",
        "run_id": run.info.run_id,
        "parent_run_id": tags.parent_run_id or "",
        "status": run.info.status,
        "error": tags.error,
        "failures": tags.failures,
        "stopped_by_scheduler": tags.stopped_by_scheduler,
        "start_time": _time(run.info.start_time),
        "end_time": _time(run.info.end_time),
        "trial_key": tags.trial_key or "",
        "reused_from": tags.reused_from or "",
        "reused_sweep": tags.reused_sweep,
        "reused_other_code": tags.reused_other_code,
    }
    record.update({name: value for name, value in identity.knobs.items() if name not in IDENTITY})
    record.update({metric_column(name): value for name, value in run.data.metrics.items()})
    return record


def trials_frame(named_runs: Sequence[tuple[str, Any]]) -> pd.DataFrame:
    """(experiment name, MLflow trial run) pairs as a typed frame: identity, the knobs, then the
    metrics (each alphabetical), rows by experiment, row, seed, trial and run."""
    records = [trial_record(name, run) for name, run in named_runs]
    runs_seen = [run for _, run in named_runs]
    params = sorted({name for record in records for name in record} - set(IDENTITY)
                    - {metric_column(name) for run in runs_seen for name in run.data.metrics})
    metrics = sorted({metric_column(name) for run in runs_seen for name in run.data.metrics})
    knobs = {name: param_dtype(name, [record.get(name) for record in records]) for name in params}
    dtypes = {**IDENTITY_DTYPES, **knobs, **dict.fromkeys(metrics, "Float64")}
    frame = pd.DataFrame.from_records(records, columns=list(dtypes)).astype(dtypes)
    return frame.sort_values(["experiment", "row", "seed", "trial_id", "run_id"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- a sweep's recorded layout


def recorded_layout(run) -> SweepLayout | None:
    """The layout a sweep's run recorded when the sweep started (:data:`results.record.LAYOUT_TAG`); None for
    a sweep started before the layout was recorded."""
    text = run.data.tags.get(LAYOUT_TAG)
    return SweepLayout.from_json(text) if text else None


def parent_layouts(tracking_uri: str, parent_run_ids: Iterable[str]) -> dict[str, SweepLayout | None]:
    """Each of these sweep parent runs' recorded layout (:func:`recorded_layout`), by run id."""
    client = read_client(tracking_uri)
    return {run_id: recorded_layout(client.get_run(run_id)) for run_id in sorted(set(parent_run_ids)) if run_id}
