"""The statistics of ``reports.importance`` against independently computed ANOVAs: a two-way table's sums
of squares by hand, scipy's one-way F test, one seed per point, the trials frame's replicates, and
Optuna's fANOVA on sampled axes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from results.importance import (
    BETWEEN_POINTS,
    NO_REPLICATE,
    POINT,
    SEED,
    SEED_NOISE,
    VALUE,
    ImportanceError,
    effects_frame,
    importance,
    replicates,
    sampled_importance,
    seed_anova,
)

pytest.importorskip("statsmodels")


def two_way_table(seeds: int = 3) -> pd.DataFrame:
    """Factor a (2 values) moves the value by 4, factor b (3 values) a little, with noise per seed."""
    rng = np.random.default_rng(7)
    return pd.DataFrame.from_records([
        {"a": a, "b": b, SEED: seed, VALUE: 4.0 * (a == "hi") + 0.2 * b + rng.normal(scale=0.5)}
        for a in ("lo", "hi") for b in (1, 2, 3) for seed in range(seeds)])


def by_name(effects) -> dict:
    return {effect.name: effect for effect in effects}


def test_a_balanced_two_way_table_decomposes_as_by_hand():
    frame = two_way_table()
    effects, notes = seed_anova(frame, ["a", "b"])
    y, grand = frame[VALUE], frame[VALUE].mean()
    cell = frame.groupby(["a", "b"])[VALUE].transform("mean")
    a_mean, b_mean = frame.groupby("a")[VALUE].transform("mean"), frame.groupby("b")[VALUE].transform("mean")
    expected = {"a": ((a_mean - grand) ** 2).sum(), "b": ((b_mean - grand) ** 2).sum(),
                "a x b": ((cell - a_mean - b_mean + grand) ** 2).sum(), SEED_NOISE: ((y - cell) ** 2).sum()}
    dfs = {"a": 1, "b": 2, "a x b": 2, SEED_NOISE: 12}
    found = by_name(effects)
    assert list(found) == list(expected) and notes == []
    within = expected[SEED_NOISE] / dfs[SEED_NOISE]
    for name, sum_sq in expected.items():
        assert found[name].sum_sq == pytest.approx(sum_sq)
        assert found[name].df == dfs[name]
        assert found[name].share == pytest.approx(sum_sq / ((y - grand) ** 2).sum())
        if name != SEED_NOISE:
            f = sum_sq / dfs[name] / within
            assert found[name].f == pytest.approx(f)
            assert found[name].p == pytest.approx(stats.f.sf(f, dfs[name], dfs[SEED_NOISE]))
    assert sum(e.share for e in effects) == pytest.approx(1.0)  # balanced: the parts add up
    assert found["a"].p < 0.05 < found["a x b"].p


def test_one_factor_is_scipys_one_way_anova():
    frame = two_way_table()
    effects, _ = seed_anova(frame, ["b"])
    f, p = stats.f_oneway(*[group[VALUE] for _, group in frame.groupby("b")])
    assert by_name(effects)["b"].f == pytest.approx(f) and by_name(effects)["b"].p == pytest.approx(p)


def test_one_seed_per_point_has_no_seed_noise_and_no_f_test():
    frame = two_way_table(seeds=1)
    effects, notes = seed_anova(frame, ["a", "b"])
    assert NO_REPLICATE in notes and SEED_NOISE not in by_name(effects)
    assert all(math.isnan(e.f) and math.isnan(e.p) for e in effects)
    assert sum(e.share for e in effects) == pytest.approx(1.0)  # the interaction takes what seeds would
    assert effects_frame_column(effects, notes, "above seed noise") == ["", "", ""]


def effects_frame_column(effects, notes, column: str) -> list[str]:
    from results.importance import Importance

    return list(effects_frame(Importance("m", "ANOVA", 6, 6, tuple(effects), tuple(notes)))[column])


def test_an_unbalanced_table_says_so_and_a_missing_point_drops_the_interactions():
    frame = two_way_table()
    uneven = frame.drop(index=[0])  # one seed fewer at one point
    _, notes = seed_anova(uneven, ["a", "b"])
    assert any("type II" in note for note in notes)
    missing = frame[~((frame["a"] == "lo") & (frame["b"] == 3))]
    effects, notes = seed_anova(missing, ["a", "b"])
    assert [e.name for e in effects] == ["a", "b", SEED_NOISE]
    assert any("only the main effects" in note for note in notes)
    # The main-effects model leaves the interaction in the residual: 15 values - 4 parameters.
    assert by_name(effects)[SEED_NOISE].df == 15 - 4


def test_nothing_that_varies_is_refused():
    with pytest.raises(ImportanceError, match="nothing varies"):
        seed_anova(two_way_table(), [])


def trial(row: str, point: dict, seed: int, value: float, start: int, status: str = "FINISHED",
          seeds: tuple = (), sampled: dict | None = None) -> dict:
    axes = ", ".join(f"{k}={v}" for k, v in {**point, **(sampled or {})}.items())
    return {"row": row, "axes": axes, "grid_point": point, "sampled_point": sampled or {}, "seed": seed, "seeds": seeds,
            "status": status, "start_time": pd.Timestamp(start, unit="s", tz="UTC"), "run_id": f"r{start}",
            "best_dev_spearman": value}


def test_replicates_keep_the_latest_finished_run_of_each_seed_and_leave_seed_free_lines_out():
    trials = pd.DataFrame.from_records([
        trial("untuned", {"k": 1}, 1, 50.0, 0, seeds=(1, 2)),
        trial("a", {"k": 1}, 1, 10.0, 1), trial("a", {"k": 1}, 1, 11.0, 2),  # run again: the latest counts
        trial("a", {"k": 1}, 2, 12.0, 3), trial("a", {"k": 2}, 1, 13.0, 4),
        trial("a", {"k": 2}, 2, 99.0, 5, status="FAILED"), trial("b", {"k": 2}, 2, 14.0, 6),
    ])
    frame, factors, sampled, notes = replicates(trials, "best_dev_spearman")
    assert factors == ["row", "k"] and sampled == []
    assert sorted(zip(frame["row"], frame["k"], frame[SEED], frame[VALUE])) == [
        ("a", 1, 1, 11.0), ("a", 1, 2, 12.0), ("a", 2, 1, 13.0), ("b", 2, 2, 14.0)]
    assert notes and "untuned" in notes[0]
    with pytest.raises(ImportanceError, match="not recorded"):
        replicates(trials, "test_avg_spearman")


def test_sampled_axes_get_fanova_on_seed_means_beside_the_seed_noise():
    pytest.importorskip("optuna")
    rng = np.random.default_rng(3)
    records = []
    for index in range(16):
        rate, temperature = 10 ** rng.uniform(-5, -3), 10 ** rng.uniform(-2, -0.7)
        for seed in (1, 2):  # the point's seeds share its drawn values
            records.append({"row": "simcse", "learning_rate": rate, "temperature": temperature, SEED: seed,
                            POINT: f"p{index}", VALUE: -10 * math.log10(rate) + rng.normal(scale=0.3)})
    frame = pd.DataFrame.from_records(records)
    declared = {"learning_rate": {"loguniform": [1e-5, 1e-3]}, "temperature": {"loguniform": [0.01, 0.2]}}
    result = sampled_importance(frame, [], ["learning_rate", "temperature"], "m", "max", declared)
    found = by_name(result.effects)
    assert list(found) == ["learning_rate", "temperature", BETWEEN_POINTS, SEED_NOISE]
    assert found["learning_rate"].share > 0.8 > 0.1 > found["temperature"].share
    assert found[BETWEEN_POINTS].p < 0.05 and found[SEED_NOISE].share < 0.05
    assert result.points == 16 and result.values == 32 and result.method.startswith("fANOVA")
    ped = sampled_importance(frame, [], ["learning_rate", "temperature"], "m", "max", declared, "ped-anova")
    assert by_name(ped.effects)["learning_rate"].share > by_name(ped.effects)["temperature"].share


def test_a_sweep_with_sampled_axes_goes_to_optuna_and_one_without_to_the_anova():
    pytest.importorskip("optuna")
    rng = np.random.default_rng(5)
    records, start = [], 0
    for rate in 10 ** rng.uniform(-5, -3, size=8):
        for seed in (1, 2):  # as a searcher runs each suggested point with every seed
            start += 1
            records.append(trial("simcse", {"pooling": "mean"}, seed, -math.log10(rate) + rng.normal(scale=0.05),
                                 start, sampled={"learning_rate": float(rate)}))
    trials = pd.DataFrame.from_records(records)
    sampled = importance(trials, "best_dev_spearman", "max", {"learning_rate": {"loguniform": [1e-5, 1e-3]}})
    assert sampled.method.startswith("fANOVA on 8 seed means") and sampled.values == 16
    assert [e.name for e in sampled.effects] == ["learning_rate", BETWEEN_POINTS, SEED_NOISE]
    as_grid = trials.assign(sampled_point=[{}] * len(trials),
                            grid_point=[{"learning_rate": point["learning_rate"]} for point in trials["sampled_point"]])
    gridded = importance(as_grid, "best_dev_spearman", "max", {})
    assert gridded.method == "ANOVA, seeds as replicates" and gridded.effects[0].name == "learning_rate"
