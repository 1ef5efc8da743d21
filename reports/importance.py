"""Which axes of a finished sweep move its metric beyond seed noise.

    python -m reports.importance NAME [--tracking-uri URI] [--metric METRIC] [--evaluator fanova|ped-anova]
                                      [--out reports/out] [--no-log]

NAME is a sweep as ``sweep status`` takes it (``NAME``, or ``NAME-HASH`` among several variants). For rows
and grid axes: an ANOVA with the seeds of each point as replicates, each axis and each interaction with
its share of the metric's variance and its F test against the seed noise. For sampled axes: Optuna's
fANOVA (or PED-ANOVA) on the seed means, the seed noise's share beside it (:mod:`results.importance`).
The metric is the sweep's own (its spec's ``metric``) unless ``--metric`` names another.

It writes ``NAME-importance-METRIC.png`` (a bar per effect), ``.md`` and ``.tex`` (the table) and ``.csv``
under ``--out``, and logs them to the variant's MLflow parent run under ``importance/`` (unless
``--no-log``). A refused command prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from mlflow import MlflowClient

from reports.cli import run_command
from results.figures import importance_bars
from results.importance import EVALUATORS, Importance, ImportanceError, caption, effects_frame, importance
from results.names import UsageError
from results.ranking import frame_ranking
from results.reader import (
    KNOB_KINDS,
    choose_parent,
    existing_store_uri,
    read_client,
    recorded_layout,
    variant_trials,
)
from results.record import DEFAULT_TRACKING_URI, Summary
from results.render import write_table

NO_SAMPLE_RANGES = ("the declared ranges of the sampled axes were not recorded (the sweep started before sweeps "
                    "recorded their layout): the ranges are those the values span")


def declared_samples(parent, trials: pd.DataFrame) -> tuple[Mapping[str, Mapping[str, Any]], tuple[str, ...]]:
    """The ``sample:`` axes the sweep's parent run recorded when it started (their ranges, for Optuna), and the
    note to add where it recorded none and the trials have sampled axes (the ranges are then those the values
    span)."""
    layout = recorded_layout(parent)
    if layout is not None:
        return layout.sample, ()
    return {}, (NO_SAMPLE_RANGES,) if any(len(point) for point in trials["sampled_point"]) else ()


def sweep_metric(trials: pd.DataFrame, asked: str | None) -> tuple[str, str]:
    """(metric, mode): ``--metric`` (a metric the trials recorded) or the sweep's own, and the sweep's mode
    (:func:`results.ranking.frame_ranking`, as the reader ranks them)."""
    recorded_metric, mode = frame_ranking(trials)
    metric = asked or recorded_metric
    recorded = sorted(str(c) for c in trials.columns if str(trials[c].dtype) == "Float64" and c not in KNOB_KINDS)
    if metric not in recorded:
        named = "--metric" if asked else "the sweep's metric"
        raise UsageError(f"{named} {metric!r}: not a metric of these trials; they record {', '.join(recorded)}")
    return metric, mode


def write_outputs(result: Importance, name: str, out: Path) -> list[Path]:
    """The bar plot, the Markdown and LaTeX table and its CSV (the numbers unrounded) under ``out``."""
    stem = out / f"{name}-importance-{result.metric}"
    numbers = pd.DataFrame([asdict(effect) for effect in result.effects])
    numbers.to_csv(stem.with_suffix(".csv"), index=False)
    return [importance_bars(result, f"{name}: what moves {result.metric}", stem.with_suffix(".png")),
            *write_table(effects_frame(result), caption(result, name), stem, result.notes), stem.with_suffix(".csv")]


def report(args: argparse.Namespace) -> int:
    client = read_client(args.tracking_uri)
    experiment, parent = choose_parent(client, args.name, args.tracking_uri)
    trials = variant_trials(client, experiment, parent)
    if trials.empty:
        raise UsageError(f"sweep {args.name!r} has no trial runs at {args.tracking_uri}")
    metric, mode = sweep_metric(trials, args.metric)
    try:
        samples, notes = declared_samples(parent, trials)
        result = importance(trials, metric, mode, samples, args.evaluator)
    except ImportanceError as error:
        raise UsageError(f"sweep {args.name!r}: {error}") from None
    result = replace(result, notes=(*result.notes, *notes))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = write_outputs(result, args.name, out)
    if not args.no_log:
        writer = MlflowClient(existing_store_uri(args.tracking_uri))  # the store exists: read_client found it
        for path in written:
            writer.log_artifact(parent.info.run_id, str(path), Summary.IMPORTANCE)
    print(written[1].read_text(encoding="utf-8"))
    print("\n".join(str(path) for path in written))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.importance", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("name", metavar="NAME", help="A sweep: NAME, or NAME-HASH among several variants.")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--metric", help="A metric the trials recorded (default: the sweep's own).")
    parser.add_argument("--evaluator", choices=EVALUATORS, default=EVALUATORS[0],
                        help="Optuna's evaluator for sampled axes (default fanova).")
    parser.add_argument("--out", default="reports/out")
    parser.add_argument("--no-log", action="store_true", help="Do not log the outputs to the sweep's parent run.")
    return run_command(parser, argv, report)


if __name__ == "__main__":
    sys.exit(main())
