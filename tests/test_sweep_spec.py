from pathlib import Path

import pytest
import yaml

from sweep.commands.cli import main
from sweep.spec.budget import BUDGETS
from sweep.spec.scheduler import Scheduler
from sweep.spec.source import parse_override
from sweep.spec.sweep_spec import SpecError, load_spec, trial_config

SPEC = {
    "name": "unit",
    "description": "unit test spec",
    "tags": {"paper": "test", "table": "t1"},
    "method": "simcse",
    "base": {"batch_size": 16, "max_steps": 100},
    "rows": [
        {"name": "baseline", "set": {"method": "none", "pooling": "mean"}},
        {"name": "tau = 0.1", "set": {"temperature": 0.1}},
        {"name": "default", "set": {}},
    ],
    "seeds": [1, 2],
    "grid": {"learning_rate": [1e-5, 3e-5, 5e-5]},
    "metric": "best_dev_spearman",
    "mode": "max",
}


def write(tmp_path: Path, spec: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_plan_counts_rows_seeds_and_grid(tmp_path):
    spec = load_spec(write(tmp_path, SPEC))
    assert spec.trial_count == 3 * 2 * 3
    assert [r.name for r in spec.rows] == ["baseline", "tau = 0.1", "default"]


def test_trial_config_precedence_and_row_method(tmp_path):
    spec = load_spec(write(tmp_path, SPEC), overrides={"batch_size": 8})
    config = trial_config(spec, "tau = 0.1", 2, {"learning_rate": 5e-5})
    assert config["method"] == "simcse" and config["temperature"] == 0.1
    assert config["batch_size"] == 8 and config["learning_rate"] == 5e-5 and config["seed"] == 2
    assert config["max_seq_length"] == 32  # untouched knobs keep the method's default
    baseline = trial_config(spec, "baseline", 1, {"learning_rate": 5e-5})
    assert baseline["method"] == "none" and baseline["pooling"] == "mean" and "batch_size" not in baseline


def test_every_problem_is_reported_at_once_with_key_paths(tmp_path):
    bad = {
        **SPEC,
        "colour": "blue",
        "base": {"batch_sise": 16, "learning_rate": "fast"},
        "rows": [
            {"name": "a", "set": {"temperature": -1.0}},
            {"name": "a", "set": {}},
            {"name": "b", "set": {"method": "nonesuch"}},
        ],
        "grid": {"learning_rate": [], "epochs": [1, 0]},
        "sample": {"temperature": {"gaussian": [0, 1]}},
        "mode": "maximum",
    }
    path = write(tmp_path, bad)
    with pytest.raises(SpecError) as error:
        load_spec(path)
    text = "\n".join(error.value.problems)
    expected = [
        "colour: unknown key",
        "base.batch_sise: unknown knob; did you mean 'batch_size'?",
        "base.learning_rate: expected float",
        "rows[0].set.temperature: expected a value >= 0.0001",
        "rows[1].name: duplicate row name 'a'",
        "rows[2].set.method: unknown method 'nonesuch'",
        "grid.learning_rate: empty grid",
        "grid.epochs[1]: expected a value >= 1",
        "sample.temperature: expected one of",
        "mode: expected 'max' or 'min'",
    ]
    for fragment in expected:
        assert fragment in text, fragment
    assert all(problem.startswith(f"{path}: ") for problem in error.value.problems)
    assert len(error.value.problems) == len(expected)


def test_unknown_method_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="unknown method 'simcsee'.*did you mean 'simcse'"):
        load_spec(write(tmp_path, {**SPEC, "method": "simcsee"}))
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nrows: [a, b\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"broken.yaml: line 3, column 1: not valid YAML"):
        load_spec(path)
    with pytest.raises(SpecError, match="nowhere.yaml: file not found"):
        load_spec(tmp_path / "nowhere.yaml")


def test_missing_training_file_fails_validation(tmp_path):
    spec = {**SPEC, "base": {"train_corpus": str(tmp_path / "missing.txt")}}
    with pytest.raises(SpecError,
                       match=r"rows\['tau = 0.1', 'default'\]: train_corpus: .*missing.txt' is neither a named corpus"):
        load_spec(write(tmp_path, spec))


def test_smoke_budget_caps_without_changing_hyperparameters(tmp_path):
    spec = load_spec(write(tmp_path, SPEC), budget=BUDGETS["smoke"])
    budget = BUDGETS["smoke"]
    assert spec.seeds == (1,) and spec.trial_count == 3 * 1 * 3
    config = trial_config(spec, "tau = 0.1", 1, {"learning_rate": 3e-5})
    assert config["max_steps"] == budget.max_steps and config["eval_every"] <= budget.eval_every
    assert config["eval_max_pairs"] == budget.eval_max_pairs
    assert config["temperature"] == 0.1 and config["batch_size"] == 16 and config["learning_rate"] == 3e-5
    assert spec.spec_hash != load_spec(write(tmp_path, SPEC)).spec_hash


def test_set_overrides_are_validated_like_the_spec(tmp_path):
    assert parse_override("temperature=0.1") == ("temperature", 0.1)
    assert parse_override("model=bert-base-uncased") == ("model", "bert-base-uncased")
    # YAML 1.1 would read these as strings; a learning rate is written like this.
    assert parse_override("learning_rate=1e-4") == ("learning_rate", 1e-4)
    assert parse_override("learning_rate=5E-7") == ("learning_rate", 5e-7)
    assert parse_override("model=1e-4x") == ("model", "1e-4x")
    with pytest.raises(SpecError, match="--set temperature=hot: expected float"):
        load_spec(write(tmp_path, SPEC), overrides={"temperature": "hot"})


def test_plan_command_prints_matrix(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no store there: the plan's reuse lines say nothing
    assert main(["plan", str(write(tmp_path, SPEC)), "--set", "batch_size=8"]) == 0
    out = capsys.readouterr().out
    assert "grid: 3 rows x 2 seeds x 3 grid points x 1 samples = 18 trials" in out
    assert out.count("tau = 0.1") == 3
    # The untuned baseline (method none) runs once per grid point, not once per seed.
    assert out.rstrip().splitlines()[-1] == "18 trials in the grid, 15 trials to run"


def test_seeds_option_replaces_the_spec_seeds(tmp_path, capsys):
    path = write(tmp_path, SPEC)
    assert load_spec(path, seeds=[7]).seeds == (7,)
    assert load_spec(path, seeds=[7]).spec_hash != load_spec(path).spec_hash
    assert main(["plan", str(path), "--seeds", "5,6,7"]) == 0
    assert "3 rows x 3 seeds x 3 grid points" in capsys.readouterr().out
    with pytest.raises(SpecError, match="seeds repeat"):
        load_spec(path, seeds=[1, 1])


def test_plan_command_exit_code_on_bad_spec(tmp_path, capsys):
    assert main(["plan", str(write(tmp_path, {**SPEC, "seeds": []}))]) == 2
    assert "seeds: expected a non-empty list" in capsys.readouterr().err


def test_shipped_specs_validate():
    root = Path(__file__).resolve().parent.parent / "search_spaces"
    specs = sorted(root.glob("*.yaml"))
    assert specs
    for path in specs:
        try:
            load_spec(path)
        except SpecError as error:
            # Rows that need the hub or files this machine lacks must say so; nothing else may fail.
            assert all("hub" in p or "needs" in p for p in error.problems), error.problems


def test_asha_options_are_validated(tmp_path):
    good = load_spec(write(tmp_path, {**SPEC, "scheduler": {"asha": {"max_t": 20, "grace_period": 2,
                                                                     "reduction_factor": 2}}}))
    assert good.scheduler == Scheduler("asha", {"max_t": 20, "grace_period": 2, "reduction_factor": 2})
    bad = {**SPEC, "scheduler": {"asha": {"max_t": 2, "grace_period": 5, "reduction_factor": 1, "patience": 3}}}
    with pytest.raises(SpecError) as error:
        load_spec(write(tmp_path, bad))
    problems = "\n".join(error.value.problems)
    assert "scheduler.asha.patience: unknown option" in problems
    assert "scheduler.asha.reduction_factor: expected a number >= 1.01" in problems
    assert "scheduler.asha.grace_period: must be <= max_t (2)" in problems
    with pytest.raises(SpecError, match=r"scheduler: expected \{asha: \{max_t, grace_period"):
        load_spec(write(tmp_path, {**SPEC, "scheduler": {"hyperband": {}}}))
