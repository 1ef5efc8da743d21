"""A spec's sections (rows and reference, seeds, search, scheduler, resources) are frozen dataclasses that parse
and check themselves, each problem told as ``FILE: key: message``; the spec hash of the same YAML does not move."""

import dataclasses
from pathlib import Path

import pytest
import yaml

import sweep.spec
from sweep.spec.problems import Problems
from sweep.spec.resources import Resources
from sweep.spec.rows import Reference, Row
from sweep.spec.scheduler import Scheduler
from sweep.spec.search import Search
from sweep.spec.seeds import SeedRounds, Seeds
from sweep.spec.sweep_spec import SweepSpec, load_spec
from sweep.spec.validation import DEFAULTS
from trainers.registry import get_method

SECTIONS = {Row: Row.parse_all, Reference: Reference.parse, Seeds: Seeds.parse, Search: Search.parse,
            Scheduler: Scheduler.parse, Resources: Resources.parse}


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_is_a_frozen_dataclass_that_parses_itself(section):
    assert dataclasses.is_dataclass(section) and section.__dataclass_params__.frozen
    assert SECTIONS[section].__self__ is section  # a classmethod of the section itself


def test_the_spec_holds_its_sections_typed(tmp_path):
    spec = load_spec(Path(__file__).resolve().parents[1] / "search_spaces/simcse_pbt.yaml", check_environment=False)
    assert isinstance(spec.scheduler, Scheduler) and spec.scheduler.kind == "pbt"
    assert "hyperparam_mutations" not in spec.scheduler.options and spec.scheduler.mutations
    assert isinstance(spec.resources, Resources) and all(isinstance(row, Row) for row in spec.rows)
    hints = {field.name: field.type for field in dataclasses.fields(SweepSpec)}
    assert hints["search"] == "Search | None" and hints["scheduler"] == "Scheduler | None"
    assert hints["resources"] == "Resources" and hints["seed_rounds"] == "SeedRounds | None"


def test_a_section_tells_its_problems_as_file_and_key(tmp_path):
    problems = Problems(tmp_path / "spec.yaml")
    assert Resources.parse({"gpu": 1.5}, problems, DEFAULTS["resources"]) == Resources(1, 1.5)
    assert Search.parse({"search": {"algorithm": "optuna", "trials": 0}}, problems, {}, {}, ()) is None
    assert Scheduler.parse({"asha": {"max_t": 2, "grace_period": 3}}, problems, get_method("simcse"), {},
                           "best_dev_spearman") == Scheduler("asha", {"max_t": 2, "grace_period": 3})
    rows = Row.parse_all([{"name": "a"}, {"name": "a"}], problems, get_method("simcse"))
    seeds = Seeds.parse({"seeds": {"first": [1, 2], "more": [3], "until": {"p": 0.1, "or_above": 0.5}}}, problems,
                        DEFAULTS["seeds"], rows, Reference.parse("a", problems, rows, tmp_path / "spec.yaml"))
    assert seeds == Seeds((1, 2, 3), SeedRounds((1, 2), (3,), 0.1, 0.5))
    assert [item.split(": ", 2)[:2] for item in problems.items] == [
        [str(tmp_path / "spec.yaml"), "resources.gpu"], [str(tmp_path / "spec.yaml"), "search"],
        [str(tmp_path / "spec.yaml"), "scheduler.asha.grace_period"], [str(tmp_path / "spec.yaml"), "rows[1].name"]]


SPEC = {"name": "hashed", "method": "simcse", "base": {"max_steps": 10}, "seeds": [1, 2],
        "sample": {"learning_rate": {"loguniform": [1e-5, 1e-4]}}, "search": {"algorithm": "optuna", "trials": 3},
        "resources": {"cpu": 2}, "max_concurrent_trials": 1}


def test_the_spec_hash_of_the_same_yaml_does_not_move(tmp_path):
    """The hash names a sweep in the runs it stored: it is the YAML's, however the sections are read."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(SPEC), encoding="utf-8")
    assert load_spec(path, check_environment=False).spec_hash == "765722bf52d70412"


def test_every_file_of_the_spec_room_is_under_400_lines():
    room = Path(sweep.spec.__file__).parent
    assert {path.name: n for path in room.glob("*.py") if (n := len(path.read_text().splitlines())) > 400} == {}
