"""Best by metric and mode, and its fallback, one rule (results.ranking) for the summary, export and tables."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from results.ranking import DEFAULT_METRIC, DEFAULT_MODE, best, best_first, frame_ranking, ranked_by
from results.record import TrialIdentity, parse_metric_tag
from sweep.commands.summary import best_trial
from sweep.run.models import select_run


def test_best_first_keeps_ties_in_order_and_puts_the_unscored_last():
    items = [("a", 1.0), ("b", None), ("c", 3.0), ("d", math.nan), ("e", 3.0), ("f", 0.5)]
    score = dict(items).get
    assert best_first([name for name, _ in items], score, "max") == ["c", "e", "a", "f", "b", "d"]
    assert best_first([name for name, _ in items], score, "min") == ["f", "a", "c", "e", "b", "d"]
    assert best(["b", "d"], score, "max") is None


def test_the_fallback_is_best_dev_highest_first_everywhere():
    assert ranked_by(None, None) == ranked_by("", "min") == (DEFAULT_METRIC, DEFAULT_MODE)
    assert (DEFAULT_METRIC, DEFAULT_MODE) == ("best_dev_spearman", "max")
    assert parse_metric_tag(None) == (DEFAULT_METRIC, DEFAULT_MODE)
    assert (TrialIdentity("m", "r", 1).metric, TrialIdentity("m", "r", 1).mode) == (DEFAULT_METRIC, DEFAULT_MODE)
    blank = pd.DataFrame({column: pd.Series([""], dtype="string") for column in ("sweep_metric", "sweep_mode")})
    assert frame_ranking(blank) == (DEFAULT_METRIC, DEFAULT_MODE)


def test_the_summary_and_export_pick_the_same_best_trial():
    scores = {"r1": 0.5, "r2": 0.9, "r3": 0.9, "r4": 0.1}
    trials = pd.DataFrame({"run_id": list(scores), "status": "FINISHED", "loss": list(scores.values())})
    runs = [SimpleNamespace(info=SimpleNamespace(run_id=run_id), data=SimpleNamespace(
        metrics={"loss": value}, tags={"sweep.trial_id": run_id}, params={})) for run_id, value in scores.items()]
    for mode, expected in (("max", "r2"), ("min", "r4")):
        spec = SimpleNamespace(metric="loss", mode=mode)
        assert best_trial(trials, spec)["run_id"] == expected
        assert select_run(runs, "loss", mode).info.run_id == expected
    assert select_run(runs, "absent", "max").info.run_id == "r1"  # none scored: the first that matches
