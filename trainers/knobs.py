"""Knob declarations: the one place where a configuration value is defined.

Every method declares its knobs once, as :class:`Knob` objects (name, type,
default, range or choices, meaning). The sweep validator, the defaults the
training loop sees, and the generated docs (``python -m sweep knobs METHOD``)
all come from these declarations, so a knob can never be documented in one
place and validated differently in another.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

Scalar = bool | int | float | str | None


@dataclass(frozen=True)
class Knob:
    """One configuration value of a method.

    ``kind`` is the Python type the value must have (``int`` accepts no bools,
    ``float`` accepts ints). ``choices`` restricts the value to a set;
    ``low``/``high`` bound numbers (inclusive). ``nullable`` admits ``None``.
    ``bookkeeping`` marks a knob that changes where or how often things are done but no number a trial
    computes (a cache's folder, how often a checkpoint is written): it is no part of what a row changes
    (:mod:`sweep.spec.contracts`). ``corpus`` marks a knob that only says which training texts a stage that reads
    the corpus reads (``train_corpus``, ``bt_file``, ConSERT's ``transfer_limit``): a stage that does not
    (:attr:`trainers.method.Stage.reads_corpus`) reads none of them, so a shared stage's key leaves them out
    (:mod:`trainers.training.shared_stages`).
    """

    name: str
    kind: type
    default: Scalar
    help: str
    choices: tuple[Scalar, ...] | None = None
    low: float | None = None
    high: float | None = None
    nullable: bool = False
    bookkeeping: bool = False
    corpus: bool = False

    def problem(self, value: Any) -> str | None:
        """Return why ``value`` is not acceptable for this knob, or None."""
        if value is None:
            return None if self.nullable else f"expected {self.describe()}, got null"
        if not self._has_kind(value):
            return f"expected {self.describe()}, got {type(value).__name__} {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"expected one of {list(self.choices)}, got {value!r}"
        if self.low is not None and value < self.low:
            return f"expected a value >= {self.low}, got {value!r}"
        if self.high is not None and value > self.high:
            return f"expected a value <= {self.high}, got {value!r}"
        return None

    def coerce(self, value: Any) -> Any:
        """Normalise an already-valid value (ints given for float knobs become floats)."""
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def describe(self) -> str:
        text = self.kind.__name__
        if self.choices is not None:
            text += f" in {list(self.choices)}"
        if self.low is not None or self.high is not None:
            text += (f" in [{self.low if self.low is not None else '-inf'}, "
                     f"{self.high if self.high is not None else 'inf'}]")
        if self.nullable:
            text += " or null"
        return text

    def _has_kind(self, value: Any) -> bool:
        if self.kind is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.kind is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, self.kind)


@dataclass(frozen=True)
class KnobSet:
    """An ordered, name-unique collection of knobs."""

    knobs: tuple[Knob, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [k.name for k in self.knobs]
        duplicated = {n for n in names if names.count(n) > 1}
        if duplicated:
            raise ValueError(f"knobs declared twice: {sorted(duplicated)}")

    def __add__(self, other: "KnobSet | Iterable[Knob]") -> "KnobSet":
        extra = other.knobs if isinstance(other, KnobSet) else tuple(other)
        return KnobSet(self.knobs + extra)

    def __iter__(self):
        return iter(self.knobs)

    def __contains__(self, name: object) -> bool:
        return any(k.name == name for k in self.knobs)

    def __getitem__(self, name: str) -> Knob:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    @property
    def bookkeeping(self) -> frozenset[str]:
        """The names of the knobs that change no number (:attr:`Knob.bookkeeping`)."""
        return frozenset(k.name for k in self.knobs if k.bookkeeping)

    @property
    def corpus(self) -> frozenset[str]:
        """The names of the knobs that only choose a stage's training texts (:attr:`Knob.corpus`)."""
        return frozenset(k.name for k in self.knobs if k.corpus)

    def defaults(self) -> dict[str, Scalar]:
        return {k.name: k.default for k in self.knobs}

    def problems(self, values: Mapping[str, Any]) -> list[Problem]:
        """Every problem with ``values``; empty when valid."""
        found: list[Problem] = []
        for name, value in values.items():
            if name not in self:
                hint = difflib.get_close_matches(name, self.names, n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
                found.append(Problem(name, f"unknown knob{suggestion}"))
                continue
            message = self[name].problem(value)
            if message:
                found.append(Problem(name, message))
        return found

    def resolve(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults updated by ``overrides``; raises ``ConfigError`` listing every problem."""
        problems = self.problems(overrides)
        if problems:
            raise ConfigError(problems)
        resolved = self.defaults()
        resolved.update({name: self[name].coerce(value) for name, value in overrides.items()})
        return resolved


class Problem(NamedTuple):
    """What is wrong with one knob (or option) of a config: its name, and a message that says what was
    expected. Shown as ``key: message``; callers that place it (a spec's row, a suite's option, ``--set``)
    read its two parts, never the text."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class ConfigError(ValueError):
    """A configuration is invalid; ``problems`` lists every reason at once."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("invalid configuration:\n  " + "\n  ".join(map(str, self.problems)))


@dataclass(frozen=True)
class Exchangeable:
    """A method's declaration that two of its knobs can swap values without changing the experiment.

    A sweep may then declare those two grid axes ``symmetric`` and run each
    unordered pair of values once. ``reason`` says why the swap is the same
    experiment; ``python -m sweep plan`` prints it.
    """

    knobs: tuple[str, str]
    reason: str
