"""Adaptive seeds (sweep.run.seed_rounds): the rule that adds a seed to a row while its Welch p against the
reference row is undecided, the searcher that starts the trials it asks for, and what validation refuses."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sweep.commands.cli import main as sweep_main
from sweep.run.searchers import SeedRoundsSearcher
from sweep.run.seed_rounds import METRIC, verdict
from sweep.spec.seeds import SeedRounds
from sweep.spec.sweep_spec import POINT, load_spec
from tests.conftest import write_spec

ROUNDS = SeedRounds(first=(1, 2, 3), more=(4, 5), p=0.01, or_above=0.2)
REFERENCE = {1: 0.70, 2: 0.71, 3: 0.69, 4: 0.70, 5: 0.71}


def test_a_clear_gap_is_decided_on_the_first_seeds():
    found = verdict(ROUNDS, {1: 0.60, 2: 0.61, 3: 0.59}, REFERENCE)
    assert found.seeds == (1, 2, 3) and found.p < 0.01 and found.reason.startswith("differs: p = ")


def test_no_gap_is_decided_on_the_first_seeds():
    found = verdict(ROUNDS, {1: 0.70, 2: 0.71, 3: 0.69}, REFERENCE)
    assert found.seeds == (1, 2, 3) and found.p > 0.2 and found.reason.startswith("no difference shown: p = ")


def test_an_undecided_gap_asks_for_the_next_seed_and_stops_when_they_run_out():
    row = {1: 0.66, 2: 0.69, 3: 0.67}  # p = 0.075 on the first three seeds
    found = verdict(ROUNDS, row, REFERENCE)
    assert found == verdict(ROUNDS, row, {k: v for k, v in REFERENCE.items() if k <= 4})
    assert found.seeds == (1, 2, 3, 4) and found.reason is None  # seed 4 has not run for the row
    found = verdict(ROUNDS, {**row, 4: 0.68, 5: 0.705}, REFERENCE)  # p = 0.022, then 0.053
    assert found.seeds == (1, 2, 3, 4, 5) and found.reason.startswith("undecided when the seeds ran out")


def test_a_failed_seed_counts_as_run_without_a_value():
    found = verdict(ROUNDS, {1: 0.60, 2: math.nan, 3: 0.59}, REFERENCE)
    assert found.seeds == (1, 2, 3) and found.reason.startswith("differs")


def adaptive_spec(folder: Path, tiny_bert: str, until: dict[str, float], **changes: Any) -> Path:
    return write_spec(folder, {
        "name": "adaptive", "method": "simcse",
        "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 48, "max_steps": 4, "eval_every": 2},
        "rows": [{"name": "reference", "set": {}},
                 {"name": "clear", "set": {"pooling": "mean"}, "changes": ["pooling"]},
                 {"name": "same", "set": {"checkpoint_every": 4}, "changes": ["checkpoint_every"]}],
        "reference": "reference",
        "seeds": {"first": [1, 2, 3], "more": [4, 5], "until": until},
        "max_concurrent_trials": 2, **changes})


def test_the_searcher_starts_the_first_seeds_then_a_round_only_for_an_undecided_row(tmp_path, tiny_bert):
    spec = load_spec(adaptive_spec(tmp_path, tiny_bert, {"p": 0.01, "or_above": 1.0}), check_environment=False)
    rounds = SeedRoundsSearcher(spec)
    same = {1: 0.5, 2: 0.52, 3: 0.5, 4: 0.52, 5: 0.51}
    scores = {"reference": same, "same": same, "clear": {1: 0.2, 2: 0.21, 3: 0.2}}
    started: list[tuple[str, int]] = []
    while (config := rounds.suggest(f"t{len(started)}")) not in (None, "FINISHED"):
        assert spec.trials[config[POINT]].point.params() == {"row": config["row"], "seed": config["seed"]}
        started.append((config["row"], config["seed"]))
        rounds.on_trial_complete(f"t{len(started) - 1}", {METRIC: scores[config["row"]][config["seed"]]})
    assert config == "FINISHED"
    assert started == [("reference", 1), ("reference", 2), ("reference", 3), ("clear", 1), ("clear", 2), ("clear", 3),
                       ("same", 1), ("same", 2), ("same", 3), ("reference", 4), ("same", 4), ("reference", 5),
                       ("same", 5)]


@pytest.mark.parametrize("changes, key, says", [
    ({"reference": None, "rows": [{"name": "a", "set": {}}, {"name": "b", "set": {"temperature": 0.1}}]},
     "seeds", "adaptive seeds test each row against the reference row"),
    ({"grid": {"temperature": [0.05, 0.1]}}, "grid", "adaptive seeds decide per row"),
    ({"seeds": {"first": [1, 2], "more": [3], "until": {"p": 0.3, "or_above": 0.2}}}, "seeds",
     "with 0 < P <= Q <= 1"),
    ({"seeds": {"first": [1], "more": [3], "until": {"p": 0.01, "or_above": 0.2}}}, "seeds.first",
     "Welch's test needs at least 2 seeds a row"),
    ({"seeds": {"first": [1, 2], "more": [2, 3], "until": {"p": 0.01, "or_above": 0.2}}}, "seeds.more",
     "seeds also in first: [2]"),
])
def test_validation_refuses_adaptive_seeds_it_cannot_decide(tmp_path, tiny_bert, capsys, changes, key, says):
    path = adaptive_spec(tmp_path, tiny_bert, {"p": 0.01, "or_above": 0.2}, **changes)
    assert sweep_main(["plan", str(path)]) == 2
    header, *problems = capsys.readouterr().err.splitlines()
    assert len(problems) == 1 and problems[0].strip().startswith(f"{path}: {key}: ") and says in problems[0], problems


def test_plan_says_the_most_the_sweep_can_run(tmp_path, tiny_bert, capsys):
    assert sweep_main(["plan", str(adaptive_spec(tmp_path, tiny_bert, {"p": 0.01, "or_above": 0.2}))]) == 0
    out = capsys.readouterr().out
    assert ("adaptive seeds: 9 trials with the first seeds [1, 2, 3], at most 15 when every row is undecided "
            "until seeds [4, 5] are all run") in out


def test_the_searcher_resumes_from_its_saved_state(tmp_path, tiny_bert):
    """Ray saves the searcher with the experiment and restores it on resume: a trial that was running is
    still known, and no trial starts twice."""
    spec = load_spec(adaptive_spec(tmp_path, tiny_bert, {"p": 0.01, "or_above": 1.0}), check_environment=False)
    before = SeedRoundsSearcher(spec)
    first = [before.suggest(f"t{i}") for i in range(2)]
    before.on_trial_complete("t0", {METRIC: 0.5})
    before.save(str(tmp_path / "searcher.pkl"))
    after = SeedRoundsSearcher(spec)
    after.restore(str(tmp_path / "searcher.pkl"))
    after.on_trial_complete("t1", {METRIC: 0.52})
    assert after.scores == {"reference": {1: 0.5, 2: 0.52}}
    assert after.suggest("t2")[POINT] == first[1][POINT] + 1
