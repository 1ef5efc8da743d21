"""Which axes of a sweep move its metric beyond seed noise: an ANOVA with seeds as replicates, and
fANOVA or PED-ANOVA (Optuna's evaluators) on the seed means of sampled axes.

Frames in, tables out; nothing here reads MLflow. :func:`replicates` turns a trials frame
(:mod:`results.reader`) into one value per point and seed: the factors are the rows of an ablation
(``row``), the grid axes and the sampled axes that take more than one value. The seeds of one point are
its replicates, so the mean square between them is the seed noise that every effect is tested against
(:func:`seed_anova`). Sampled axes take a new value in every trial, so they are not factors of an ANOVA:
:func:`sampled_importance` fits Optuna's evaluator on the seed means of the points and puts the share of
the variance left between seeds of one point beside it.

Sums of squares are statsmodels' type II (each effect after every effect that does not contain it): on
a balanced design (every point has the same seeds) they are the textbook decomposition and add up to the
total; on an unbalanced one they need not. With a point missing altogether, interactions cannot be
estimated and only the main effects are fitted. With one seed per point there is no replicate: the sums
of squares are shown, but the seed noise, and so every F test, cannot be estimated.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import pandas as pd

from results.lines import is_seed_free, latest_finished
from results.significance import ALPHA, is_significant, p_text

VALUE, SEED, POINT = "value", "seed", "point"
ROW = "row"
SEED_NOISE = "seeds (within point)"
BETWEEN_POINTS = "between points"
INTERACTION = " x "
EVALUATORS = ("fanova", "ped-anova")
NO_REPLICATE = "one seed per point: the seed noise cannot be estimated, so no effect has an F test"


class ImportanceError(ValueError):
    """A sweep whose importance cannot be computed (nothing varies, no finished trial, a missing library)."""


@dataclass(frozen=True)
class Effect:
    """One line of an importance table: an axis, an interaction of axes, or the seed noise.

    ``share`` is the effect's part of the metric's variance: its sum of squares over the total (ANOVA),
    or Optuna's importance (sampled axes). ``f`` and ``p`` test it against the seed noise (NaN where
    there is no test)."""

    name: str
    share: float
    df: float = math.nan
    sum_sq: float = math.nan
    f: float = math.nan
    p: float = math.nan


@dataclass(frozen=True)
class Importance:
    """The effects of one sweep variant on one metric, how they were computed, and what to know."""

    metric: str
    method: str
    points: int
    values: int
    effects: tuple[Effect, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------- trials -> one value per point and seed


def point_factors(trials: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(factors of the ANOVA, sampled axes) that take more than one value among ``trials``: the row, then
    the grid axes, then the sampled axes, each in order of first appearance."""
    def varying(points: pd.Series) -> list[str]:
        frame = pd.DataFrame.from_records(list(points), index=points.index)
        return [axis for axis in frame.columns if frame[axis].astype(str).nunique() > 1]

    rows = [ROW] if trials[ROW].nunique() > 1 else []
    return rows + varying(trials["grid_point"]), varying(trials["sampled_point"])


def replicates(trials: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, list[str], list[str], list[str]]:
    """(frame, factors, sampled axes, notes): the latest finished run of each point and seed, one line
    each, with the factors' and sampled axes' values, ``point`` (the line's label), ``seed`` and ``value``
    (the metric). Seed-free runs are left out: one run stands for every seed, so it has no seed noise to
    add and would make the seed noise look smaller than it is."""
    if metric not in trials.columns:
        raise ImportanceError(f"metric {metric!r} is not recorded by these trials")
    finished = latest_finished(trials, [ROW, "axes"])
    seed_free = finished.groupby([ROW, "axes"]).filter(is_seed_free)
    notes = []
    if len(seed_free):
        lines = sorted(set(seed_free[ROW]))
        notes.append(f"left out: seed-free lines {', '.join(lines)} (one run stands for every seed: no seed noise)")
    scored = finished.drop(index=seed_free.index).dropna(subset=[metric])
    if scored.empty:
        raise ImportanceError(f"no finished trial with {metric} that has seeds of its own")
    factors, sampled = point_factors(scored)
    frame = pd.DataFrame.from_records([{**dict(grid), **dict(drawn)} for grid, drawn in
                                       zip(scored["grid_point"], scored["sampled_point"])], index=scored.index)
    frame = frame.reindex(columns=[axis for axis in factors + sampled if axis != ROW])
    frame.insert(0, ROW, scored[ROW])
    frame[POINT] = [f"{row} [{axes}]" if axes else str(row) for row, axes in zip(scored[ROW], scored["axes"])]
    frame[SEED] = scored[SEED].astype(int)
    frame[VALUE] = scored[metric].astype(float)
    return frame.reset_index(drop=True), factors, sampled, notes


# ---------------------------------------------------------------- the ANOVA with seeds as replicates


def _formula_terms(factors: Sequence[str], interactions: bool) -> str:
    """A patsy right-hand side over columns ``f0``, ``f1``, ... (factor names may not be identifiers);
    sum-to-zero contrasts, so type II sums of squares are the usual ones."""
    terms = [f"C(f{i}, Sum)" for i in range(len(factors))]
    return (" * " if interactions else " + ").join(terms)


def _effect_name(term: str, factors: Sequence[str]) -> str:
    """``C(f0, Sum):C(f1, Sum)`` -> ``row x learning_rate``."""
    return INTERACTION.join(factors[int(part[3:part.index(",")])] for part in term.split(":"))


def seed_anova(frame: pd.DataFrame, factors: Sequence[str]) -> tuple[list[Effect], list[str]]:
    """The effects of ``factors`` (columns of ``frame``, any values, taken as categories) and of their
    interactions on ``frame[VALUE]``, each tested against the seed noise: the mean square between the
    seeds of one point (its replicates). Last, the seed noise itself. Shares are of the total sum of
    squares around the grand mean."""
    if not factors:
        raise ImportanceError("nothing varies: every trial is at the same point (one row, no grid axis)")
    try:
        import statsmodels.formula.api as smf
        from statsmodels.stats.anova import anova_lm
    except ImportError:
        raise ImportanceError("the ANOVA needs statsmodels: pip install statsmodels") from None
    data = pd.DataFrame({f"f{i}": frame[name].astype(str) for i, name in enumerate(factors)})
    data[VALUE] = frame[VALUE].to_numpy(dtype=float)
    counts = data.groupby([f"f{i}" for i in range(len(factors))]).size()
    cells = math.prod(data[f"f{i}"].nunique() for i in range(len(factors)))
    notes = []
    complete = len(counts) == cells
    if not complete:
        notes.append(f"{cells - len(counts)} of {cells} combinations of {', '.join(factors)} have no finished seed: "
                     "interactions cannot be estimated, only the main effects are fitted")
    replicated = bool((counts > 1).any())
    if counts.nunique() > 1 or not complete:
        notes.append("unbalanced (points have different numbers of seeds): type II sums of squares, "
                     "which need not add up to the total")
    model = smf.ols(f"{VALUE} ~ {_formula_terms(factors, complete)}", data).fit()
    with warnings.catch_warnings():  # no replicate: zero residual degrees of freedom, F is 0/0
        warnings.simplefilter("ignore", RuntimeWarning)
        table = anova_lm(model, typ=2 if replicated else 1)
    total = float(((data[VALUE] - data[VALUE].mean()) ** 2).sum())
    effects = []
    for term, line in table.iterrows():
        share = float(line["sum_sq"]) / total if total > 0 else math.nan
        if term == "Residual":
            continue
        test = (float(line["F"]), float(line["PR(>F)"])) if replicated else (math.nan, math.nan)
        effects.append(Effect(_effect_name(str(term), factors), share, float(line["df"]), float(line["sum_sq"]),
                              *test))
    residual = table.loc["Residual"]
    if replicated:
        effects.append(Effect(SEED_NOISE, float(residual["sum_sq"]) / total if total > 0 else math.nan,
                              float(residual["df"]), float(residual["sum_sq"])))
    else:
        notes.append(NO_REPLICATE)
    return effects, notes


def grid_importance(frame: pd.DataFrame, factors: Sequence[str], metric: str,
                    notes: Sequence[str] = ()) -> Importance:
    """The ANOVA of a grid or ablation sweep (:func:`seed_anova`) as an importance table."""
    effects, more = seed_anova(frame, factors)
    return Importance(metric, "ANOVA, seeds as replicates", frame[POINT].nunique(), len(frame), tuple(effects),
                      (*notes, *more))


# ---------------------------------------------------------------- sampled axes: Optuna's evaluators


def distribution(declared: Mapping[str, Any] | None, values: Sequence[Any]):
    """The Optuna distribution of an axis: its spec declaration (``{choice|uniform|loguniform: ...}``),
    else one inferred from the values it took (numbers: their range; anything else: a choice)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if declared:
        (sampler, arguments), = declared.items()
        if sampler == "choice":
            return CategoricalDistribution(list(arguments))
        return FloatDistribution(float(arguments[0]), float(arguments[1]), log=sampler == "loguniform")
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values) and min(numbers) < max(numbers):
        return FloatDistribution(float(min(numbers)), float(max(numbers)))
    return CategoricalDistribution(sorted(set(values), key=str))


def plain_value(value: Any) -> Any:
    """A frame's value as Optuna stores a parameter (Python scalars; NumPy's are not JSON)."""
    return value.item() if hasattr(value, "item") else value


def sampled_importance(frame: pd.DataFrame, factors: Sequence[str], sampled: Sequence[str], metric: str,
                       mode: str, declared: Mapping[str, Mapping[str, Any]], evaluator: str = "fanova",
                       notes: Sequence[str] = (), seed: int = 0) -> Importance:
    """Optuna's importance of each axis (sampled axes, and the row and grid axes as choices) on the seed
    means of the points, beside the seed noise: the part of the per-seed values' variance that lies
    between the seeds of one point, tested as a one-way ANOVA of points against seeds.

    fANOVA's shares are each axis's own part of the seed means' variance (interactions make up the
    rest); PED-ANOVA's are normalised to sum to 1 and are not variance shares."""
    if evaluator not in EVALUATORS:
        raise ImportanceError(f"evaluator {evaluator!r}: choose one of {', '.join(EVALUATORS)}")
    try:
        import optuna
        from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances
    except ImportError:
        raise ImportanceError("importance of sampled axes needs optuna: pip install '.[search]'") from None
    axes = [*factors, *sampled]
    means = frame.groupby(POINT, sort=False).agg({**{axis: "first" for axis in axes}, VALUE: "mean"})
    if len(means) < 2:
        raise ImportanceError("one point only: nothing to compare")
    distributions = {axis: distribution(declared.get(axis), list(means[axis])) for axis in axes}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
    for _, point in means.iterrows():
        study.add_trial(optuna.trial.create_trial(
            params={axis: plain_value(point[axis]) for axis in axes}, distributions=distributions,
            value=float(point[VALUE])))
    chosen = FanovaImportanceEvaluator(seed=seed) if evaluator == "fanova" else PedAnovaImportanceEvaluator()
    with warnings.catch_warnings():  # ``normalize`` is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        shares = get_param_importances(study, evaluator=chosen, normalize=evaluator != "fanova")
    effects = [Effect(axis, float(share)) for axis, share in shares.items()]
    noise, more = seed_anova(frame, [POINT])
    between = [replace(effect, name=BETWEEN_POINTS) for effect in noise if effect.name == POINT]
    method = f"{'fANOVA' if evaluator == 'fanova' else 'PED-ANOVA'} on {len(means)} seed means (Optuna)"
    return Importance(metric, method, len(means), len(frame), (*effects, *between,
                                                                *[e for e in noise if e.name == SEED_NOISE]),
                      (*notes, *more))


def importance(trials: pd.DataFrame, metric: str, mode: str, declared: Mapping[str, Mapping[str, Any]],
               evaluator: str = "fanova") -> Importance:
    """A sweep variant's importance table: the ANOVA with seeds as replicates for rows and grid axes,
    Optuna's evaluator on the seed means where it has sampled axes."""
    frame, factors, sampled, notes = replicates(trials, metric)
    if sampled:
        return sampled_importance(frame, factors, sampled, metric, mode, declared, evaluator, notes)
    return grid_importance(frame, factors, metric, notes)


# ---------------------------------------------------------------- the table


def effects_frame(result: Importance) -> pd.DataFrame:
    """The table's text: each effect's share of the variance, its degrees of freedom, sum of squares, F
    against the seed noise and p (``*`` below 5%), and whether it stands above the seed noise."""
    def number(value: float, digits: str) -> str:
        return "" if math.isnan(value) else format(value, digits)

    return pd.DataFrame.from_records([{
        "effect": effect.name, "share": f"{effect.share:.1%}" if not math.isnan(effect.share) else "",
        "df": number(effect.df, ".0f"), "sum of squares": number(effect.sum_sq, ".4g"), "F": number(effect.f, ".2f"),
        "p": p_text(effect.p) if not math.isnan(effect.f) else "",
        "above seed noise": ("" if math.isnan(effect.f) else "yes" if is_significant(effect.p) else "no"),
    } for effect in result.effects])


def caption(result: Importance, sweep: str) -> str:
    return (f"{sweep}: share of the variance of {result.metric} by effect ({result.method}; {result.points} points, "
            f"{result.values} values); F against the seed noise, above it where p < {ALPHA:g}")
