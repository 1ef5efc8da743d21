import pytest

from trainers.knobs import ConfigError, Knob, KnobSet
from trainers.registry import METHODS, get_method

KNOBS = KnobSet(
    (
        Knob("temperature", float, 0.05, "tau", low=1e-4, high=10.0),
        Knob("loss", str, "opt3", "variant", choices=("sg", "opt3")),
        Knob("batch_size", int, 64, "batch", low=2),
        Knob("head", bool, True, "use head"),
    )
)


def test_defaults_and_overrides_resolve():
    config = KNOBS.resolve({"temperature": 1, "loss": "sg"})
    assert config == {"temperature": 1.0, "loss": "sg", "batch_size": 64, "head": True}
    assert isinstance(config["temperature"], float)


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"temprature": 0.1}, "did you mean 'temperature'"),
        ({"temperature": "hot"}, "expected float"),
        ({"temperature": 0.0}, ">= 0.0001"),
        ({"loss": "opt9"}, "one of ['sg', 'opt3']"),
        ({"batch_size": 3.5}, "expected int"),
        ({"batch_size": True}, "expected int"),
        ({"head": 1}, "expected bool"),
        ({"batch_size": 1}, ">= 2"),
    ],
)
def test_each_bad_value_is_named(values, fragment):
    problems = KNOBS.problems(values)
    assert len(problems) == 1
    name, message = problems[0]
    assert name == next(iter(values)) and fragment in message


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as error:
        KNOBS.resolve({"temperature": -1.0, "loss": "x", "nope": 1})
    assert len(error.value.problems) == 3


def test_duplicate_declaration_rejected():
    with pytest.raises(ValueError, match="declared twice"):
        KnobSet((Knob("a", int, 1, ""), Knob("a", int, 2, "")))


def test_every_method_default_is_valid_for_its_own_knobs():
    for method in METHODS.values():
        knobs = method.all_knobs
        assert knobs.problems(knobs.defaults()) == [], method.name


def test_method_defaults_replace_common_defaults():
    assert get_method("simcse").all_knobs["batch_size"].default == 64
    assert get_method("simcse").all_knobs["temperature"].default == 0.05
    assert "batch_size" not in get_method("none").all_knobs


def test_unknown_method_suggests_a_name():
    with pytest.raises(KeyError, match="did you mean 'simcse'"):
        get_method("simcsee")
