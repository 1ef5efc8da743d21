"""The top-level keys of a spec, their meanings and defaults (what docs/spec_reference.md prints), and the checks
of the keys that are not sections of their own: name, method, base knobs, grid and sampled axes, metric and the
plain settings. The sections (rows and reference, seeds, search, scheduler, resources) parse themselves
(:mod:`sweep.spec.rows`, :mod:`~sweep.spec.seeds`, :mod:`~sweep.spec.search`, :mod:`~sweep.spec.scheduler`,
:mod:`~sweep.spec.resources`); :meth:`sweep.spec.sweep_spec.SweepSpec.parse` reads them all in this order."""

from __future__ import annotations

from typing import Any, Mapping

from sweep.spec.problems import Problems, SpecError, check_knob_values, check_sample
from sweep.spec.scheduler import ASHA_OPTIONS, HYPERBAND_FOR_BOHB_OPTIONS, PBT_FLAGS, PBT_OPTIONS
from sweep.spec.search import SEARCH_ALGORITHMS, SEARCH_EXTRA
from trainers.common_knobs import COMMON_KNOBS
from trainers.data.glue_tasks import parse_glue
from trainers.method import Method
from trainers.metrics import SELECTABLE_METRICS, Glue, Metric, SuiteName
from trainers.registry import METHODS, get_method
from trainers.suites import parse_evaluations

TOP_LEVEL_KEYS = {
    "name": "experiment name (MLflow experiment and Ray run folder)",
    "description": "what the spec reproduces",
    "tags": "mapping of tag -> value, e.g. paper and table",
    "method": "method name",
    "base": "mapping of knob -> value shared by every trial",
    "rows": "list of {name, set, changes, follows_method} ablation rows; changes: the knobs in which the paper's row "
    "differs from the reference row (its contract, checked when the spec loads); follows_method: for a row that "
    "switches method, the knobs (and views) in which it differs by keeping that method's own defaults, each with "
    "the source the method declares",
    "reference": "the row the others are measured against: a row name, or {row, spec: PATH (from this file's "
    "folder), stands_in_for: the paper's reference where this one substitutes it, is_the_papers_with: {knob: value} "
    "with which it no longer substitutes but is the paper's (--set ones)}",
    "seeds": "list of integer seeds, or adaptive seeds {first: [...], more: [...], until: {p: P, or_above: Q}}: "
    "each row whose Welch p against the reference row lies in [P, Q] after the first seeds gets the next of more, "
    "one round at a time (docs/search.md)",
    "grid": "mapping of knob -> list of values (grid search)",
    "sample": "mapping of knob -> {choice|uniform|loguniform: ...}",
    "num_samples": "samples drawn from the sampled axes",
    "metric": "metric to optimise",
    "mode": "'max' or 'min'",
    "scheduler": f"optional {{asha: {{{', '.join(ASHA_OPTIONS)}}}}}, "
    f"{{pbt: {{hyperparam_mutations, {', '.join([*PBT_OPTIONS, *PBT_FLAGS])}}}}} or "
    f"{{hyperband_for_bohb: {{{', '.join(HYPERBAND_FOR_BOHB_OPTIONS)}}}}} (with search: bohb)",
    "search": f"optional searcher of the sampled axes: {{algorithm: {'|'.join(SEARCH_ALGORITHMS)}, trials: N}}; "
    "each point it suggests runs every seed and it learns their mean (docs/search.md; "
    f"{SEARCH_EXTRA})",
    "resources": "{cpu: N, gpu: fraction}",
    "max_concurrent_trials": "trials run at once",
    "max_failures": "retries of a failing trial before it is marked failed",
    "keep_models": "which finished trials keep their best encoder: all, best_per_row, best or none",
    "log_models": "log every kept trial's encoder to MLflow, not only the best trial's",
    "symmetric": "two grid axes the method declares exchangeable: each unordered pair of their values runs once",
    SuiteName.KEY: "evaluation suites run on each trial's best state: a list of names or {name: {option: value}} "
    "(docs/evaluations.md)",
    Glue.KEY: "GLUE fine-tuning of each row's encoder (python -m sweep glue SPEC): {tasks: [...], knob: value} "
    "(docs/glue.md)",
}
REQUIRED = "required"
DEFAULTS = {
    "name": REQUIRED, "method": REQUIRED, "description": "", "tags": {}, "base": {}, "rows": "one row, unnamed",
    "reference": None, "seeds": [COMMON_KNOBS["seed"].default], "grid": {}, "sample": {}, "num_samples": 1,
    "metric": Metric.BEST_DEV,
    "mode": "max", "scheduler": None, "resources": {"cpu": 1, "gpu": 0}, "max_concurrent_trials": 2,
    "max_failures": 1, "keep_models": "all", "log_models": False, "symmetric": None, "search": None,
    SuiteName.KEY: list(SuiteName.DEFAULT),
    Glue.KEY: None,
}
"""Each top-level key's value when a spec leaves it out: the one place validation reads them from, and what the
spec reference (docs/spec_reference.md, :mod:`sweep.spec.reference_doc`) prints."""
KEEP_MODELS = ("all", "best_per_row", "best", "none")


def check_method(problems: Problems, raw: Any) -> Method:
    """The spec is a mapping of known keys with a name and a known method (every other key is read for it:
    a spec with an unknown one stops here)."""
    if not isinstance(raw, Mapping):
        raise SpecError([f"{problems.path}: expected a mapping of {sorted(TOP_LEVEL_KEYS)}, got {type(raw).__name__}"])
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            problems.add(str(key), f"unknown key (expected one of {sorted(TOP_LEVEL_KEYS)})")
    name = raw.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        problems.add("name", f"expected a non-empty name without '/', got {name!r}")
    method_name = raw.get("method")
    if method_name not in METHODS:
        try:
            get_method(str(method_name))
        except KeyError as error:
            problems.add("method", str(error.args[0]))
        raise SpecError(problems.items)
    return get_method(method_name)


def check_count(problems: Problems, key: str, value: Any, smallest: int) -> int:
    """An integer setting (``num_samples``, ``max_concurrent_trials``, ``max_failures``) of at least ``smallest``."""
    if not isinstance(value, int) or value < smallest:
        problems.add(key, f"expected an integer >= {smallest}, got {value!r}")
        return smallest
    return value


def check_metric(problems: Problems, metric: Any, mode: Any) -> None:
    if metric not in SELECTABLE_METRICS and not str(metric).startswith(Metric.TEST_PREFIX):
        problems.add("metric", f"expected one of {list(SELECTABLE_METRICS)} or a test_* metric, got {metric!r}")
    if mode not in ("max", "min"):
        problems.add("mode", f"expected 'max' or 'min', got {mode!r}")


def check_models(problems: Problems, keep_models: Any, log_models: Any) -> None:
    """Which trials keep their encoder, and whether every kept one is logged to MLflow."""
    if keep_models not in KEEP_MODELS:
        problems.add("keep_models", f"expected one of {list(KEEP_MODELS)}, got {keep_models!r}")
    if not isinstance(log_models, bool):
        problems.add("log_models", f"expected true or false, got {log_models!r}")


def parse_suites(problems: Problems, raw: Mapping[str, Any]) -> tuple[tuple[Mapping[str, Any], ...],
                                                                       Mapping[str, Any] | None]:
    """The evaluation suites (``{"suite": name, **options}``) and GLUE fine-tuning's knobs (or None)."""
    evaluations, suite_problems = parse_evaluations(raw.get(SuiteName.KEY))
    for key, message in suite_problems:
        problems.add(f"{SuiteName.KEY}{key}", message)
    glue, glue_problems = parse_glue(raw[Glue.KEY]) if Glue.KEY in raw else (None, [])
    for key, message in glue_problems:
        problems.add(f"{Glue.KEY}{key}", message)
    return tuple(evaluations), glue


def parse_tags(problems: Problems, tags: Any) -> dict[str, str]:
    if not isinstance(tags, Mapping):
        problems.add("tags", f"expected a mapping, got {tags!r}")
        return {}
    return {str(k): str(v) for k, v in tags.items()}


def parse_base(problems: Problems, base: dict[str, Any], overrides: dict[str, Any], method: Method) -> dict[str, Any]:
    """The base knobs updated by ``--set``; ``method`` may be set in neither."""
    for where, values in (("base", base), ("--set", overrides)):
        if "method" in values:
            problems.add(f"{where}.method", "the method is set by the top-level 'method' key")
            values.pop("method")
    check_knob_values(problems, "base", base, method)
    for knob_name, message in method.all_knobs.problems(overrides):
        problems.items.append(f"--set {knob_name}={overrides[knob_name]}: {message} (method {method.name!r})")
    return {**base, **overrides}


def parse_axes(problems: Problems, grid: Any, sample: Any, method: Method) -> tuple[Mapping, Mapping]:
    """Grid axes (knob -> values) and sampled axes (knob -> sampler), each a knob of the method."""
    for axis_name, axes in (("grid", grid), ("sample", sample)):
        if not isinstance(axes, Mapping):
            problems.add(axis_name, f"expected a mapping of knob -> values, got {axes!r}")
    grid = grid if isinstance(grid, Mapping) else {}
    sample = sample if isinstance(sample, Mapping) else {}
    knobs = method.all_knobs
    for knob_name, values in grid.items():
        key = f"grid.{knob_name}"
        if knob_name in ("seed", "method"):
            problems.add(key, "use the top-level 'seeds' key" if knob_name == "seed"
                         else "use rows to change the method")
        elif knob_name not in knobs:
            check_knob_values(problems, "grid", {knob_name: None}, method)
        elif not isinstance(values, list) or not values:
            problems.add(key, f"empty grid: expected a non-empty list of values, got {values!r}")
        else:
            for index, value in enumerate(values):
                message = knobs[knob_name].problem(value)
                if message:
                    problems.add(f"{key}[{index}]", message)
    for knob_name, axis in sample.items():
        if knob_name not in knobs:
            check_knob_values(problems, "sample", {knob_name: None}, method)
        else:
            check_sample(problems, f"sample.{knob_name}", axis, knobs[knob_name])
    for knob_name in set(grid) & set(sample):
        problems.add(f"sample.{knob_name}", "also a grid axis: an axis is either grid or sampled")
    return grid, sample


def parse_symmetric(problems: Problems, symmetric: Any, grid: Mapping[str, Any],
                     methods: list[Method]) -> tuple[str, str] | None:
    """``symmetric: [A, B]``: two grid axes with the same values, declared exchangeable by every method
    of the sweep that has both knobs."""
    if symmetric is None:
        return None
    if not isinstance(symmetric, list) or len(symmetric) != 2 or len(set(map(str, symmetric))) != 2:
        problems.add("symmetric", f"expected a list of two different grid axes, e.g. [aug1, aug2], got {symmetric!r}")
        return None
    first, second = symmetric
    absent = [axis for axis in symmetric if axis not in grid]
    if absent:
        problems.add("symmetric", f"{absent} not grid axes of this spec (grid axes: {list(grid)})")
        return None
    if grid[first] != grid[second]:
        problems.add("symmetric", f"grid.{first} and grid.{second} must have the same values in the same order, "
                                  f"got {grid[first]!r} and {grid[second]!r}")
    for method in {m.name: m for m in methods}.values():
        if first not in method.all_knobs or second not in method.all_knobs:
            continue
        if not any(set(pair.knobs) == {first, second} for pair in method.exchangeable):
            declared = [f"{a}/{b}" for a, b in (pair.knobs for pair in method.exchangeable)] or "none"
            problems.add("symmetric", f"method {method.name!r} does not declare {first} and {second} exchangeable "
                                      f"(it declares: {declared}); only a declared pair may be symmetric")
    return (first, second)
