"""Sweep specs: YAML under ``search_spaces/`` -> a validated :class:`SweepSpec`.

A spec names a method and its base config, named ablation rows (each a set of
knob overrides, named as the paper's table names them), seeds, grid and
sampled axes, the metric, an optional ASHA or PBT scheduler, resources, and
tags. :func:`load_spec` reads the YAML (:mod:`sweep.spec.source`), parses it
(:meth:`SweepSpec.parse`: each section by its own class, rows and reference,
seeds, search, scheduler, resources; the plain keys by :mod:`sweep.spec.validation`),
resolves the config of every trial that runs, and asks what this machine lacks
(:mod:`sweep.spec.environment`); every problem is reported at once as
``FILE: key.path: message``.

:func:`trial_config` is the one place where base, row, axes and seed become a
trial's config. :func:`load_spec` calls it once per trial (:attr:`SweepSpec.trials`);
the planner, the Ray trainable and the MLflow tracker read those configs
(:meth:`SweepSpec.config_of`). Only a trial whose config Tune chose in part
(sampled axes, a PBT mutation) is resolved again, with Tune's values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from sweep.spec.budget import Budget
from sweep.spec.contracts import Difference, contract_problems, differences, exempt, follows_problems, tuned_knobs
from sweep.spec.environment import attribute, environment_problems, holds_for
from sweep.spec.problems import Problems, SpecError
from sweep.spec.resources import Resources
from sweep.spec.rows import Reference, Row
from sweep.spec.scheduler import Scheduler
from sweep.spec.search import Search
from sweep.spec.seeds import SeedRounds, Seeds
from sweep.spec.source import read_spec_yaml
from sweep.spec.validation import (
    DEFAULTS,
    check_count,
    check_method,
    check_metric,
    check_models,
    parse_axes,
    parse_base,
    parse_suites,
    parse_symmetric,
    parse_tags,
)
from trainers.data.glue_tasks import GLUE_KNOBS
from trainers.knobs import ConfigError, Problem
from trainers.method import Method, TrialConfig
from trainers.metrics import SuiteName
from trainers.registry import get_method

POINT = "point"  # the Tune grid axis over the trials (index into SweepSpec.trials)


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
    scheduler: Scheduler | None
    resources: Resources
    max_concurrent_trials: int
    max_failures: int
    keep_models: str
    log_models: bool
    budget: Budget | None
    spec_hash: str
    symmetric: tuple[str, str] | None = None
    evaluations: tuple[Mapping[str, Any], ...] = ()
    """The suites each trial's best state is evaluated on (``{"suite": name, **options}``, STS first)."""
    glue: Mapping[str, Any] | None = None
    """GLUE fine-tuning's knobs and tasks (the ``glue`` key; ``python -m sweep glue`` runs such a spec)."""
    trials: tuple[Trial, ...] = ()
    """Each trial that runs, with its config resolved once (:func:`load_spec`)."""
    reference: Reference | None = None
    """The row the other rows are measured against; their ``changes`` are checked when the spec loads."""
    reference_differences: Mapping[str, Mapping[str, Difference]] = dataclasses.field(default_factory=dict)
    """Each row but the reference -> the knobs in which it differs from the reference (reference -> row)."""
    search: Search | None = None
    """The searcher of the sampled axes (:mod:`sweep.run.searchers`), or None: Tune's random draws. With one,
    ``num_samples`` is its ``trials`` and each suggestion runs every trial of :attr:`trials`."""
    set_by_option: frozenset[str] = frozenset()
    """The knobs ``--set`` set: a ``--set model=`` takes that model's tuned settings where its method has them
    (:func:`trial_config`), except for these."""
    seed_rounds: SeedRounds | None = None
    """Adaptive seeds, or None: every seed runs. With them :attr:`seeds` holds every seed that may run (first,
    then more) and :attr:`trials` every trial that may run; the rounds pick among them as results come."""

    @classmethod
    def parse(cls, path: Path, raw: Any, overrides: Mapping[str, Any], budget: Budget | None) -> SweepSpec:
        """The spec read from ``path`` (``raw``) with ``--set``'s ``overrides`` and the ``budget``, each section
        parsed by its own class; every problem of every key is raised at once (:class:`SpecError`). Its
        :attr:`trials` are resolved by :func:`load_spec`."""
        problems = Problems(path)
        method = check_method(problems, raw)
        base = parse_base(problems, dict(raw.get("base") or {}), dict(overrides), method)
        rows = Row.parse_all(raw.get("rows"), problems, method)
        reference = Reference.parse(raw.get("reference"), problems, rows, path)
        seeds = Seeds.parse(raw, problems, DEFAULTS["seeds"], rows, reference)
        grid, sample = parse_axes(problems, raw.get("grid") or {}, raw.get("sample") or {}, method)
        symmetric = parse_symmetric(problems, raw.get("symmetric"), grid,
                                    [method, *(get_method(row.method) for row in rows if row.method)])
        search = Search.parse(raw, problems, sample, grid, rows)
        num_samples = check_count(problems, "num_samples",
                                  search.trials if search else raw.get("num_samples", DEFAULTS["num_samples"]), 1)
        metric, mode = raw.get("metric", DEFAULTS["metric"]), raw.get("mode", DEFAULTS["mode"])
        check_metric(problems, metric, mode)
        scheduler = Scheduler.parse(raw.get("scheduler"), problems, method, base, metric)
        resources = Resources.parse(raw.get("resources"), problems, DEFAULTS["resources"])
        concurrency = check_count(problems, "max_concurrent_trials",
                                  raw.get("max_concurrent_trials", DEFAULTS["max_concurrent_trials"]), 1)
        failures = check_count(problems, "max_failures", raw.get("max_failures", DEFAULTS["max_failures"]), 0)
        keep_models, log_models = (raw.get("keep_models", DEFAULTS["keep_models"]),
                                   raw.get("log_models", DEFAULTS["log_models"]))
        check_models(problems, keep_models, log_models)
        evaluations, glue = parse_suites(problems, raw)
        tags = parse_tags(problems, raw.get("tags") or {})
        problems.raise_any()
        seeds = seeds.within(budget)
        return cls(
            path=path.resolve(), name=raw["name"], description=str(raw.get("description", "")), tags=tags,
            method=method.name, base=base, rows=rows, seeds=seeds.all, grid={k: list(v) for k, v in grid.items()},
            sample=dict(sample), num_samples=budget.num_samples(num_samples) if budget else num_samples,
            metric=metric, mode=mode, scheduler=scheduler, resources=resources, max_concurrent_trials=concurrency,
            max_failures=failures, keep_models=keep_models, log_models=log_models, budget=budget,
            spec_hash=_hash({"spec": raw, "overrides": overrides, "budget": budget.name if budget else None}),
            symmetric=symmetric, evaluations=evaluations,
            glue=budget.apply(glue, GLUE_KNOBS) if budget and glue is not None else glue, reference=reference,
            search=search, set_by_option=frozenset(overrides), seed_rounds=seeds.rounds)

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

    def row_config(self, row_name: str) -> TrialConfig:
        """The config of ``row_name`` as its contract compares it: that of its first trial (first seed, first
        grid point), resolved at load like every other."""
        return next(trial.config for trial in self.trials if trial.point.row == row_name)

    def method_of(self, row_name: str) -> Method:
        """The method of a row (a row may switch the spec's method)."""
        return row_method(self, self.row(row_name))

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

    def distinct_trials(self) -> list[Trial]:
        """The first trial of each row and grid point: the others differ from it only in their seed, which
        changes neither what a machine lacks nor how long a trial trains."""
        first: dict[tuple[str, str], Trial] = {}
        for trial in self.trials:
            first.setdefault((trial.point.row, repr(sorted(trial.point.axes.items()))), trial)
        return list(first.values())

    def trial_params(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A Tune trial's config with ``row``, ``seed`` and the grid axes taken from the trial point its
        ``point`` index names (what the engine and the tracker read; safe however Tune resolved them)."""
        if POINT not in config:
            return dict(config)
        return {**config, **self.trials[config[POINT]].point.params()}

    @property
    def trials_known(self) -> bool:
        """Whether the trials are known before they run: no sampled axes, no PBT (which changes them as they run)."""
        return not self.sample and (self.scheduler is None or self.scheduler.kind != "pbt")

    def tune_chosen(self) -> tuple[str, ...]:
        """Knobs whose values Tune chooses for a trial: sampled axes and PBT's mutations."""
        return (*self.sample, *(self.scheduler.mutations if self.scheduler else {}))

    def config_of(self, params: Mapping[str, Any]) -> TrialConfig:
        """The resolved config of the trial whose Tune config is ``params``: its point's config from
        :attr:`trials`, resolved again only where Tune chose knob values (sampled axes, PBT mutations)."""
        trial = self.trials[params[POINT]]
        chosen = {k: params[k] for k in self.tune_chosen() if k in params and params[k] != trial.config.get(k)}
        if not chosen:
            return trial.config
        return trial_config(self, trial.point.row, trial.point.seed, {**trial.point.axes, **chosen})

    @property
    def trials_to_run(self) -> int:
        """The trials that run: with adaptive seeds, those of the first seeds (more may follow, up to
        :attr:`trials`)."""
        if self.seed_rounds is not None:
            return sum(1 for trial in self.trials if trial.point.seed in self.seed_rounds.first)
        return len(self.trials) * self.num_samples


@dataclass(frozen=True)
class TrialPoint:
    """One trial that runs: a row, a seed and a point of the grid axes (sampled axes are Tune's)."""

    row: str
    seed: int
    axes: Mapping[str, Any]

    def params(self) -> dict[str, Any]:
        """The trial's Tune config keys: ``row``, ``seed`` and one key per grid axis."""
        return {"row": self.row, "seed": self.seed, **self.axes}


@dataclass(frozen=True)
class Trial:
    """A trial that runs and its resolved config (without the values Tune samples for it)."""

    point: TrialPoint
    config: TrialConfig


def row_method(spec: SweepSpec, row: Row) -> Method:
    return get_method(row.method or spec.method)


def trial_config(spec: SweepSpec, row_name: str, seed: int, axes: Mapping[str, Any]) -> TrialConfig:
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
    overrides.update(model_settings(spec, row, method, overrides))
    overrides["seed"] = seed
    if spec.budget is not None:
        overrides = spec.budget.apply(overrides, knobs)
    return TrialConfig({**method.resolve(overrides), SuiteName.KEY: [dict(suite) for suite in spec.evaluations]})


def model_settings(spec: SweepSpec, row: Row, method: Method, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What a row's model brings to a row whose method tunes knobs per model (SCT Table 1, SimCSE Table A.1,
    DCLR's run.sh): that model's values of the knobs nobody set (:func:`set_knobs`). ``--set model=M`` with an M
    that has no such values is refused, naming every model's, unless ``--set`` sets them all (the spec's base
    values were tuned for its own model)."""
    if method.settings_by_model is None:
        return {}
    settings, tuned, every = method.settings_by_model(overrides)
    if settings is None:
        missing = [knob for knob in tuned if knob not in spec.set_by_option]
        if "model" in spec.set_by_option and every and missing:
            raise ConfigError([Problem("model", f"{overrides['model']!r} has no tuned settings for {method.name} "
                                                f"here: --set {', '.join(missing)} too ({every})")])
        return {}
    own = set_knobs(spec, row)
    return {knob: value for knob, value in settings.items() if knob not in own}


def set_knobs(spec: SweepSpec, row: Row) -> set[str]:
    """The knobs a row's own values hold against its model's tuned settings: those ``--set``, the row or an axis
    sets, and the base's too unless ``--set model`` replaced the model they were chosen for."""
    own = set(spec.set_by_option) | set(row.overrides) | set(spec.grid) | set(spec.sample)
    return own if "model" in spec.set_by_option else own | set(spec.base)


def _hash(raw: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_spec(
    path: str | Path,
    overrides: Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    seeds: list[int] | None = None,
    check_environment: bool = True,
    address: str | None = None,
    check_contracts: bool = True,
) -> SweepSpec:
    """Read and validate a spec, and resolve the config of each trial it runs; ``overrides`` (from
    ``--set``) update its base, ``seeds`` (from ``--seeds``) replace its seeds.
    ``check_environment=False`` skips asking what this machine lacks (the hub, files): for reading a
    spec's layout (reports) only. ``address`` (``--address``) names the Ray cluster the sweep joins, whose
    GPUs are not this machine's. ``check_contracts=False`` skips comparing the rows with the reference row
    (:func:`_reference_differences`), for reading a spec as another spec's reference."""
    path = Path(path)
    raw = read_spec_yaml(path)
    if seeds is not None and isinstance(raw, dict):
        raw = {**raw, "seeds": list(seeds)}
    overrides = dict(overrides or {})
    spec = SweepSpec.parse(path, raw, overrides, budget)
    spec = dataclasses.replace(spec, trials=_resolve_trials(spec, overrides))
    if check_contracts and spec.reference is not None:
        reference, found = _reference_differences(spec, overrides)
        spec = dataclasses.replace(spec, reference=reference, reference_differences=found)
    if check_environment:
        problems = environment_problems(spec, overrides, address)
        if problems:
            raise SpecError(problems)
    return spec


def _reference_differences(spec: SweepSpec,
                           overrides: Mapping[str, Any]) -> tuple[Reference, dict[str, dict[str, Difference]]]:
    """The reference row, and each row's differences from it, checked against the row's ``changes``: a row that
    breaks its contract is refused (``FILE: rows[i].changes: ...``). A reference of another spec is read with the
    same ``--set`` overrides, so that they change both sides alike, and is what that spec's own reference stands
    in for when it is that row."""
    reference = spec.reference
    source = spec
    if reference.spec is not None:
        try:
            source = load_spec(reference.spec, overrides, check_environment=False, check_contracts=False)
        except SpecError as error:
            raise SpecError([f"{spec.path}: reference: {reference.spec} cannot be read: "
                             f"{'; '.join(error.problems)}"]) from None
        if reference.row not in [row.name for row in source.rows]:
            raise SpecError([f"{spec.path}: reference: {reference.row!r} is not a row of {reference.spec} "
                             f"(rows: {[row.name for row in source.rows]})"])
        if source.reference and source.reference.row == reference.row and not reference.stands_in_for:
            reference = dataclasses.replace(reference, stands_in_for=source.reference.stands_in_for,
                                            is_the_papers_with=source.reference.is_the_papers_with)
    reference_config, reference_method = source.row_config(reference.row), source.method_of(reference.row)
    papers = reference.is_the_papers_with
    if papers and all(reference_config.get(knob) == value for knob, value in papers.items()):
        reference = dataclasses.replace(reference, stands_in_for=None)  # it is the paper's reference now
    found, problems = {}, []
    for index, row in enumerate(spec.rows):
        if row.changes is None:
            continue
        method, config = spec.method_of(row.name), spec.row_config(row.name)
        found[row.name] = {knob: difference for knob, difference in
                           differences(reference_config, reference_method, config, method).items()
                           if knob not in spec.grid}  # the grid's axes, not the row, set those
        problems += [f"{spec.path}: rows[{index}].changes: {problem}" for problem in contract_problems(
            row.name, reference.row, row.changes, row.follows_method, found[row.name],
            exempt(method, reference_method), set_on_both=frozenset(overrides) | tuned_knobs(method, config))]
        problems += [f"{spec.path}: rows[{index}].follows_method: {problem}"
                     for problem in follows_problems(row.name, row.follows_method, config, method)]
    if problems:
        raise SpecError(problems)
    return reference, found


def _resolve_trials(spec: SweepSpec, overrides: Mapping[str, Any]) -> tuple[Trial, ...]:
    """Each trial point with its config, resolved here once; problems that only a whole config shows
    are reported like the environment's (:func:`~sweep.spec.environment.attribute`)."""
    trials, rows_with = [], {}
    for point in spec.trial_points():
        try:
            trials.append(Trial(point, trial_config(spec, point.row, point.seed, point.axes)))
        except ConfigError as error:
            for problem in error.problems:
                holds_for(rows_with, problem, point.row)
    if rows_with:
        raise SpecError(attribute(spec, rows_with, overrides))
    return tuple(trials)
