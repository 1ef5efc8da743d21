"""``python -m sweep {plan,run,resume,status,export,evaluate,glue,paper,knobs,settings}``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from results.names import UsageError
from results.record import DEFAULT_TRACKING_URI
from sweep.spec.budget import BUDGETS
from sweep.spec.options import SweepOptions
from sweep.spec.source import parse_override
from sweep.spec.sweep_spec import SpecError, SweepSpec
from sweep.tracking.journal import EXIT_TRACKING_GONE
from trainers.errors import UnknownName


def _add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="YAML search space, e.g. search_spaces/sg_opt_ablation.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a base knob (repeatable); the value is read as YAML.")
    parser.add_argument("--budget", choices=sorted(BUDGETS),
                        help="Cap each trial's steps and evaluation pairs, and the seeds and samples that run, "
                             "those named with --seeds too: a warning names the seeds it leaves out "
                             "(no hyperparameter changes; docs/specs.md).")
    parser.add_argument("--seeds", type=_seed_list, help="Replace the spec's seeds, e.g. --seeds 1,2.")


def _seed_list(text: str) -> list[int]:
    try:
        return [int(seed) for seed in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sweep", description="Ray Tune sweeps tracked in MLflow.")
    commands = parser.add_subparsers(dest="command", required=True)

    plan = commands.add_parser("plan", help="Print the trial matrix and its size; run nothing.")
    _add_spec_arguments(plan)
    plan.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                      help="The store whose finished trials `sweep run` would reuse (read only; skipped when absent).")
    plan.add_argument("--no-reuse", dest="reuse", action="store_false", help="Plan as `sweep run --no-reuse`.")
    plan.add_argument("--reuse-other-code", action="store_true", help="Plan as `sweep run --reuse-other-code`.")
    plan.add_argument("--estimate", action="store_true",
                      help="Also time a few steps and a dev evaluation of each distinct method and model here, "
                           "and print the sweep's expected wall time (early stopping ignored).")

    run = commands.add_parser("run", help="Run a sweep (or finish it, if it was interrupted).")
    _add_spec_arguments(run)
    _add_cluster_arguments(run)
    run.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI.")
    run.add_argument("--no-reuse", dest="reuse", action="store_false",
                     help="Train every trial, also those a finished run in the store already computed "
                          "(by default they are taken from it: docs/campaigns.md).")
    run.add_argument("--reuse-other-code", action="store_true",
                     help="Also take finished runs whose trial key differs in the training code only; the plan "
                          "and the summary list them.")
    run.add_argument("--register", metavar="MODEL_NAME",
                     help="Also register the best trial's encoder in the MLflow Model Registry under this name.")

    resume = commands.add_parser("resume", help="Finish the unfinished trials of sweep NAME.")
    resume.add_argument("name")
    _add_cluster_arguments(resume)

    status = commands.add_parser("status", help="Each trial's state, row, seed, best dev score and MLflow run.")
    status.add_argument("name")
    status.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)

    export = commands.add_parser("export", help="Write a trial's best encoder as a sentence-transformers folder.")
    export.add_argument("name")
    export.add_argument("--row", help="The row to take the best trial of (default: the whole sweep).")
    export.add_argument("--seed", type=int, help="The seed to take the best trial of.")
    export.add_argument("--trial", help="A trial id, as `sweep status NAME` shows.")
    export.add_argument("--out", required=True, help="A new folder to write.")
    export.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)

    evaluate = commands.add_parser(
        "evaluate", help="Evaluate the kept best encoders of a finished sweep on another suite (no training); "
                         "the metrics go into each trial's MLflow run.")
    evaluate.add_argument("name")
    evaluate.add_argument("--suite", required=True,
                          help="A suite as a spec's evaluations entry: senteval, nli, reranking, multilingual_sts, "
                               "or e.g. '{senteval: {classifier: logreg}}' (docs/evaluations.md).")
    evaluate.add_argument("--row", help="Only the trials of this row (default: every finished trial).")
    evaluate.add_argument("--seed", type=int, help="Only the trials of this seed.")
    evaluate.add_argument("--trial", help="Only this trial id, as `sweep status NAME` shows.")
    evaluate.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    glue = commands.add_parser("glue", help="Fine-tune each row's encoder on GLUE tasks (a spec with a 'glue' key; "
                                            "SG-BERT Table 10): the first 10%% of validation selects, "
                                            "the rest reports.")
    _add_spec_arguments(glue)
    glue.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI.")

    paper = commands.add_parser(
        "paper", help="Run every spec of a paper's campaign that can run here, each distinct trial once "
                      "(docs/campaigns.md).")
    paper.add_argument("name", help="A campaign: sg-bert, consert, sct, or a file's name under "
                                    "search_spaces/campaigns (e.g. smoke-paper).")
    paper.add_argument("--plan", action="store_true",
                       help="Print each spec's trials, the distinct total and what is reused; run nothing.")
    paper.add_argument("--budget", choices=sorted(BUDGETS), help="The budget of every spec (as `sweep run`).")
    paper.add_argument("--estimate", action="store_true",
                       help="With --plan, also time a few steps here and print the expected wall time.")
    paper.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI.")
    paper.add_argument("--reuse-other-code", action="store_true",
                       help="Also take finished runs whose trial key differs in the training code only.")
    _add_cluster_arguments(paper)

    knobs = commands.add_parser("knobs", help="Every knob of a method: type, default, range, meaning.")
    knobs.add_argument("method")
    settings = commands.add_parser("settings", help="Every knob of each row of a paper's spec beside the paper's "
                                   "value and its source (the settings ledger), each difference marked.")
    _add_spec_arguments(settings)
    settings.add_argument("--row", dest="rows", action="append", default=[], metavar="ROW",
                          help="Only this row (repeatable; a figure's grid point by its value).")
    return parser


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray).")
    parser.add_argument("--storage", help="Ray results path or URI shared by all nodes (default ./ray_results).")
    parser.add_argument("--verbose", action="store_true",
                        help="Show Ray's own output on the console too (by default it goes to the sweep's log).")


def _options(args: argparse.Namespace):
    return SweepOptions(
        spec_path=args.spec,
        overrides=dict(parse_override(o) for o in args.overrides),
        budget=args.budget,
        seeds=args.seeds,
        address=getattr(args, "address", None),
        storage=getattr(args, "storage", None),
        tracking_uri=getattr(args, "tracking_uri", DEFAULT_TRACKING_URI),
        register=getattr(args, "register", None),
        reuse=getattr(args, "reuse", True),
        reuse_other_code=getattr(args, "reuse_other_code", False),
    )


def say_seed_cap(options: SweepOptions) -> None:
    """A budget caps the seeds that run, those named with ``--seeds`` too (a budget is a cap on what a command
    costs, whatever else it is given): say which of them it leaves out, once, before the plan or the run."""
    if options.budget and (line := BUDGETS[options.budget].seed_cap_line(options.seeds)):
        print(f"warning: {line}", file=sys.stderr)


def print_knobs(method_name: str) -> None:
    from trainers.registry import get_method

    for knob in get_method(method_name).all_knobs:
        print(f"{knob.name:<22}{knob.describe():<48} default {knob.default!r}\n{'':<22}{knob.help}")


def _summarise(outcome, spec: SweepSpec, options) -> int:
    """Say how the sweep ended, with its summary table and the next commands; exit 1 if any trial
    failed (the others still finished). A sweep stopped by a signal ends with the command that continues
    it, and the shell's code for that signal."""
    from sweep.commands.summary import finish_sweep

    results = outcome.results
    failed = [r for r in results if r.error is not None]
    # Adaptive seeds start as many trials as their rows needed: those Tune knows of.
    started = len(results) if spec.seed_rounds is not None else spec.trials_to_run
    ended = started - len(failed) - outcome.trials_left
    if outcome.stop_reason:  # the tracking store is gone: nothing more can be read from it or written to it
        print(f"stopped: {outcome.stop_reason}: {ended} trials finished, {len(failed)} failed, "
              f"{outcome.trials_left} left to run; what the store has not received is kept beside the sweep's "
              f"state and written by the resume")
        print(f"\nwhen the tracking server answers, to continue the sweep from its checkpoints:\n"
              f"  {outcome.resume_command}")
        return EXIT_TRACKING_GONE
    if outcome.stopped_by:
        print(f"stopped by {outcome.stopped_by.name}: {ended} trials finished, {len(failed)} failed, "
              f"{outcome.trials_left} left to run (their MLflow runs and the parent run are KILLED)")
    else:
        print(f"{ended} trials finished, {len(failed)} failed")
    for result in failed:
        config = result.config or {}  # None when the trial's worker died before it started
        print(f"  failed: {config.get('row', '')!r} seed {config.get('seed')}: {type(result.error).__name__}")
    print()
    print(finish_sweep(spec, options.tracking_uri), end="")
    if outcome.stopped_by:
        print(f"\nto continue the sweep from its checkpoints:\n  {outcome.resume_command}")
        return 128 + int(outcome.stopped_by)
    if outcome.trials_left and spec.search is None and spec.seed_rounds is None:
        # A grid's trials are all known: Ray Tune ended without running some, which no signal explains.
        print(f"error: {outcome.trials_left} of the spec's {spec.trials_to_run} trials never ran: Ray Tune ended the "
              f"experiment without them (its restored state did not hold them); the parent run is KILLED",
              file=sys.stderr)
        return 1
    return 1 if failed else 0


def _paper(args: argparse.Namespace) -> int:
    from sweep.commands.campaign import plan_lines, run_campaign
    from sweep.spec.campaign import load_campaign

    campaign = load_campaign(args.name, args.budget, args.address)
    if args.plan:
        for line in plan_lines(campaign, args.budget, _stored_trials(args.tracking_uri),
                               _estimate_lines if args.estimate else None):
            print(line, flush=True)
        return 0
    options = SweepOptions(spec_path="", overrides={}, budget=args.budget, address=args.address,
                           storage=args.storage, tracking_uri=args.tracking_uri,
                           reuse_other_code=args.reuse_other_code)
    return run_campaign(options, campaign, args.verbose)


def _estimate_lines(spec: SweepSpec) -> list[str]:
    from sweep.commands.estimate import estimate

    return estimate(spec, gpus=0)


def _stored_trials(tracking_uri: str):
    """What the store at ``tracking_uri`` holds of a spec's trials, other training code's runs included
    (None: there is no store)."""
    from results.reader import NoStore, read_client
    from sweep.run.reuse import plan_reuse

    try:
        client = read_client(tracking_uri)
    except NoStore:
        return None
    return lambda spec: plan_reuse(spec, client, other_code=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "plan":
            from sweep.commands.plan import meaning_lines, print_plan
            from sweep.spec.environment import environment_problems

            options = _options(args)
            say_seed_cap(options)
            spec = options.load(check_environment=False)
            lacking = environment_problems(spec, options.overrides, options.address)
            if lacking:  # what its rows mean, though they cannot run here
                for line in meaning_lines(spec):
                    print(line)
                raise SpecError(lacking)
            if spec.glue is not None:
                from sweep.run.glue import print_glue_plan

                print_glue_plan(spec)
                return 0
            print_plan(spec)
            if options.reuse:
                from sweep.run.reuse import reuse_lines

                for line in reuse_lines(spec, options.tracking_uri, options.reuse_other_code):
                    print(line)
            from sweep.run.settings_drift import resume_lines

            for line in resume_lines(spec, options.tracking_uri):  # raises what a resume would refuse
                print(line)
            if args.estimate:
                from sweep.commands.estimate import estimate
                from sweep.spec.environment import local_gpus

                for line in estimate(spec, gpus=local_gpus() if spec.resources.gpu else 0):
                    print(line, flush=True)
        elif args.command == "paper":
            return _paper(args)
        elif args.command == "knobs":
            print_knobs(args.method)
        elif args.command == "settings":
            from sweep.commands.settings import settings_lines

            for line in settings_lines(_options(args).load(check_environment=False), args.rows):
                print(line)
        elif args.command == "status":
            from sweep.commands.status import print_status

            print_status(args.name, args.tracking_uri)
        elif args.command == "run":
            from sweep.commands.plan import warn
            from sweep.run.engine import run

            options = _options(args)
            say_seed_cap(options)
            spec = options.load()
            if spec.glue is not None:
                raise SpecError([f"{spec.path}: glue: a GLUE fine-tuning spec: run it with "
                                 f"`python -m sweep glue {args.spec}` (docs/glue.md)"])
            warn(spec)
            return _summarise(run(options, spec, args.verbose), spec, options)
        elif args.command == "export":
            from sweep.commands.export import export_command

            export_command(args.name, args.tracking_uri, args.out, args.row, args.seed, args.trial)
        elif args.command == "evaluate":
            from sweep.commands.evaluate import evaluate_command

            return evaluate_command(args.name, args.suite, args.tracking_uri, args.row, args.seed, args.trial)
        elif args.command == "glue":
            from sweep.run.glue import run_glue

            return run_glue(_options(args))
        elif args.command == "resume":
            from sweep.run.engine import resume_options, run

            options = resume_options(args.name, args.storage, args.address)
            spec = options.load()
            return _summarise(run(options, spec, args.verbose), spec, options)
    except KeyboardInterrupt:
        print("interrupted (no trial was running)", file=sys.stderr)
        return 130
    except (SpecError, UsageError, UnknownName) as error:
        print(error, file=sys.stderr)
        return 2
    return 0
