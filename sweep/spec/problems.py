"""How a spec's problems are told: each as ``FILE: key.path: message``, all at once (:class:`SpecError`), and the
checks that several sections share (knob values, a sampler)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from trainers.knobs import Knob
from trainers.method import Method

SAMPLERS = ("choice", "uniform", "loguniform")


class SpecError(ValueError):
    """An invalid spec; ``problems`` holds every ``FILE: key.path: message``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid sweep spec:\n  " + "\n  ".join(problems))


class Problems:
    """The problems of one spec file, collected as each section parses itself."""

    def __init__(self, path: Path):
        self.path, self.items = path, []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.path}: {key}: {message}")

    def raise_any(self) -> None:
        if self.items:
            raise SpecError(self.items)


def check_knob_values(problems: Problems, where: str, values: Mapping[str, Any], method: Method) -> None:
    for name, message in method.all_knobs.problems(values):
        problems.add(f"{where}.{name}", f"{message} (method {method.name!r})")


def check_sample(problems: Problems, key: str, axis: Any, knob: Knob | None) -> None:
    """A sampled axis (or a PBT mutation's range): ``{choice: [...]}``, ``{uniform|loguniform: [lo, hi]}``."""
    if not isinstance(axis, Mapping) or len(axis) != 1 or next(iter(axis)) not in SAMPLERS:
        problems.add(key, f"expected one of {{choice: [...]}}, {{uniform: [lo, hi]}}, {{loguniform: [lo, hi]}}, "
                          f"got {axis!r}")
        return
    sampler, arguments = next(iter(axis.items()))
    if not isinstance(arguments, list) or not arguments:
        problems.add(f"{key}.{sampler}", f"expected a non-empty list, got {arguments!r}")
        return
    if sampler != "choice" and (len(arguments) != 2 or not arguments[0] < arguments[1]):
        problems.add(f"{key}.{sampler}", f"expected [low, high] with low < high, got {arguments!r}")
    if sampler == "loguniform" and arguments[0] <= 0:
        problems.add(f"{key}.{sampler}", f"expected a positive low bound, got {arguments[0]!r}")
    if knob is not None:
        for value in arguments:
            message = knob.problem(value)
            if message:
                problems.add(f"{key}.{sampler}", message)
