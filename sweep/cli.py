"""``python -m sweep {plan,run,resume,status,knobs}``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from sweep.budget import BUDGETS
from sweep.models import ExportError, disk_estimate
from sweep.spec import SpecError, parse_override, row_method, trial_config
from sweep.tracking import DEFAULT_TRACKING_URI
from sweep.variants import UsageError


def _add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="YAML search space, e.g. search_spaces/sg_opt_ablation.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a base knob (repeatable); the value is read as YAML.")
    parser.add_argument("--budget", choices=sorted(BUDGETS), help="Cap steps, evaluation size and seeds.")
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

    run = commands.add_parser("run", help="Run a sweep (or finish it, if it was interrupted).")
    _add_spec_arguments(run)
    _add_cluster_arguments(run)
    run.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI.")
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

    knobs = commands.add_parser("knobs", help="Every knob of a method: type, default, range, meaning.")
    knobs.add_argument("method")
    return parser


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray).")
    parser.add_argument("--storage", help="Ray results path or URI shared by all nodes (default ./ray_results).")


def _options(args: argparse.Namespace):
    from sweep.engine import SweepOptions

    return SweepOptions(
        spec_path=args.spec,
        overrides=dict(parse_override(o) for o in args.overrides),
        budget=args.budget,
        seeds=args.seeds,
        address=getattr(args, "address", None),
        storage=getattr(args, "storage", None),
        tracking_uri=getattr(args, "tracking_uri", DEFAULT_TRACKING_URI),
        register=getattr(args, "register", None),
    )


def _warn(spec) -> None:
    """Plan-time warnings: a budget that leaves a method outside its paper's regime (not a refusal)."""
    from sweep.regime import regime_warnings

    for warning in regime_warnings(spec):
        print(f"warning: {warning}", file=sys.stderr)


def print_plan(args: argparse.Namespace) -> None:
    spec = _options(args).load()
    _warn(spec)
    varied = list(spec.grid) + list(spec.sample)
    print(f"{spec.name}: {spec.description}".rstrip(": "))
    print(f"method {spec.method}; budget {spec.budget.name if spec.budget else 'none'}; spec hash {spec.spec_hash}")
    width = max([len(row.name) for row in spec.rows] + [3]) + 2
    header = f"{'row':<{width}}{'method':<9}{'seeds':<24}" + "".join(f"{k:<16}" for k in varied)
    print(header)
    for row in spec.rows:
        seeds = ",".join(map(str, spec.seeds))
        seeds = f"{spec.seeds[0]} (runs once)" if spec.seed_free(row) and len(spec.seeds) > 1 else seeds
        for axes in spec.grid_points():
            config = trial_config(spec, row.name, spec.seeds[0], axes)
            cells = [str(axes[k]) for k in spec.grid] + [str(spec.sample[k]) for k in spec.sample]
            mirror = f"  mirror of ({', '.join(str(axes[k]) for k in reversed(spec.symmetric))}): not run" if spec.is_mirror(axes) else ""
            print(f"{row.name:<{width}}{config['method']:<9}{seeds:<24}" + "".join(f"{c:<16}" for c in cells) + mirror)
    print(disk_estimate(spec))
    print(
        f"grid: {len(spec.rows)} rows x {len(spec.seeds)} seeds x {len(list(spec.grid_points()))} grid points"
        f" x {spec.num_samples} samples = {spec.trial_count} trials"
    )
    for line in _savings(spec):
        print(line)
    print(f"{spec.trial_count} trials in the grid, {spec.trials_to_run} trials to run")


def _savings(spec) -> list[str]:
    """What runs once and what is shared, in words."""
    lines = []
    once = [row.name for row in spec.rows if spec.seed_free(row)]
    if once and len(spec.seeds) > 1:
        lines.append(f"runs once: {', '.join(repr(n) for n in once)} train nothing, so every seed gives the same "
                     f"numbers: one MLflow run each, tagged sweep.seeds={','.join(map(str, spec.seeds))}")
    if spec.symmetric:
        first, second = spec.symmetric
        mirrors = sum(spec.is_mirror(axes) for axes in spec.grid_points())
        reasons = {p.reason for row in spec.rows for p in row_method(spec, row).exchangeable if set(p.knobs) == {first, second}}
        lines.append(f"symmetric: {first} <-> {second}: {mirrors} mirror grid points per row and seed do not run; "
                     f"tables fill them from their pair, marked as such ({'; '.join(sorted(reasons))})")
    shared = {}
    for row in spec.rows:
        config = trial_config(spec, row.name, spec.seeds[0], next(spec.grid_points()))
        what = row_method(spec, row).shared_outputs(config)
        if what:
            shared.setdefault(what, []).append(row.name)
    for what, rows in shared.items():
        names = "every row" if len(rows) == len(spec.rows) else ", ".join(repr(n) for n in rows)
        lines.append(f"shared: {what} ({names}) are computed once per input text on each node and shared by its "
                     "trials (share_frozen_outputs; the same numbers as computing them every step)")
    return lines


def print_knobs(method_name: str) -> None:
    from trainers.registry import get_method

    for knob in get_method(method_name).all_knobs:
        print(f"{knob.name:<22}{knob.describe():<48} default {knob.default!r}\n{'':<22}{knob.help}")


def _summarise(results, options) -> int:
    """Say how the sweep ended, with its summary table and the next commands; exit 1 if any trial
    failed (the others still finished)."""
    from sweep.summary import finish_sweep

    failed = [r for r in results if r.error is not None]
    print(f"{len(results) - len(failed)} trials finished, {len(failed)} failed")
    for result in failed:
        print(f"  failed: {result.config.get('row', '')!r} seed {result.config.get('seed')}: {type(result.error).__name__}")
    print()
    print(finish_sweep(options.load(), options.tracking_uri), end="")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "plan":
            print_plan(args)
        elif args.command == "knobs":
            print_knobs(args.method)
        elif args.command == "status":
            from sweep.status import print_status

            print_status(args.name, args.tracking_uri)
        elif args.command == "run":
            from sweep.engine import run

            options = _options(args)
            _warn(options.load())
            return _summarise(run(options), options)
        elif args.command == "export":
            from sweep.status import export

            export(args.name, args.tracking_uri, args.out, args.row, args.seed, args.trial)
        elif args.command == "resume":
            from sweep.engine import resume_options, run

            options = resume_options(args.name, args.storage, args.address)
            return _summarise(run(options), options)
    except (SpecError, UsageError, ExportError) as error:
        print(error, file=sys.stderr)
        return 2
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    return 0
