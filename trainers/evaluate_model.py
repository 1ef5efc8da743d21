"""Evaluate any model and pooling on the seven STS test sets (and STS-B dev).

    python -m trainers.evaluate_model --pooling mean
    python -m trainers.evaluate_model --model bert-base-uncased --pooling cls --pooling-layer 2

Prints a table of Spearman (and Pearson) x 100 per set; STS12-16 also show the
``mean`` and ``wmean`` aggregations over their subsets.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Mapping, Sequence

from trainers.data.sources import TEST_SETS, DataError
from trainers.knobs import ConfigError
from trainers.metrics import Metric, ReportKey
from trainers.registry import get_method
from trainers.training.loop import run_trial


def format_table(metrics: Mapping[str, float]) -> str:
    header = f"{'set':<8}{'spearman':>10}{'pearson':>10}{'mean':>10}{'wmean':>10}"
    lines = [header, "-" * len(header)]
    for name in TEST_SETS:
        cells = [metrics[Metric.test_set(name)], metrics[Metric.test_set(name, "pearson")]]
        extra = [metrics.get(Metric.test_set(name, f"{agg}_spearman")) for agg in ("mean", "wmean")]
        text = ("".join(f"{c:10.2f}" for c in cells)
                + "".join(f"{e:10.2f}" if e is not None else f"{'':>10}" for e in extra))
        lines.append(f"{name:<8}{text}")
    lines.append(f"{'avg':<8}{metrics[Metric.TEST_AVG]:10.2f}")
    lines.append(f"{'dev':<8}{metrics[Metric.BEST_DEV]:10.2f}  (STS-B dev)")
    lines.append(f"encoded in {metrics[ReportKey.EVAL_PRECISION]}, {metrics[ReportKey.EVAL_BATCH_SIZE]} sentences a "
                 "forward")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    knobs = get_method("none").all_knobs
    parser = argparse.ArgumentParser(prog="python -m trainers.evaluate_model", description=__doc__.split("\n\n")[0])
    for knob in knobs:
        parser.add_argument(
            f"--{knob.name.replace('_', '-')}", dest=knob.name, type=knob.kind, default=None, help=knob.help
        )
    parser.add_argument("--json", action="store_true", help="Print the metrics as JSON instead of a table.")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = vars(parse_args(argv))
    as_json = args.pop("json")
    overrides = {name: value for name, value in args.items() if value is not None}
    method = get_method("none")
    try:
        # The sweep validator's checks (model, STS files), so that bad input gets its one-line errors.
        problems = method.environment_problems(method.resolve(overrides))
        if not problems:
            metrics = run_trial({"method": "none", **overrides})
    except ConfigError as error:
        problems = error.problems
    except DataError as error:  # a file changed between the check and the run
        problems = [str(error)]
    if problems:
        print("\n".join(map(str, problems)), file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2) if as_json else format_table(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
