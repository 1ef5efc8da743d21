"""Run, resume and inspect sweeps with Ray Tune.

The Tune param space has one grid axis over the trials that run (rows x
seeds x grid points, a seed-free row once, mirror cells of symmetric axes left
out) beside the spec's sampled axes. Each trial's config was resolved when the
spec was loaded (:meth:`sweep.spec.sweep_spec.SweepSpec.config_of` looks it up, and
resolves it again only with values Tune chose: sampled axes, PBT mutations);
the tracker logs it and the worker runs it as it is with :func:`trainers.training.loop.run_trial` in a
:class:`sweep.run.trial.RaySession`: metrics and checkpoints go to ``tune.report``, and a trial restarted by
Ray (a lost worker, a resumed sweep, a PBT exploit) continues from ``tune.get_checkpoint()``. A finished
trial's last checkpoint holds its best encoder. A sweep's Ray state lives in ``STORAGE/NAME-HASH`` (one
folder per variant, :mod:`sweep.spec.variants`); a second ``run`` of the same spec with the same options, or
``resume NAME``, restores it unless this code would change its trials' settings (:mod:`sweep.run.settings_drift`):
finished trials are kept, unfinished ones continue from their checkpoints.

The driver's console shows :mod:`sweep.run.progress`; Ray's own output goes to the
variant's ``sweep.log`` (:mod:`sweep.run.console`), all of it with ``--verbose``.
``--address``, ``--tracking-uri`` and ``--storage`` are checked (:mod:`sweep.run.preflight`)
before MLflow is written to. Ctrl-C or SIGTERM stops the sweep
so that a resume continues it (:mod:`sweep.run.interrupt`).
"""

from __future__ import annotations

import os
import shlex
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

# Ray's older progress table lets us choose the columns (row, seed, dev score).
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Persist the experiment state often, so a killed driver loses (almost) no
# record of finished trials and a resume never runs them again.
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
# With one checkpoint kept per trial, Ray snapshots the experiment at each trial checkpoint, which is
# what a resumed sweep needs; its warning that this happens often is then noise.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# Evaluations and the final report carry different metrics by design (dev scores, then test scores);
# the spec's metric is validated by the sweep itself, so Ray need not demand it in every report.
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
# Workers' lines reach the driver as they come, into the sweep's log: Ray's de-duplication would hold
# repeated ones back and print them when Ray shuts down, on the console after the summary.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import pyarrow.fs  # noqa: E402
import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.search import BasicVariantGenerator, SearchAlgorithm, Searcher  # noqa: E402
from rich.console import Console  # noqa: E402

from results.reader import absolute_tracking_uri  # noqa: E402
from results.record import Tag  # noqa: E402
from sweep.run.claims import Awaited, claim_trials, release  # noqa: E402
from sweep.run.console import LOG_NAME, console_and_log  # noqa: E402
from sweep.run.interrupt import StopOnSignal  # noqa: E402
from sweep.run.pbt import SynchronisablePBT  # noqa: E402
from sweep.run.preflight import check_ray_address, check_storage, check_tracking_uri  # noqa: E402
from sweep.run.progress import SweepProgress  # noqa: E402
from sweep.run.ray_state import WholeRayState, mend  # noqa: E402
from sweep.run.retention import finish_models  # noqa: E402
from sweep.run.reuse import Reuse, plan_reuse  # noqa: E402
from sweep.run.settings_drift import check_resume, stored_runs  # noqa: E402
from sweep.run.trial import run_sweep_trial  # noqa: E402
from sweep.run.worker_env import FORWARDED_ENV  # noqa: E402
from sweep.spec.options import SweepOptions, storage_root  # noqa: E402
from sweep.spec.sweep_spec import POINT, SweepSpec  # noqa: E402
from sweep.spec.variants import UsageError, choose_variant, describe_options, filesystem, variant_folder, write_record  # noqa: E402
from sweep.tracking.journal import JOURNAL  # noqa: E402
from sweep.tracking.store import open_client  # noqa: E402
from sweep.tracking.tracker import MLflowTracker  # noqa: E402
from trainers.errors import first_line  # noqa: E402
from trainers.metrics import Metric  # noqa: E402


def tune_domain(axis: Mapping[str, Any]):
    """``{choice|uniform|loguniform: arguments}`` of a spec as a Ray Tune search domain."""
    sampler, arguments = next(iter(axis.items()))
    return tune.choice(arguments) if sampler == "choice" else getattr(tune, sampler)(*arguments)


@dataclass(frozen=True)
class _PointValue:
    """``key`` of the trial point that the grid axis ``point`` picked (a Tune ``sample_from``)."""

    points: tuple[Mapping[str, Any], ...]
    key: str

    def __call__(self, config: Mapping[str, Any]) -> Any:
        return self.points[config[POINT]].get(self.key)


def param_space(spec: SweepSpec) -> dict[str, Any]:
    """One grid axis over the trials that run (:attr:`SweepSpec.trials`: seed-free rows once, mirror
    cells of symmetric axes left out); ``row``, ``seed`` and each grid axis are read from the picked
    point, so a trial's config has them as keys of their own. Its resolved config is not part of it:
    Ray restores a sweep's ``sample_from`` values as placeholders, so the worker and the tracker read it
    with :meth:`SweepSpec.config_of` from the trial's point. A searched spec's space is its sampled axes
    alone: its searcher gives each trial its point, row and seed (:class:`sweep.run.searchers.SeedMean`)."""
    sampled = {knob: tune_domain(axis) for knob, axis in spec.sample.items()}
    if spec.search is not None or spec.seed_rounds is not None:  # their searcher picks each trial's point
        return sampled
    points = tuple(trial.point.params() for trial in spec.trials)
    space: dict[str, Any] = {POINT: tune.grid_search(list(range(len(points))))}
    # A campaign's points come from several specs, each with its own grid axes (sweep.spec.campaign).
    keys = dict.fromkeys(key for point in points for key in point)
    space.update({key: tune.sample_from(_PointValue(points, key)) for key in keys})
    space.update(sampled)
    return space


def search_algorithm(spec: SweepSpec) -> SearchAlgorithm | Searcher:
    """The spec's searcher (:mod:`sweep.run.searchers`), or Ray Tune's grid-and-random generator, its random draws
    seeded by the spec's hash: the same spec (with the same options) draws the same values of its sampled
    axes each time it runs, as its grid and seeds are the same; another spec hash draws others."""
    if spec.search is not None or spec.seed_rounds is not None:
        from sweep.run.searchers import spec_searcher

        return spec_searcher(spec)
    return BasicVariantGenerator(max_concurrent=spec.max_concurrent_trials or 0,
                                 random_state=int(spec.spec_hash[:8], 16))


def _trainable(spec: SweepSpec, finished: Mapping[str, Mapping[str, float]], reused: Reuse,
               awaited: Mapping[int, Awaited], tracking_uri: str):
    trainable = tune.with_parameters(run_sweep_trial, spec=spec, finished=finished, reused=reused.metrics(),
                                     awaited=awaited, tracking_uri=tracking_uri)
    return tune.with_resources(trainable, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})


def tune_samples(spec: SweepSpec) -> int:
    """Tune's ``num_samples``: repeats of the grid over the trials, or, with a searcher, the most trials it
    starts (each suggestion once per trial of the spec; every seed's trial with adaptive seeds)."""
    if spec.seed_rounds is not None:
        return len(spec.trials)
    return spec.trials_to_run if spec.search is not None else spec.num_samples


def _scheduler(spec: SweepSpec):
    """ASHA, PBT or BOHB's HyperBand from the spec; each counts Ray's training_iteration, i.e. evaluations of
    STS-B dev."""
    if not spec.scheduler:
        return None
    options, mutations = spec.scheduler.options, spec.scheduler.mutations
    if spec.scheduler.kind == "asha":
        return tune.schedulers.ASHAScheduler(time_attr="training_iteration", metric=spec.metric, mode=spec.mode,
                                             **options)
    if spec.scheduler.kind == "hyperband_for_bohb":
        return tune.schedulers.HyperBandForBOHB(time_attr="training_iteration", metric=spec.metric, mode=spec.mode,
                                                **options)
    return SynchronisablePBT(
        time_attr="training_iteration",
        # The latest dev score, which only evaluations report: the final report (test metrics, the
        # trial's product) is never a perturbation point, so a finished trial is never sent back.
        metric=Metric.DEV,
        mode="max",
        require_attrs=False,
        hyperparam_mutations={k: v if isinstance(v, list) else tune_domain(v) for k, v in mutations.items()},
        custom_explore_fn=lambda config: _within_ranges(config, mutations),
        **options,
    )


def _within_ranges(config: dict[str, Any], mutations: Mapping[str, Any]) -> dict[str, Any]:
    """PBT perturbs continuous knobs by factors 0.8 and 1.2: keep them inside the spec's ranges."""
    for knob, values in mutations.items():
        sampler, arguments = next(iter(values.items())) if isinstance(values, Mapping) else ("choice", values)
        if sampler != "choice":
            config[knob] = min(max(config[knob], arguments[0]), arguments[1])
    return config


def _progress_reporter(spec: SweepSpec):
    """Ray's own trial table, with the sweep's columns: in the sweep's log (on the console with --verbose)."""
    axes = [*spec.grid, *spec.sample]
    return tune.CLIReporter(
        parameter_columns={"row": "row", "seed": "seed", **{axis: axis for axis in axes}},
        metric_columns={Metric.STEP: "step", Metric.DEV: "dev", Metric.BEST_DEV: "best dev"},
        max_report_frequency=10,
        # Row names are the papers' row labels (e.g. "Cross-view -> Identical-view"): show them whole.
        max_column_length=max([20, *(len(row.name) for row in spec.rows)]),
    )


def init_ray(address: str | None) -> None:
    """Join the cluster at ``address``, or start a Ray of the driver's own without one: Ray's default would
    join any cluster that another process started on this machine (``/tmp/ray/ray_current_cluster``),
    whose CPUs may all be taken. A cluster that cannot be joined is a refusal of ``--address``."""
    if ray.is_initialized():
        return
    env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
    try:
        ray.init(address=address or "local", runtime_env={"env_vars": env} if env else None, log_to_driver=True)
    except ConnectionError as error:
        raise UsageError(f"--address {address}: {first_line(error)}") from None


def start_ray_and_store(options: SweepOptions) -> None:
    """Start Ray (or join the cluster) and open the tracking store side by side: a new SQLite store's
    tables take seconds to create, as long as a local Ray takes to start. Ray must start in the main
    thread (it crashes in another), so the store opens in a thread; its errors are raised here."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        store = pool.submit(open_client, options.tracking_uri)
        init_ray(options.address)
        store.result()


def _record_of(options: SweepOptions, spec: SweepSpec) -> dict[str, Any]:
    """What ``resume NAME`` needs to rebuild the sweep."""
    return {
        "spec_path": str(spec.path),
        "overrides": dict(options.overrides),
        "budget": options.budget,
        "seeds": options.seeds,
        "tracking_uri": options.tracking_uri,
        "reuse": options.reuse,
        "reuse_other_code": options.reuse_other_code,
        "spec_hash": spec.spec_hash,
        "campaign": options.campaign,
    }


def local_folder(experiment_dir: str) -> Path:
    """The variant's folder on this machine, for its log: its Ray folder when Ray's storage is local (a
    path or ``file://``), else a folder of the same name under the default local storage."""
    fs, path = filesystem(experiment_dir)
    if isinstance(fs, pyarrow.fs.LocalFileSystem):
        return Path(path)
    return Path(storage_root(None)) / Path(path).name


@dataclass(frozen=True)
class SweepOutcome:
    """How a driver's sweep ended: Tune's results and, when a signal stopped it, which signal, how many
    trials are left and the command that continues them."""

    results: tune.ResultGrid
    stopped_by: signal.Signals | None
    trials_left: int
    resume_command: str
    stop_reason: str | None = None
    """Why the sweep stopped when no signal stopped it (its tracking server did not answer)."""
    kept: int = 0
    """Trials that had finished in this sweep before this command (a resumed sweep keeps them)."""


def resume_command(options: SweepOptions, experiment_dir: str) -> str:
    """``python -m sweep resume NAME-HASH``, with the storage and cluster options it needs."""
    words = ["python", "-m", "sweep", "resume", experiment_dir.rstrip("/").rsplit("/", 1)[-1]]
    if options.storage:
        words += ["--storage", storage_root(options.storage)]
    if options.address:
        words += ["--address", options.address]
    return shlex.join(words)


def run(options: SweepOptions, spec: SweepSpec | None = None, verbose: bool = False,
        started: float | None = None) -> SweepOutcome:
    """Start the sweep, or finish it if its Ray state already exists. ``spec`` is the options' spec
    when the caller has loaded it already (loaded and validated here otherwise, before Ray starts).
    The console shows the progress view and Ray's output goes to the variant's log, unless ``verbose``;
    its lines are stamped with the time since ``started`` (``time.monotonic()``; by default now), the
    start of the command, which may run several sweeps (a campaign)."""
    spec = spec or options.load()
    options = replace(options, tracking_uri=absolute_tracking_uri(options.tracking_uri),
                      address=options.address or os.environ.get("RAY_ADDRESS"))
    check_tracking_uri(options.tracking_uri)
    check_ray_address(options.address)
    check_storage(storage_root(options.storage))
    experiment_dir = variant_folder(storage_root(options.storage), spec.name, spec.spec_hash)
    restoring = tune.Tuner.can_restore(experiment_dir)
    notes = check_resume(spec, stored_runs(spec, options.tracking_uri)) if restoring else []  # before Ray starts
    log = None if verbose else local_folder(experiment_dir) / LOG_NAME
    with console_and_log(log) as stream:
        console = Console(file=stream, highlight=False, soft_wrap=True)
        progress = SweepProgress(spec, console, live=console.is_terminal and not verbose, log=log, started=started)
        if log:
            console.print(f"{spec.name}: Ray's output and the trials' logs go to {log}")
        for line in notes:
            progress.note(line)
        start_ray_and_store(options)
        tracker = MLflowTracker(spec, options.tracking_uri, local_folder(experiment_dir) / JOURNAL, progress.note)
        results, stopped_by, kept = _fit(options, spec, experiment_dir, tracker, progress, restoring)
    return SweepOutcome(results, stopped_by, tracker.trials_left, resume_command(options, experiment_dir),
                        tracker.stop_reason, kept)


def _fit(options: SweepOptions, spec: SweepSpec, experiment_dir: str, tracker: MLflowTracker,
         progress: SweepProgress, restoring: bool) -> tuple[tune.ResultGrid, signal.Signals | None, int]:
    """Run Tune on a new or restored experiment; keep or delete the encoders (sweep.run.retention) when it
    ended by itself, not when a signal stopped it (its trials' resume states are still needed). Also
    returns how many trials had finished in it before (kept by a restore)."""
    for mended in mend(experiment_dir):
        progress.note(f"Ray's state {mended.name} was cut short (its driver was killed while writing it): "
                      "resuming from its last whole copy")
    tracker.client.set_tag(tracker.parent_run_id, Tag.OPTIONS, describe_options(_record_of(options, spec)))
    # Where the trials' checkpoints and the sweep's record are (a bucket on a cluster): what a person needs,
    # beside the options, to resume the sweep or find its checkpoints from the run alone.
    tracker.client.set_tag(tracker.parent_run_id, Tag.STORAGE, experiment_dir)
    finished = tracker.finished_trials()
    if not restoring:
        if finished:
            # Ray's trial ids are the dedup key; without Ray's state every trial would run again.
            raise UsageError(
                f"MLflow ({options.tracking_uri}) already holds {len(finished)} finished trials of sweep "
                f"{spec.name!r} (spec hash {spec.spec_hash}) but there is no Ray state at {experiment_dir}: "
                "pass the --storage it ran with, or another --tracking-uri to run it afresh"
            )
        tracker.close_unfinished_runs()
    reuse = (plan_reuse(spec, tracker.client, tracker.parent_run_id, options.reuse_other_code) if options.reuse
             else Reuse())
    for line in reuse.describe(spec):
        progress.note(line)
    tracker.reused = {index: source.run_tags() for index, source in reuse.sources.items()}
    progress.reused = {index: source.sweep for index, source in reuse.sources.items()}
    # The trials to train, claimed while this sweep runs: another sweep started with them waits for them.
    awaited = claim_trials(tracker.client, reuse.trained, tracker.parent_run_id, spec.name)
    for index, claim in awaited.items():
        point = spec.trials[index].point
        progress.note(f"waiting for {point.row or 'trial'} seed {point.seed}: another running sweep trains it "
                      f"(parent run {claim.owner}); it is reused when it finishes")
    trainable = _trainable(spec, finished, reuse, awaited, options.tracking_uri)
    if restoring:
        progress.note(f"resuming {spec.name} from {experiment_dir}: its {len(finished)} finished trials are kept")
        tuner = tune.Tuner.restore(experiment_dir, trainable, resume_unfinished=True, resume_errored=False)
    else:
        write_record(experiment_dir, _record_of(options, spec))
        tuner = tune.Tuner(
            trainable,
            param_space=param_space(spec),
            # No metric here: Ray would demand it in every report, and test metrics come only at the end. The
            # sweep ranks trials itself (sweep.commands.summary, sweep.run.retention, reports), schedulers theirs.
            tune_config=tune.TuneConfig(
                num_samples=tune_samples(spec),
                scheduler=_scheduler(spec),
                search_alg=search_algorithm(spec),  # it also holds max_concurrent_trials
                # A trial process is kept for the next trial: no new Python, torch
                # and transformers import per trial (seconds each on a laptop).
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=Path(experiment_dir).name,
                storage_path=storage_root(options.storage),
                failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                # Two checkpoints per trial: Ray's experiment snapshot may still name the older one when
                # the driver is killed (with one kept, that one can already be gone). Under PBT all are
                # kept: a trial exploiting another restores a checkpoint that its donor has since
                # replaced. When the sweep ends, the resume states before each trial's final checkpoint
                # are deleted (sweep.run.retention).
                checkpoint_config=tune.CheckpointConfig(
                    num_to_keep=None if spec.scheduler and spec.scheduler.kind == "pbt" else 2),
                callbacks=[tracker, progress, WholeRayState(experiment_dir)],
                progress_reporter=_progress_reporter(spec),
                verbose=1,
            ),
        )
    with StopOnSignal(progress.note, before_exit=progress.stop) as stop:
        tracker.request_stop = stop.stop
        try:
            results = tuner.fit()
        finally:
            progress.stop()
            release(tracker.client, reuse.trained, tracker.parent_run_id)
    if stop.signal is None and tracker.stop_reason is None:
        finish_models(spec, tracker, options.register)
    return results, stop.signal, len(finished)


def resume_options(name: str, storage: str | None = None, address: str | None = None) -> SweepOptions:
    """The options sweep ``name`` (NAME, or NAME-HASH among several variants) last ran with. The storage is
    checked first: a bucket that is not there is said as such, not as a sweep that is not in it."""
    check_storage(storage_root(storage))
    record = choose_variant(storage_root(storage), name).record
    if record.get("campaign"):
        budget = f" --budget {record['budget']}" if record.get("budget") else ""
        raise UsageError(f"{name} is the sweep of campaign {record['campaign']!r}: continue it with "
                         f"`python -m sweep paper {record['campaign']}{budget}`")
    return SweepOptions(
        spec_path=record["spec_path"],
        overrides=record["overrides"],
        budget=record["budget"],
        seeds=record.get("seeds"),
        address=address,
        storage=storage,
        tracking_uri=record["tracking_uri"],
        reuse=record.get("reuse", True),
        reuse_other_code=record.get("reuse_other_code", False),
    )
