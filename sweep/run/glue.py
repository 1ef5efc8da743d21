"""``python -m sweep glue SPEC``: GLUE fine-tuning of each row's encoder (SG-BERT Table 10).

A GLUE spec is a sweep spec with a ``glue`` key (its tasks and fine-tuning knobs,
:data:`trainers.data.glue_tasks.GLUE_KNOBS`); each row names the encoder to start from with the ``model``
knob: a folder written by ``python -m sweep export`` (a trial's best encoder), a Hugging Face id, or
any local folder. Every row x seed is fine-tuned on each task in turn
(:func:`trainers.training.glue.fine_tune`) and is one trial run of the spec's MLflow experiment, under
the variant's parent run, with the tags every sweep trial has: ``reports.collect`` puts its
``test_glue_*`` metrics into ``results.parquet`` and ``reports.tables`` into SG-BERT Table 10. Every
seed runs, also for an untuned encoder: the head and the batches depend on it. A row and seed already
FINISHED under the same variant is not run again, so running the command again finishes what an
interrupted run left; it is refused when this code would give a finished row other settings than it ran
(:mod:`sweep.run.settings_drift`), as a sweep's resume is.
"""

from __future__ import annotations

import time

from sweep.spec.options import SweepOptions
from sweep.spec.sweep_spec import SpecError, SweepSpec, trial_config
from trainers.metrics import Glue


def glue_spec(options: SweepOptions) -> SweepSpec:
    """The spec, refused (exit 2) unless it has a ``glue`` key and rows without grid or sampled axes; its
    data was read at load (exit 2 naming GLUE and $GLUE_DATA_DIR where this machine lacks it)."""
    spec = options.load()
    if spec.glue is None:
        raise SpecError([f"{spec.path}: {Glue.KEY}: missing: `python -m sweep glue` runs a spec with a "
                         f"'{Glue.KEY}' key (its tasks and fine-tuning knobs; docs/glue.md)"])
    if spec.grid or spec.sample:
        raise SpecError([f"{spec.path}: grid/sample: a GLUE spec fine-tunes named rows; expected no grid or "
                         "sampled axes (a row per encoder)"])
    return spec


def print_glue_plan(spec: SweepSpec) -> None:
    """``sweep plan`` of a GLUE spec: each row's encoder, the tasks, the knobs and the number of runs."""
    tasks = spec.glue[Glue.TASKS_KEY]
    print(f"{spec.name}: {spec.description}".rstrip(": "))
    print(f"GLUE fine-tuning (python -m sweep glue); budget {spec.budget.name if spec.budget else 'none'}; "
          f"spec hash {spec.spec_hash}")
    print(f"tasks: {', '.join(tasks)}; the first 10% of each validation set selects, the last 90% reports")
    width = max([len(row.name) for row in spec.rows] + [3]) + 2
    print(f"{'row':<{width}}encoder (model)")
    for row in spec.rows:
        print(f"{row.name:<{width}}{trial_config(spec, row.name, spec.seeds[0], {})['model']}")
    print("knobs: " + ", ".join(f"{k} {v}" for k, v in spec.glue.items() if k != Glue.TASKS_KEY))
    runs = len(spec.rows) * len(spec.seeds)
    print(f"{len(spec.rows)} rows x {len(spec.seeds)} seeds = {runs} runs (every seed runs: the head and the "
          f"batches depend on it), each fine-tuned on {len(tasks)} tasks: {runs * len(tasks)} fine-tunings")


def trial_id(row_index: int, seed: int) -> str:
    return f"glue_{row_index:02d}_{seed}"


def run_glue(options: SweepOptions) -> int:
    """Fine-tune every row x seed of the GLUE spec on its tasks; 0 when all finished, 1 when some failed, 75 when
    the tracking server did not answer for longer than its bound (or at the end: its records wait in a journal
    that the same command writes)."""
    from results.reader import trial_tags
    from sweep.run.engine import local_folder
    from sweep.run.settings_drift import check_resume
    from sweep.spec.options import storage_root
    from sweep.spec.variants import variant_folder
    from sweep.tracking.journal import JOURNAL
    from sweep.tracking.tracker import open_trial_runs
    from sweep.tracking.trial_run import FINISHED, trial_identity
    from trainers.data.glue_tasks import GLUE
    from trainers.training.glue import fine_tune

    spec = glue_spec(options)
    tasks = spec.glue[Glue.TASKS_KEY]
    knobs = {k: v for k, v in spec.glue.items() if k != Glue.TASKS_KEY}
    data = GLUE.load(tasks)
    journal = local_folder(variant_folder(storage_root(options.storage), spec.name, spec.spec_hash)) / JOURNAL
    runs = open_trial_runs(spec, options.tracking_uri, journal)
    again = f"  python -m sweep glue {options.spec_path}"
    finished = [run for run in runs.child_runs() if run.info.status == FINISHED]
    tuning = {Glue.param(k): v for k, v in spec.glue.items()}  # knobs of the run as its encoder's are
    # Rows run again start afresh: only the finished ones count. Every seed runs, so no seed-free trial stands in.
    for line in check_resume(spec, finished, lambda ran: {**trial_config(spec, ran.row, ran.seed, {}), **tuning}):
        print(line, flush=True)
    done = {trial_tags(run).trial_id for run in finished}
    points = [(index, row.name, seed) for index, row in enumerate(spec.rows) for seed in spec.seeds]
    print(f"{spec.name}: {len(spec.rows)} rows x {len(spec.seeds)} seeds, each fine-tuned on {', '.join(tasks)} "
          f"({len(points) - len(done & {trial_id(i, s) for i, _, s in points})} of {len(points)} to run)", flush=True)
    failed = 0
    for index, row, seed in points:
        trial = trial_id(index, seed)
        if trial in done:
            continue
        config = trial_config(spec, row, seed, {})
        ran = {**config, **tuning}  # every seed runs (the module's docstring)
        # A row fine-tuned again starts a run of its own: the run of an interrupted one stays KILLED.
        runs.open(trial, trial_identity(spec, row, seed, {}, ran, seeds=()), f"{row} | seed {seed} | GLUE",
                  again=False)
        try:
            for task in tasks:
                started = time.time()
                tuned = fine_tune(config, task, data[task], knobs, seed)
                runs.log(trial, tuned.metrics, timestamp=int(1000 * time.time()),
                         curves={Glue.curve(task): tuned.curve})
                shown = ", ".join(f"{s} {tuned.metrics[Glue.test(task, s)]:.2f}" for s in Glue.STATISTICS[task])
                print(f"  {row!r} seed {seed} {task}: {shown} (last 90% of validation; "
                      f"{time.time() - started:.0f} s)", flush=True)
        except KeyboardInterrupt:  # the runs say KILLED, not RUNNING; the same command finishes them later
            runs.end([trial], left=1, failed=failed)
            print(f"stopped by Ctrl-C: {row!r} seed {seed} was not finished; to finish the rest:\n{again}", flush=True)
            return 130
        except Exception as error:  # the other rows and seeds go on; the run says why this one failed
            failed += 1
            runs.fail(trial, f"{type(error).__name__}: {error}")
            print(f"  {row!r} seed {seed}: failed: {type(error).__name__}: {error}", flush=True)
        else:
            runs.complete(trial)
        if outage := runs.outage():
            runs.end([], left=1, failed=failed)
            print(f"stopped: {outage}; what was not written waits in {runs.journal}; to finish the rest:\n{again}",
                  flush=True)
            return 75
    runs.end([], left=0, failed=failed)
    if runs.waiting:
        print(f"stopped: the tracking server {options.tracking_uri} did not answer at the end ({runs.waiting} "
              f"records kept in {runs.journal}); to write them:\n{again}", flush=True)
        return 75
    print(f"{len(points) - failed} of {len(points)} finished; python -m reports.collect && "
          f"python -m reports.tables --sweep {spec.name}")
    return 1 if failed else 0
