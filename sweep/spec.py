"""Sweep specs: YAML under ``search_spaces/`` -> validated :class:`SweepSpec`.

A spec names a method and its base config, named ablation rows (each a set of
knob overrides, named as the paper's table names them), seeds, grid and
sampled axes, the metric, an optional ASHA scheduler, resources, and tags.
:func:`load_spec` validates everything before any trial starts and reports
every problem at once as ``FILE: key.path: message``.

:func:`trial_config` is the one place where base, row, axes and seed become a
trial's config; the planner, the validator, the Ray trainable and the MLflow
tracker all call it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from sweep.budget import Budget
from trainers.knobs import ConfigError, Knob
from trainers.method import Method
from trainers.registry import METHODS, get_method

TOP_LEVEL_KEYS = {
    "name": "experiment name (MLflow experiment and Ray run folder)",
    "description": "what the spec reproduces",
    "tags": "mapping of tag -> value, e.g. paper and table",
    "method": "method name",
    "base": "mapping of knob -> value shared by every trial",
    "rows": "list of {name, set} ablation rows",
    "seeds": "list of integer seeds",
    "grid": "mapping of knob -> list of values (grid search)",
    "sample": "mapping of knob -> {choice|uniform|loguniform: ...}",
    "num_samples": "samples drawn from the sampled axes",
    "metric": "metric to optimise",
    "mode": "'max' or 'min'",
    "scheduler": "optional {asha: {max_t, grace_period, reduction_factor, brackets}} or {pbt: {perturbation_interval, "
    "hyperparam_mutations, quantile_fraction, resample_probability}}",
    "resources": "{cpu: N, gpu: fraction}",
    "max_concurrent_trials": "trials run at once",
    "max_failures": "retries of a failing trial before it is marked failed",
    "keep_models": "which finished trials keep their best encoder: all (default), best_per_row, best or none",
    "log_models": "log every kept trial's encoder to MLflow, not only the best trial's (default false)",
    "symmetric": "two grid axes the method declares exchangeable: each unordered pair of their values runs once",
}
SAMPLERS = ("choice", "uniform", "loguniform")
# ASHA options a spec may set (Ray's ASHAScheduler arguments) and their smallest
# valid values; ASHA's time unit is an STS-B dev evaluation.
ASHA_OPTIONS = {"max_t": 1, "grace_period": 1, "reduction_factor": 1.01, "brackets": 1}
POINT = "point"  # the Tune grid axis over the trial points (index into SweepSpec.trial_points())
METRICS = ("best_dev_spearman", "dev_spearman", "test_avg_spearman", "loss")
SCHEDULER_METRIC = "best_dev_spearman"
"""The one metric every report carries (progress and final), as ASHA and PBT need."""
KEEP_MODELS = ("all", "best_per_row", "best", "none")
# PBT options a spec may set besides its mutations (Ray's PopulationBasedTraining arguments), with their
# valid ranges; PBT's time unit, like ASHA's, is an STS-B dev evaluation.
PBT_OPTIONS = {"perturbation_interval": (1, None), "quantile_fraction": (0.0, 0.5), "resample_probability": (0.0, 1.0)}


class SpecError(ValueError):
    """An invalid spec; ``problems`` holds every ``FILE: key.path: message``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid sweep spec:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class Row:
    name: str
    overrides: Mapping[str, Any]

    @property
    def method(self) -> str | None:
        return self.overrides.get("method")


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    name: str
    description: str
    tags: Mapping[str, str]
    method: str
    base: Mapping[str, Any]
    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    grid: Mapping[str, list]
    sample: Mapping[str, Mapping[str, Any]]
    num_samples: int
    metric: str
    mode: str
    scheduler: Mapping[str, Any] | None
    resources: Mapping[str, float]
    max_concurrent_trials: int
    max_failures: int
    keep_models: str
    log_models: bool
    budget: Budget | None
    spec_hash: str
    symmetric: tuple[str, str] | None = None

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def grid_points(self) -> Iterator[dict[str, Any]]:
        """Every point of the full grid (mirror cells of symmetric axes included)."""
        keys = list(self.grid)
        for values in itertools.product(*(self.grid[k] for k in keys)):
            yield dict(zip(keys, values))

    def is_mirror(self, axes: Mapping[str, Any]) -> bool:
        """Whether ``axes`` is the mirror of a grid point that runs: with symmetric axes (a, b),
        the point whose a-value comes later in the axis than its b-value."""
        if self.symmetric is None:
            return False
        first, second = self.symmetric
        values = self.grid[first]
        return values.index(axes[first]) > values.index(axes[second])

    def seed_free(self, row: Row) -> bool:
        """A row whose trials cannot depend on the seed (its method trains nothing): it runs once."""
        return row_method(self, row).seed_free

    def stands_for(self, row_name: str) -> tuple[int, ...]:
        """The seeds one trial of ``row_name`` stands for: all of them for a seed-free row."""
        return self.seeds if self.seed_free(self.row(row_name)) else ()

    def trial_points(self) -> list[TrialPoint]:
        """The trials that run, in the plan's order: each row x grid point x seed, with a seed-free row
        run with the first seed only and the mirror cells of symmetric axes left out."""
        points = []
        for row in self.rows:
            seeds = self.seeds[:1] if self.seed_free(row) else self.seeds
            for axes in self.grid_points():
                if not self.is_mirror(axes):
                    points.extend(TrialPoint(row.name, seed, axes) for seed in seeds)
        return points

    @property
    def trial_count(self) -> int:
        """Trials in the full grid: rows x seeds x grid points x samples."""
        points = len(list(self.grid_points()))
        return len(self.rows) * len(self.seeds) * points * self.num_samples

    def trial_params(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A Tune trial's config with ``row``, ``seed`` and the grid axes taken from the trial point its
        ``point`` index names (what the engine and the tracker read; safe however Tune resolved them)."""
        if POINT not in config:
            return dict(config)
        return {**config, **self.trial_points()[config[POINT]].params()}

    @property
    def trials_to_run(self) -> int:
        return len(self.trial_points()) * self.num_samples


@dataclass(frozen=True)
class TrialPoint:
    """One trial that runs: a row, a seed and a point of the grid axes (sampled axes are Tune's)."""

    row: str
    seed: int
    axes: Mapping[str, Any]

    def params(self) -> dict[str, Any]:
        """The trial's Tune config keys: ``row``, ``seed`` and one key per grid axis."""
        return {"row": self.row, "seed": self.seed, **self.axes}


def row_method(spec: SweepSpec, row: Row) -> Method:
    return get_method(row.method or spec.method)


def trial_config(spec: SweepSpec, row_name: str, seed: int, axes: Mapping[str, Any]) -> dict[str, Any]:
    """The full, validated config of one trial: knob defaults <- base <- row <- axes <- seed <- budget.

    A row may switch the method (a paper table mixes untuned baselines and
    trained methods); base knobs that method lacks do not apply to that row.
    """
    row = spec.row(row_name)
    method = row_method(spec, row)
    knobs = method.all_knobs
    overrides = {k: v for k, v in spec.base.items() if k in knobs}
    overrides.update({k: v for k, v in row.overrides.items() if k != "method"})
    overrides.update({k: v for k, v in axes.items() if k in knobs})
    overrides["seed"] = seed
    if spec.budget is not None:
        overrides = spec.budget.apply(overrides, knobs)
    return method.resolve(overrides)


def _hash(raw: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
        problems.add(key, f"expected one of {{choice: [...]}}, {{uniform: [lo, hi]}}, {{loguniform: [lo, hi]}}, got {axis!r}")
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
    if not isinstance(scheduler, Mapping) or len(scheduler) != 1 or next(iter(scheduler)) not in ("asha", "pbt"):
        problems.add("scheduler", f"expected {{asha: {{{', '.join(ASHA_OPTIONS)}}}}} or {{pbt: {{perturbation_interval, "
                                  f"hyperparam_mutations}}}}, got {scheduler!r}")
        return
    if "asha" in scheduler:
        _check_asha(problems, scheduler["asha"] or {})
    else:
        _check_pbt(problems, scheduler["pbt"], method, base)


def _check_asha(problems: _Problems, options: Any) -> None:
    if not isinstance(options, Mapping):
        problems.add("scheduler.asha", f"expected a mapping of {list(ASHA_OPTIONS)}, got {options!r}")
        return
    for key, value in options.items():
        if key not in ASHA_OPTIONS:
            problems.add(f"scheduler.asha.{key}", f"unknown option (expected one of {list(ASHA_OPTIONS)})")
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or value < ASHA_OPTIONS[key]:
            problems.add(f"scheduler.asha.{key}", f"expected a number >= {ASHA_OPTIONS[key]}, got {value!r}")
    max_t, grace = options.get("max_t", 100), options.get("grace_period", 1)
    if isinstance(max_t, (int, float)) and isinstance(grace, (int, float)) and grace > max_t:
        problems.add("scheduler.asha.grace_period", f"must be <= max_t ({max_t}), got {grace!r}")


def _check_pbt(problems: _Problems, options: Any, method: Method, base: Mapping[str, Any]) -> None:
    """PBT's options, and its mutations as knobs: known knobs of a trained method, values in their ranges,
    continuous ranges only for float knobs. Exploits restore checkpoints, so the interval (in evaluations)
    must be a multiple of ``checkpoint_every``."""
    key = "scheduler.pbt"
    if not isinstance(options, Mapping) or "perturbation_interval" not in options or "hyperparam_mutations" not in options:
        problems.add(key, f"expected {{perturbation_interval: N, hyperparam_mutations: {{knob: [values] or "
                          f"{{uniform|loguniform: [lo, hi]}}}}}}, got {options!r}")
        return
    for name, value in options.items():
        if name == "hyperparam_mutations":
            continue
        if name not in PBT_OPTIONS:
            problems.add(f"{key}.{name}", f"unknown option (expected one of {['hyperparam_mutations', *PBT_OPTIONS]})")
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
        problems.add(f"{key}.hyperparam_mutations", f"expected a non-empty mapping of knob -> values, got {mutations!r}")
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


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, also reading YAML 1.2 floats such as ``1e-4`` as numbers (YAML 1.1 wants
    ``1.0e-4``): learning rates are written that way. A key written twice in one mapping is refused
    (PyYAML would keep the last one silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """A mapping's own keys must be unique (keys merged in with ``<<`` may be overridden, as YAML allows)."""
    first_line: dict[str, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        line = key_node.start_mark.line + 1
        if key_node.value in first_line:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key_node.value!r} written twice (first on line {first_line[key_node.value]})",
                key_node.start_mark,
            )
        first_line[key_node.value] = line


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)$"),
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise SpecError([f"{path}: file not found (expected a sweep spec in YAML)"])
    try:
        return read_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise SpecError([f"{path}: {where}: not valid YAML: {getattr(error, 'problem', error)}"]) from None


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` from ``--set``; the value is read as YAML (numbers, bools, strings)."""
    if "=" not in text:
        raise SpecError([f"--set {text}: expected key=value"])
    key, value = text.split("=", 1)
    return key.strip(), read_yaml(value) if value.strip() else ""


def load_spec(
    path: str | Path,
    overrides: Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    seeds: list[int] | None = None,
    check_environment: bool = True,
) -> SweepSpec:
    """Read and validate a spec; ``overrides`` (from ``--set``) update its base,
    ``seeds`` (from ``--seeds``) replace its seeds. ``check_environment=False`` skips asking
    what this machine lacks (the hub, files): for counting trials only."""
    path = Path(path)
    raw = _read_yaml(path)
    if seeds is not None and isinstance(raw, dict):
        raw = {**raw, "seeds": list(seeds)}
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

    base = dict(raw.get("base") or {})
    overrides = dict(overrides or {})
    for where, values in (("base", base), ("--set", overrides)):
        if "method" in values:
            problems.add(f"{where}.method", "the method is set by the top-level 'method' key")
            values.pop("method")
    _check_knob_values(problems, "base", base, method)
    for knob_name, message in method.all_knobs.problems(overrides):
        problems.items.append(f"--set {knob_name}={overrides[knob_name]}: {message} (method {method.name!r})")
    base.update(overrides)

    rows = _parse_rows(problems, raw.get("rows"), method)
    seeds = raw.get("seeds", [method.all_knobs["seed"].default])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        problems.add("seeds", f"expected a non-empty list of non-negative integers, got {seeds!r}")
        seeds = [0]
    elif len(set(seeds)) != len(seeds):
        problems.add("seeds", f"seeds repeat: {seeds}")

    grid = raw.get("grid") or {}
    sample = raw.get("sample") or {}
    for axis_name, axes in (("grid", grid), ("sample", sample)):
        if not isinstance(axes, Mapping):
            problems.add(axis_name, f"expected a mapping of knob -> values, got {axes!r}")
    grid = grid if isinstance(grid, Mapping) else {}
    sample = sample if isinstance(sample, Mapping) else {}
    knobs = method.all_knobs
    for knob_name, values in grid.items():
        key = f"grid.{knob_name}"
        if knob_name in ("seed", "method"):
            problems.add(key, "use the top-level 'seeds' key" if knob_name == "seed" else "use rows to change the method")
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
    symmetric = _check_symmetric(problems, raw.get("symmetric"), grid, [method, *(get_method(r.method) for r in rows if r.method)])

    num_samples = raw.get("num_samples", 1)
    if not isinstance(num_samples, int) or num_samples < 1:
        problems.add("num_samples", f"expected an integer >= 1, got {num_samples!r}")
        num_samples = 1
    metric = raw.get("metric", "best_dev_spearman")
    if metric not in METRICS and not str(metric).startswith("test_"):
        problems.add("metric", f"expected one of {list(METRICS)} or a test_* metric, got {metric!r}")
    mode = raw.get("mode", "max")
    if mode not in ("max", "min"):
        problems.add("mode", f"expected 'max' or 'min', got {mode!r}")
    scheduler = raw.get("scheduler")
    if scheduler is not None:
        _check_scheduler(problems, scheduler, method, base)
        if metric != SCHEDULER_METRIC:
            problems.add("metric", f"a scheduler compares trials at every evaluation, where only {SCHEDULER_METRIC!r} "
                                   f"is reported in every result; got {metric!r}")
    resources = {"cpu": 1, "gpu": 0, **(raw.get("resources") or {})}
    for key, value in resources.items():
        if key not in ("cpu", "gpu") or not isinstance(value, (int, float)) or value < 0:
            problems.add(f"resources.{key}", f"expected cpu or gpu with a non-negative number, got {value!r}")
    concurrency = raw.get("max_concurrent_trials", 2)
    if not isinstance(concurrency, int) or concurrency < 1:
        problems.add("max_concurrent_trials", f"expected an integer >= 1, got {concurrency!r}")
    failures = raw.get("max_failures", 1)
    if not isinstance(failures, int) or failures < 0:
        problems.add("max_failures", f"expected an integer >= 0, got {failures!r}")
    keep_models = raw.get("keep_models", "all")
    if keep_models not in KEEP_MODELS:
        problems.add("keep_models", f"expected one of {list(KEEP_MODELS)}, got {keep_models!r}")
    log_models = raw.get("log_models", False)
    if not isinstance(log_models, bool):
        problems.add("log_models", f"expected true or false, got {log_models!r}")
    tags = raw.get("tags") or {}
    if not isinstance(tags, Mapping):
        problems.add("tags", f"expected a mapping, got {tags!r}")
        tags = {}
    if problems.items:
        raise SpecError(problems.items)

    spec = SweepSpec(
        path=path.resolve(),
        name=name,
        description=str(raw.get("description", "")),
        tags={str(k): str(v) for k, v in tags.items()},
        method=method_name,
        base=base,
        rows=rows,
        seeds=tuple(budget.seeds(seeds) if budget else seeds),
        grid={k: list(v) for k, v in grid.items()},
        sample=dict(sample),
        num_samples=budget.num_samples(num_samples) if budget else num_samples,
        metric=metric,
        mode=mode,
        scheduler=scheduler,
        resources=resources,
        max_concurrent_trials=concurrency,
        max_failures=failures,
        keep_models=keep_models,
        log_models=log_models,
        budget=budget,
        spec_hash=_hash({"spec": raw, "overrides": overrides, "budget": budget.name if budget else None}),
        symmetric=symmetric,
    )
    if check_environment:
        _check_environment(spec, overrides)
    return spec


def _check_symmetric(problems: _Problems, symmetric: Any, grid: Mapping[str, Any], methods: list[Method]) -> tuple[str, str] | None:
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


def _parse_rows(problems: _Problems, rows: Any, method: Method) -> tuple[Row, ...]:
    if rows is None:
        return (Row("", {}),)
    if not isinstance(rows, list) or not rows:
        problems.add("rows", f"expected a non-empty list of {{name, set}}, got {rows!r}")
        return ()
    parsed, seen = [], set()
    for index, row in enumerate(rows):
        key = f"rows[{index}]"
        if not isinstance(row, Mapping) or not isinstance(row.get("name"), str) or set(row) - {"name", "set"}:
            problems.add(key, f"expected {{name: str, set: {{knob: value}}}}, got {row!r}")
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
        _check_knob_values(problems, f"{key}.set", {k: v for k, v in overrides.items() if k != "method"}, get_method(row_method_name))
        parsed.append(Row(name, overrides))
    return tuple(parsed)


def _check_environment(spec: SweepSpec, overrides: Mapping[str, Any]) -> None:
    """Resolve every row x grid point once (seeds and samples cannot change validity
    beyond their checked ranges) and ask each method what this machine lacks.

    Each problem is reported once (:func:`attribute`)."""
    rows_with: dict[str, list[str]] = {}
    for row in spec.rows:
        for axes in spec.grid_points():
            try:
                config = trial_config(spec, row.name, spec.seeds[0], axes)
                found = row_method(spec, row).environment_problems(config)
            except ConfigError as error:
                found = error.problems
            for problem in found:
                rows = rows_with.setdefault(problem, [])
                if row.name not in rows:
                    rows.append(row.name)
    problems = attribute(spec, rows_with, overrides)
    if problems:
        raise SpecError(problems)


def attribute(spec: SweepSpec, rows_with: Mapping[str, list[str]], overrides: Mapping[str, Any]) -> list[str]:
    """Messages (``knob: text``) -> the rows they hold for, each said once: against ``--set`` when the
    knob's value came from there, as "every row" when all rows share it, else naming its rows."""
    said = []
    for message, rows in rows_with.items():
        knob = message.split(":", 1)[0]
        if knob in overrides and not any(knob in spec.row(name).overrides for name in rows):
            said.append(f"--set {knob}={overrides[knob]}: {message.split(':', 1)[1].strip()}")
        elif len(spec.rows) > 1 and len(rows) == len(spec.rows):
            said.append(f"{spec.path}: every row: {message}")
        elif rows == [""]:  # a spec without rows
            said.append(f"{spec.path}: {message}")
        else:
            said.append(f"{spec.path}: rows[{', '.join(map(repr, rows))}]: {message}")
    return said
