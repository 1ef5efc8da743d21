"""The shape of a spec: top-level keys, knob values of the base, rows and axes, samplers, schedulers
(ASHA, PBT), symmetric axes. Every problem is collected as ``FILE: key.path: message`` and all are
reported at once (:class:`SpecError`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from sweep.spec.contracts import VIEWS
from trainers.common_knobs import COMMON_KNOBS
from trainers.data.glue_tasks import parse_glue
from trainers.knobs import Knob
from trainers.method import Method
from trainers.metrics import SELECTABLE_METRICS, Glue, Metric, SuiteName
from trainers.registry import METHODS, get_method
from trainers.suites import parse_evaluations

# ASHA options a spec may set (Ray's ASHAScheduler arguments) and their smallest
# valid values; ASHA's time unit is an STS-B dev evaluation.
ASHA_OPTIONS = {"max_t": 1, "grace_period": 1, "reduction_factor": 1.01, "brackets": 1}
# PBT options a spec may set besides its mutations (Ray's PopulationBasedTraining arguments): numbers with
# their valid ranges, and flags; PBT's time unit, like ASHA's, is an STS-B dev evaluation. ``synch`` makes
# every trial wait at each perturbation point for the others, so exploits do not depend on timing.
PBT_OPTIONS = {"perturbation_interval": (1, None), "quantile_fraction": (0.0, 0.5), "resample_probability": (0.0, 1.0)}
PBT_FLAGS = ("synch",)
# HyperBandForBOHB options a spec may set (Ray's arguments) and their smallest valid values; its time unit,
# like ASHA's, is an STS-B dev evaluation.
HYPERBAND_FOR_BOHB_OPTIONS = {"max_t": 1, "reduction_factor": 1.01}
SEARCH_ALGORITHMS = {"optuna": ("optuna",), "hyperopt": ("hyperopt",), "bohb": ("ConfigSpace", "hpbandster"),
                     "random": ("optuna",)}
"""Each searcher a spec may name (``search.algorithm``) and the modules it needs: the ``search`` extra
(random is Optuna's RandomSampler, so that every searcher is driven alike)."""
SEARCH_EXTRA = "pip install -e '.[search]'"

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
SAMPLERS = ("choice", "uniform", "loguniform")
KEEP_MODELS = ("all", "best_per_row", "best", "none")


class SpecError(ValueError):
    """An invalid spec; ``problems`` holds every ``FILE: key.path: message``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid sweep spec:\n  " + "\n  ".join(problems))


def gpu_problem(gpu: float, concurrency: int, cluster_gpus: int) -> str | None:
    """Why ``max_concurrent_trials`` trials of ``gpu`` GPUs each cannot run at once on ``cluster_gpus``
    GPUs (None when they can): Ray packs floor(1 / gpu) trials of a fraction onto each GPU and never
    splits a trial across GPUs, so the rest would wait."""
    if gpu <= 0:
        return None
    if cluster_gpus == 0:
        return f"resources.gpu: {gpu:g} asks for a GPU, and the cluster has none (drop resources.gpu to run on CPUs)"
    per_gpu = math.floor(1 / gpu + 1e-9) if gpu <= 1 else 0
    at_once = per_gpu * cluster_gpus if gpu <= 1 else math.floor(cluster_gpus / gpu)
    if concurrency <= at_once:
        return None
    fraction = 1 / math.ceil(concurrency / cluster_gpus)
    return (f"resources.gpu: {gpu:g} with max_concurrent_trials {concurrency}: {at_once} trials fit at once on the "
            f"cluster's {cluster_gpus} GPU(s); expected max_concurrent_trials <= {at_once}, or resources.gpu <= "
            f"{fraction:.4g}")


class _Problems:
    def __init__(self, path: Path):
        self.path, self.items = path, []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.path}: {key}: {message}")


def _check_knob_values(problems: _Problems, where: str, values: Mapping[str, Any], method: Method) -> None:
    for name, message in method.all_knobs.problems(values):
        problems.add(f"{where}.{name}", f"{message} (method {method.name!r})")


def _check_sample(problems: _Problems, key: str, axis: Any, knob: Knob | None) -> None:
    if not isinstance(axis, Mapping) or len(axis) != 1 or next(iter(axis)) not in SAMPLERS:
        problems.add(key, f"expected one of {{choice: [...]}}, {{uniform: [lo, hi]}}, {{loguniform: [lo, hi]}}, "
                          f"got {axis!r}")
        return
    sampler, arguments = next(iter(axis.items()))
    if not isinstance(arguments, list) or not arguments:
        problems.add(f"{key}.{sampler}", f"expected a non-empty list, got {arguments!r}")
        return
    if sampler != "choice" and (len(arguments) != 2 or not arguments[0] < arguments[1]):
        problems.add(f"{key}.{sampler}", f"expected [low, high] with low < high, got {arguments!r}")
    if sampler == "loguniform" and arguments[0] <= 0:
        problems.add(f"{key}.{sampler}", f"expected a positive low bound, got {arguments[0]!r}")
    if knob is not None:
        for value in arguments:
            message = knob.problem(value)
            if message:
                problems.add(f"{key}.{sampler}", message)


def _check_scheduler(problems: _Problems, scheduler: Any, method: Method, base: Mapping[str, Any]) -> None:
    if (not isinstance(scheduler, Mapping) or len(scheduler) != 1
            or next(iter(scheduler)) not in ("asha", "pbt", "hyperband_for_bohb")):
        problems.add("scheduler", f"expected {{asha: {{{', '.join(ASHA_OPTIONS)}}}}}, "
                                  "{pbt: {perturbation_interval, hyperparam_mutations}} or "
                                  f"{{hyperband_for_bohb: {{{', '.join(HYPERBAND_FOR_BOHB_OPTIONS)}}}}}, "
                                  f"got {scheduler!r}")
        return
    if "asha" in scheduler:
        _check_asha(problems, scheduler["asha"] or {})
    elif "hyperband_for_bohb" in scheduler:
        _check_numbers(problems, "scheduler.hyperband_for_bohb", scheduler["hyperband_for_bohb"] or {},
                       HYPERBAND_FOR_BOHB_OPTIONS)
    else:
        _check_pbt(problems, scheduler["pbt"], method, base)


def _check_asha(problems: _Problems, options: Any) -> None:
    _check_numbers(problems, "scheduler.asha", options, ASHA_OPTIONS)
    if not isinstance(options, Mapping):
        return
    max_t, grace = options.get("max_t", 100), options.get("grace_period", 1)
    if isinstance(max_t, (int, float)) and isinstance(grace, (int, float)) and grace > max_t:
        problems.add("scheduler.asha.grace_period", f"must be <= max_t ({max_t}), got {grace!r}")


def _check_numbers(problems: _Problems, key: str, options: Any, smallest: Mapping[str, float]) -> None:
    """A scheduler's numeric options: known names, each at least its smallest valid value."""
    if not isinstance(options, Mapping):
        problems.add(key, f"expected a mapping of {list(smallest)}, got {options!r}")
        return
    for name, value in options.items():
        if name not in smallest:
            problems.add(f"{key}.{name}", f"unknown option (expected one of {list(smallest)})")
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or value < smallest[name]:
            problems.add(f"{key}.{name}", f"expected a number >= {smallest[name]}, got {value!r}")


def _check_search(problems: _Problems, raw: Mapping[str, Any], sample: Mapping[str, Any], grid: Mapping[str, Any],
                  rows: list) -> dict[str, Any] | None:
    """``search: {algorithm, trials}`` and what it cannot go with: a searcher suggests values of the sampled
    axes, runs each suggestion with every seed and learns the seeds' mean, so it needs sampled axes and no
    grid axis or second row (they would be averaged into its score); PBT changes knobs while a trial trains,
    which a searcher chose before it started; BOHB learns from its own HyperBand's budgets."""
    search, scheduler = raw.get("search", DEFAULTS["search"]), raw.get("scheduler") or {}
    bohb_scheduler = isinstance(scheduler, Mapping) and "hyperband_for_bohb" in scheduler
    if search is None:
        if bohb_scheduler:
            problems.add("scheduler.hyperband_for_bohb", "goes with its searcher: add search: {algorithm: bohb, "
                                                         "trials: N}")
        return None
    if (not isinstance(search, Mapping) or set(search) != {"algorithm", "trials"}
            or search["algorithm"] not in SEARCH_ALGORITHMS or not isinstance(search["trials"], int)
            or isinstance(search["trials"], bool) or search["trials"] < 1):
        problems.add("search", f"expected {{algorithm: {'|'.join(SEARCH_ALGORITHMS)}, trials: N >= 1}}, "
                               f"got {search!r}")
        return None
    if not sample:
        problems.add("search", "a searcher suggests values of the sampled axes, and this spec has none "
                               "(add sample: {knob: {loguniform: [low, high]}})")
    if grid:
        problems.add("grid", f"a searcher scores each suggestion by the mean over its seeds; grid axes "
                             f"({', '.join(grid)}) would be averaged into it: make them sampled axes or drop search")
    if len(rows) > 1:
        problems.add("rows", "a searcher scores each suggestion by the mean over its seeds; several rows would be "
                             "averaged into it: search one row per spec")
    if "num_samples" in raw:
        problems.add("num_samples", "search.trials says how many points the searcher suggests: drop num_samples")
    if isinstance(scheduler, Mapping) and "pbt" in scheduler:
        problems.add("scheduler.pbt", "PBT changes a trial's knobs while it trains, and a searcher chose them "
                                      "before it started: use one of them")
    if search["algorithm"] == "bohb" and not bohb_scheduler:
        problems.add("search.algorithm", "bohb learns from its HyperBand scheduler's budgets: add scheduler: "
                                         "{hyperband_for_bohb: {max_t: N}}")
    if search["algorithm"] != "bohb" and bohb_scheduler:
        problems.add("scheduler.hyperband_for_bohb", f"goes with search algorithm bohb, not "
                                                     f"{search['algorithm']!r} (use asha, or algorithm: bohb)")
    return dict(search)


def _check_pbt(problems: _Problems, options: Any, method: Method, base: Mapping[str, Any]) -> None:
    """PBT's options, and its mutations as knobs: known knobs of a trained method, values in their ranges,
    continuous ranges only for float knobs. Exploits restore checkpoints, so the interval (in evaluations)
    must be a multiple of ``checkpoint_every``."""
    key = "scheduler.pbt"
    if (not isinstance(options, Mapping) or "perturbation_interval" not in options
            or "hyperparam_mutations" not in options):
        problems.add(key, f"expected {{perturbation_interval: N, hyperparam_mutations: {{knob: [values] or "
                          f"{{uniform|loguniform: [lo, hi]}}}}}}, got {options!r}")
        return
    for name, value in options.items():
        if name == "hyperparam_mutations":
            continue
        if name in PBT_FLAGS:
            if not isinstance(value, bool):
                problems.add(f"{key}.{name}", f"expected true or false, got {value!r}")
            continue
        if name not in PBT_OPTIONS:
            problems.add(f"{key}.{name}", "unknown option (expected one of "
                                          f"{['hyperparam_mutations', *PBT_OPTIONS, *PBT_FLAGS]})")
            continue
        low, high = PBT_OPTIONS[name]
        integer = name == "perturbation_interval"
        if (not isinstance(value, int if integer else (int, float)) or isinstance(value, bool) or value < low
                or (high is not None and value > high)):
            problems.add(f"{key}.{name}", f"expected {'an integer' if integer else 'a number'} in "
                                          f"[{low}, {high if high is not None else 'inf'}], got {value!r}")
    if not method.trains:
        problems.add(key, f"method {method.name!r} does not train: PBT has nothing to perturb")
        return
    knobs = method.all_knobs
    mutations = options["hyperparam_mutations"]
    if not isinstance(mutations, Mapping) or not mutations:
        problems.add(f"{key}.hyperparam_mutations",
                     f"expected a non-empty mapping of knob -> values, got {mutations!r}")
        return
    for name, values in mutations.items():
        where = f"{key}.hyperparam_mutations.{name}"
        if name not in knobs or name in ("seed", "method"):
            _check_knob_values(problems, f"{key}.hyperparam_mutations", {name: None}, method)
        elif isinstance(values, list):
            if not values:
                problems.add(where, "expected a non-empty list of values")
            for value in values:
                if message := knobs[name].problem(value):
                    problems.add(where, message)
        elif knobs[name].kind is not float:
            problems.add(where, f"a {knobs[name].kind.__name__} knob takes a list of values, got {values!r}")
        else:
            _check_sample(problems, where, values, knobs[name])
    interval, every = options["perturbation_interval"], base.get("checkpoint_every", knobs["checkpoint_every"].default)
    if isinstance(interval, int) and isinstance(every, int) and (every == 0 or interval % every):
        problems.add(f"{key}.perturbation_interval", f"must be a multiple of checkpoint_every ({every}): an exploit "
                                                     "restores the other trial's checkpoint")


def _check_symmetric(problems: _Problems, symmetric: Any, grid: Mapping[str, Any],
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


def _parse_rows(problems: _Problems, rows: Any,
                method: Method) -> list[tuple[str, dict[str, Any], tuple[str, ...] | None, tuple[str, ...]]]:
    """(name, overrides, changes, follows_method) of each row; ``changes`` is None where the row declares no
    contract."""
    if rows is None:
        return [("", {}, None, ())]
    if not isinstance(rows, list) or not rows:
        problems.add("rows", f"expected a non-empty list of {{name, set}}, got {rows!r}")
        return []
    parsed, seen = [], set()
    for index, row in enumerate(rows):
        key = f"rows[{index}]"
        if (not isinstance(row, Mapping) or not isinstance(row.get("name"), str)
                or set(row) - {"name", "set", "changes", "follows_method"}):
            problems.add(key, f"expected {{name: str, set: {{knob: value}}, changes: [knob, ...], follows_method: "
                              f"[knob, ...]}}, got {row!r}")
            continue
        name, overrides = row["name"], dict(row.get("set") or {})
        if name in seen:
            problems.add(f"{key}.name", f"duplicate row name {name!r}")
        seen.add(name)
        row_method_name = overrides.get("method", method.name)
        if row_method_name not in METHODS:
            try:
                get_method(str(row_method_name))
            except KeyError as error:  # its message has the known methods and a did-you-mean
                problems.add(f"{key}.set.method", str(error.args[0]))
            continue
        row_method = get_method(row_method_name)
        _check_knob_values(problems, f"{key}.set", {k: v for k, v in overrides.items() if k != "method"}, row_method)
        changes = _check_changes(problems, f"{key}.changes", row.get("changes"), row_method)
        follows = _check_follows(problems, f"{key}.follows_method", row.get("follows_method"), changes, row_method,
                                 method)
        parsed.append((name, overrides, changes, follows))
    return parsed


def _check_follows(problems: _Problems, key: str, follows: Any, changes: tuple[str, ...] | None, method: Method,
                   spec_method: Method) -> tuple[str, ...]:
    """A row's ``follows_method``: knobs of its method (or ``views``), only beside ``changes: [method, ...]``."""
    if follows is None:
        return ()
    if not isinstance(follows, list) or not all(isinstance(name, str) for name in follows):
        problems.add(key, f"expected a list of knob names (or 'views'), got {follows!r}")
        return ()
    if changes is None or "method" not in changes:
        problems.add(key, "only a row that switches method (changes: [method, ...]) keeps that method's defaults")
    unknown = {name: None for name in follows if name != VIEWS and name not in method.all_knobs}
    _check_knob_values(problems, key, unknown, method)
    if len(set(follows)) != len(follows) or set(follows) & set(changes or ()):
        problems.add(key, f"knobs repeat (in follows_method or in changes too): {follows}")
    return tuple(follows)


def _check_changes(problems: _Problems, key: str, changes: Any, method: Method) -> tuple[str, ...] | None:
    """A row's contract: the knobs (or ``method``) of its method in which it differs from the reference."""
    if changes is None:
        return None
    if not isinstance(changes, list) or not all(isinstance(name, str) for name in changes):
        problems.add(key, f"expected a list of knob names, got {changes!r}")
        return None
    unknown = {name: None for name in changes if name != "method" and name not in method.all_knobs}
    _check_knob_values(problems, key, unknown, method)  # each an unknown knob, with a did-you-mean
    if len(set(changes)) != len(changes):
        problems.add(key, f"knobs repeat: {changes}")
    return tuple(changes)


def _check_reference(problems: _Problems, reference: Any, rows: list) -> dict[str, Any] | None:
    """``reference``: a row of this spec, or ``{row, spec, stands_in_for}``; with one in this spec, every other
    row declares its ``changes`` and the reference row none."""
    if reference is None:
        if any(changes is not None for _, _, changes, _ in rows):
            problems.add("reference", "rows declare changes, but the spec names no reference row "
                                      "to measure them against")
        return None
    if isinstance(reference, str):
        reference = {"row": reference}
    if (not isinstance(reference, Mapping) or not isinstance(reference.get("row"), str)
            or set(reference) - {"row", "spec", "stands_in_for", "is_the_papers_with"}
            or not all(isinstance(reference.get(k, ""), str) for k in ("spec", "stands_in_for"))
            or not isinstance(reference.get("is_the_papers_with", {}), Mapping)):
        problems.add("reference", f"expected a row name or {{row: NAME, spec: PATH, stands_in_for: TEXT, "
                                  f"is_the_papers_with: {{knob: value}}}}, "
                                  f"got {reference!r}")
        return None
    names = [name for name, *_ in rows]
    for index, (name, _, changes, _) in enumerate(rows):
        if "spec" not in reference and name == reference["row"]:
            if changes is not None:
                problems.add(f"rows[{index}].changes", "the reference row changes nothing: drop its changes")
        elif changes is None:
            problems.add(f"rows[{index}]", f"row {name!r} needs 'changes': the knobs in which the paper's row differs "
                                           f"from the reference row {reference['row']!r}")
    if "spec" not in reference and reference["row"] not in names:
        problems.add("reference", f"{reference['row']!r} is not a row of this spec (rows: {names})")
    return dict(reference)


def validate(path: Path, raw: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Check every key of ``raw`` (a spec read from ``path``) and of ``--set``'s ``overrides``; raise
    :class:`SpecError` with every problem found. Returns the spec's parts by the names of
    :class:`sweep.spec.sweep_spec.SweepSpec`'s fields (``rows`` as (name, overrides) pairs, ``base`` with ``--set``)."""
    problems = _Problems(path)
    if not isinstance(raw, Mapping):
        raise SpecError([f"{path}: expected a mapping of {sorted(TOP_LEVEL_KEYS)}, got {type(raw).__name__}"])
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
    method = get_method(method_name)
    base = _check_base(problems, dict(raw.get("base") or {}), dict(overrides), method)
    rows = _parse_rows(problems, raw.get("rows"), method)
    reference = _check_reference(problems, raw.get("reference"), rows)
    seeds, seed_rounds = _check_seed_rounds(problems, raw, rows, reference)
    grid, sample = _check_axes(problems, raw.get("grid") or {}, raw.get("sample") or {}, method)
    row_methods = [get_method(row_overrides["method"]) for _, row_overrides, *_ in rows if "method" in row_overrides]
    symmetric = _check_symmetric(problems, raw.get("symmetric"), grid, [method, *row_methods])
    search = _check_search(problems, raw, sample, grid, rows)
    num_samples = search["trials"] if search else raw.get("num_samples", DEFAULTS["num_samples"])
    if not isinstance(num_samples, int) or num_samples < 1:
        problems.add("num_samples", f"expected an integer >= 1, got {num_samples!r}")
        num_samples = 1
    metric, mode = raw.get("metric", DEFAULTS["metric"]), raw.get("mode", DEFAULTS["mode"])
    _check_metric(problems, metric, mode, raw.get("scheduler"), method, base)
    resources = {**DEFAULTS["resources"], **(raw.get("resources") or {})}
    for key, value in resources.items():
        if key not in ("cpu", "gpu") or not isinstance(value, (int, float)) or value < 0:
            problems.add(f"resources.{key}", f"expected cpu or gpu with a non-negative number, got {value!r}")
    gpu = resources["gpu"]
    if isinstance(gpu, (int, float)) and gpu > 1 and gpu != int(gpu):
        problems.add("resources.gpu", f"expected a fraction of one GPU (such as 0.25) or a whole number of GPUs, "
                                      f"got {gpu!r} (Ray gives a trial no more than one GPU in parts)")
    concurrency = raw.get("max_concurrent_trials", DEFAULTS["max_concurrent_trials"])
    if not isinstance(concurrency, int) or concurrency < 1:
        problems.add("max_concurrent_trials", f"expected an integer >= 1, got {concurrency!r}")
    failures = raw.get("max_failures", DEFAULTS["max_failures"])
    if not isinstance(failures, int) or failures < 0:
        problems.add("max_failures", f"expected an integer >= 0, got {failures!r}")
    keep_models = raw.get("keep_models", DEFAULTS["keep_models"])
    if keep_models not in KEEP_MODELS:
        problems.add("keep_models", f"expected one of {list(KEEP_MODELS)}, got {keep_models!r}")
    log_models = raw.get("log_models", DEFAULTS["log_models"])
    if not isinstance(log_models, bool):
        problems.add("log_models", f"expected true or false, got {log_models!r}")
    evaluations, suite_problems = parse_evaluations(raw.get(SuiteName.KEY))
    for key, message in suite_problems:
        problems.add(f"{SuiteName.KEY}{key}", message)
    glue, glue_problems = parse_glue(raw[Glue.KEY]) if Glue.KEY in raw else (None, [])
    for key, message in glue_problems:
        problems.add(f"{Glue.KEY}{key}", message)
    tags = raw.get("tags") or {}
    if not isinstance(tags, Mapping):
        problems.add("tags", f"expected a mapping, got {tags!r}")
        tags = {}
    if problems.items:
        raise SpecError(problems.items)
    return dict(
        name=name, description=str(raw.get("description", "")), tags={str(k): str(v) for k, v in tags.items()},
        method=method_name, base=base, rows=rows, seeds=seeds, grid={k: list(v) for k, v in grid.items()},
        sample=dict(sample), num_samples=num_samples, metric=metric, mode=mode, scheduler=raw.get("scheduler"),
        resources=resources, max_concurrent_trials=concurrency, max_failures=failures, keep_models=keep_models,
        log_models=log_models, symmetric=symmetric, evaluations=tuple(evaluations), glue=glue, reference=reference,
        search=search, seed_rounds=seed_rounds,
    )


def _check_base(problems: _Problems, base: dict[str, Any], overrides: dict[str, Any], method: Method) -> dict[str, Any]:
    """The base knobs updated by ``--set``; ``method`` may be set in neither."""
    for where, values in (("base", base), ("--set", overrides)):
        if "method" in values:
            problems.add(f"{where}.method", "the method is set by the top-level 'method' key")
            values.pop("method")
    _check_knob_values(problems, "base", base, method)
    for knob_name, message in method.all_knobs.problems(overrides):
        problems.items.append(f"--set {knob_name}={overrides[knob_name]}: {message} (method {method.name!r})")
    return {**base, **overrides}


def _check_seeds(problems: _Problems, seeds: Any, key: str = "seeds") -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                           for s in seeds):
        problems.add(key, f"expected a non-empty list of non-negative integers, got {seeds!r}")
        return [0]
    if len(set(seeds)) != len(seeds):
        problems.add(key, f"seeds repeat: {seeds}")
    return seeds


def _check_seed_rounds(problems: _Problems, raw: Mapping[str, Any], rows: list,
                       reference: Mapping[str, Any] | None) -> tuple[list[int], dict[str, Any] | None]:
    """``seeds``: a list, or adaptive seeds ``{first, more, until: {p, or_above}}``. Returns every seed that
    may run (first, then more) and the adaptive rule, or None. Adaptive seeds compare each row with the
    spec's own reference row by the tables' test, so they need one, and no axis that gives a row several
    lines (grid, sampled) or a search."""
    seeds = raw.get("seeds", DEFAULTS["seeds"])
    if not isinstance(seeds, Mapping):
        return _check_seeds(problems, seeds), None
    until = seeds.get("until")
    if (set(seeds) != {"first", "more", "until"} or not isinstance(until, Mapping) or set(until) != {"p", "or_above"}
            or not all(isinstance(until[k], (int, float)) and not isinstance(until[k], bool) for k in until)
            or not 0 < until["p"] <= until["or_above"] <= 1):
        problems.add("seeds", "expected a list of seeds or {first: [seeds], more: [seeds], until: {p: P, "
                              f"or_above: Q}} with 0 < P <= Q <= 1, got {seeds!r}")
        return [0], None
    first, more = _check_seeds(problems, seeds["first"], "seeds.first"), _check_seeds(problems, seeds["more"],
                                                                                       "seeds.more")
    if len(first) < 2:
        problems.add("seeds.first", f"Welch's test needs at least 2 seeds a row, got {first!r}")
    if set(first) & set(more):
        problems.add("seeds.more", f"seeds also in first: {sorted(set(first) & set(more))}")
    if reference is None or "spec" in reference:
        problems.add("seeds", "adaptive seeds test each row against the reference row: name a row of this spec "
                              "as reference")
    for key in ("grid", "sample", "search"):
        if raw.get(key):
            problems.add(key, "adaptive seeds decide per row, and this key gives a row several points: drop "
                              "one of them")
    if len(rows) < 2:
        problems.add("seeds", "adaptive seeds compare rows with the reference row, and this spec has one row")
    return [*first, *more], {"first": list(first), "more": list(more), **until}


def _check_axes(problems: _Problems, grid: Any, sample: Any, method: Method) -> tuple[Mapping, Mapping]:
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
            _check_knob_values(problems, "grid", {knob_name: None}, method)
        elif not isinstance(values, list) or not values:
            problems.add(key, f"empty grid: expected a non-empty list of values, got {values!r}")
        else:
            for index, value in enumerate(values):
                message = knobs[knob_name].problem(value)
                if message:
                    problems.add(f"{key}[{index}]", message)
    for knob_name, axis in sample.items():
        if knob_name not in knobs:
            _check_knob_values(problems, "sample", {knob_name: None}, method)
        else:
            _check_sample(problems, f"sample.{knob_name}", axis, knobs[knob_name])
    for knob_name in set(grid) & set(sample):
        problems.add(f"sample.{knob_name}", "also a grid axis: an axis is either grid or sampled")
    return grid, sample


def _check_metric(problems: _Problems, metric: Any, mode: Any, scheduler: Any, method: Method,
                  base: Mapping[str, Any]) -> None:
    if metric not in SELECTABLE_METRICS and not str(metric).startswith(Metric.TEST_PREFIX):
        problems.add("metric", f"expected one of {list(SELECTABLE_METRICS)} or a test_* metric, got {metric!r}")
    if mode not in ("max", "min"):
        problems.add("mode", f"expected 'max' or 'min', got {mode!r}")
    if scheduler is None:
        return
    _check_scheduler(problems, scheduler, method, base)
    if metric != Metric.BEST_DEV:
        problems.add("metric", f"a scheduler compares trials at every evaluation, where only {Metric.BEST_DEV!r} "
                               f"is reported in every result; got {metric!r}")
