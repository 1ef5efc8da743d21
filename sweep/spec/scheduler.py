"""The ``scheduler`` section: ASHA, PBT or BOHB's HyperBand with Ray's arguments, checked where it is read.

Each scheduler's time unit is an STS-B dev evaluation (Ray's ``training_iteration``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, get_args

from sweep.spec.problems import Problems, check_knob_values, check_sample
from trainers.method import Method
from trainers.metrics import Metric

ASHA_OPTIONS = {"max_t": 1, "grace_period": 1, "reduction_factor": 1.01, "brackets": 1}
"""ASHA options a spec may set (Ray's ASHAScheduler arguments) and their smallest valid values."""
PBT_OPTIONS = {"perturbation_interval": (1, None), "quantile_fraction": (0.0, 0.5), "resample_probability": (0.0, 1.0)}
"""PBT options a spec may set besides its mutations (Ray's PopulationBasedTraining arguments): numbers with their
valid ranges."""
PBT_FLAGS = ("synch",)
"""PBT's flags: ``synch`` makes every trial wait at each perturbation point for the others, so exploits do not
depend on timing."""
HYPERBAND_FOR_BOHB_OPTIONS = {"max_t": 1, "reduction_factor": 1.01}
"""HyperBandForBOHB options a spec may set (Ray's arguments) and their smallest valid values."""
SchedulerKind = Literal["asha", "pbt", "hyperband_for_bohb"]


@dataclass(frozen=True)
class Scheduler:
    """The spec's trial scheduler: which one, Ray's arguments for it, and PBT's mutations (knob -> values or
    ``{uniform|loguniform: [lo, hi]}``; empty for the others)."""

    kind: SchedulerKind
    options: Mapping[str, Any]
    mutations: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pauses_trials(self) -> bool:
        """Whether Ray pauses trials at reports and resumes them later from a report's checkpoint: PBT (at its
        perturbation points) and HyperBand (at its rungs) do, ASHA only stops them."""
        return self.kind != "asha"

    @classmethod
    def parse(cls, raw: Any, problems: Problems, method: Method, base: Mapping[str, Any],
              metric: Any) -> Scheduler | None:
        """``scheduler`` (``raw``, None when the spec has none) for ``method`` with the spec's ``base`` knobs; a
        scheduler compares trials at every evaluation, so it needs the metric every result reports."""
        if raw is None:
            return None
        scheduler = _parse_kind(raw, problems, method, base)
        if metric != Metric.BEST_DEV:
            problems.add("metric", f"a scheduler compares trials at every evaluation, where only "
                                   f"{Metric.BEST_DEV!r} is reported in every result; got {metric!r}")
        return scheduler


def _parse_kind(raw: Any, problems: Problems, method: Method, base: Mapping[str, Any]) -> Scheduler | None:
    if not isinstance(raw, Mapping) or len(raw) != 1 or next(iter(raw)) not in get_args(SchedulerKind):
        problems.add("scheduler", f"expected {{asha: {{{', '.join(ASHA_OPTIONS)}}}}}, "
                                  "{pbt: {perturbation_interval, hyperparam_mutations}} or "
                                  f"{{hyperband_for_bohb: {{{', '.join(HYPERBAND_FOR_BOHB_OPTIONS)}}}}}, "
                                  f"got {raw!r}")
        return None
    if "asha" in raw:
        options = raw["asha"] or {}
        _check_asha(problems, options)
        return Scheduler("asha", dict(options)) if isinstance(options, Mapping) else None
    if "hyperband_for_bohb" in raw:
        options = raw["hyperband_for_bohb"] or {}
        _check_numbers(problems, "scheduler.hyperband_for_bohb", options, HYPERBAND_FOR_BOHB_OPTIONS)
        return Scheduler("hyperband_for_bohb", dict(options)) if isinstance(options, Mapping) else None
    options = raw["pbt"]
    if not _check_pbt(problems, options, method, base):
        return None
    return Scheduler("pbt", {k: v for k, v in options.items() if k != "hyperparam_mutations"},
                     dict(options["hyperparam_mutations"]))


def _check_asha(problems: Problems, options: Any) -> None:
    _check_numbers(problems, "scheduler.asha", options, ASHA_OPTIONS)
    if not isinstance(options, Mapping):
        return
    max_t, grace = options.get("max_t", 100), options.get("grace_period", 1)
    if isinstance(max_t, (int, float)) and isinstance(grace, (int, float)) and grace > max_t:
        problems.add("scheduler.asha.grace_period", f"must be <= max_t ({max_t}), got {grace!r}")


def _check_numbers(problems: Problems, key: str, options: Any, smallest: Mapping[str, float]) -> None:
    """A scheduler's numeric options: known names, each at least its smallest valid value."""
    if not isinstance(options, Mapping):
        problems.add(key, f"expected a mapping of {list(smallest)}, got {options!r}")
        return
    for name, value in options.items():
        if name not in smallest:
            problems.add(f"{key}.{name}", f"unknown option (expected one of {list(smallest)})")
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or value < smallest[name]:
            problems.add(f"{key}.{name}", f"expected a number >= {smallest[name]}, got {value!r}")


def _check_pbt(problems: Problems, options: Any, method: Method, base: Mapping[str, Any]) -> bool:
    """PBT's options, and its mutations as knobs: known knobs of a trained method, values in their ranges,
    continuous ranges only for float knobs. Exploits restore checkpoints, so the interval (in evaluations)
    must be a multiple of ``checkpoint_every``. Whether its shape holds (a mapping with both keys)."""
    key = "scheduler.pbt"
    if (not isinstance(options, Mapping) or "perturbation_interval" not in options
            or "hyperparam_mutations" not in options):
        problems.add(key, f"expected {{perturbation_interval: N, hyperparam_mutations: {{knob: [values] or "
                          f"{{uniform|loguniform: [lo, hi]}}}}}}, got {options!r}")
        return False
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
        return False
    knobs = method.all_knobs
    mutations = options["hyperparam_mutations"]
    if not isinstance(mutations, Mapping) or not mutations:
        problems.add(f"{key}.hyperparam_mutations",
                     f"expected a non-empty mapping of knob -> values, got {mutations!r}")
        return False
    for name, values in mutations.items():
        where = f"{key}.hyperparam_mutations.{name}"
        if name not in knobs or name in ("seed", "method"):
            check_knob_values(problems, f"{key}.hyperparam_mutations", {name: None}, method)
        elif isinstance(values, list):
            if not values:
                problems.add(where, "expected a non-empty list of values")
            for value in values:
                if message := knobs[name].problem(value):
                    problems.add(where, message)
        elif knobs[name].kind is not float:
            problems.add(where, f"a {knobs[name].kind.__name__} knob takes a list of values, got {values!r}")
        else:
            check_sample(problems, where, values, knobs[name])
    interval, every = options["perturbation_interval"], base.get("checkpoint_every", knobs["checkpoint_every"].default)
    if isinstance(interval, int) and isinstance(every, int) and (every == 0 or interval % every):
        problems.add(f"{key}.perturbation_interval", f"must be a multiple of checkpoint_every ({every}): an exploit "
                                                     "restores the other trial's checkpoint")
    return True
