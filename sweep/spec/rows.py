"""The ``rows`` and ``reference`` sections: named ablation rows, each with its contract (``changes``,
``follows_method``), and the row they are measured against (:mod:`sweep.spec.contracts` checks the contracts once
every row's config is resolved)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from sweep.spec.contracts import VIEWS
from sweep.spec.problems import Problems, check_knob_values
from trainers.method import Method
from trainers.registry import METHODS, get_method


@dataclass(frozen=True)
class Row:
    name: str
    overrides: Mapping[str, Any]
    changes: tuple[str, ...] | None = None
    """The knobs in which the paper's row differs from the spec's reference row (None: no contract)."""
    follows_method: tuple[str, ...] = ()
    """A row that switches method: the knobs (and ``views``) in which it differs from the reference by keeping
    its method's own defaults, each default's source declared by the method (:mod:`sweep.spec.contracts`)."""

    @property
    def method(self) -> str | None:
        return self.overrides.get("method")

    @classmethod
    def parse_all(cls, raw: Any, problems: Problems, method: Method) -> tuple[Row, ...]:
        """``rows`` of a spec of ``method``: one unnamed row when it has none; a row that cannot be read is left
        out (its problem told)."""
        if raw is None:
            return (cls("", {}),)
        if not isinstance(raw, list) or not raw:
            problems.add("rows", f"expected a non-empty list of {{name, set}}, got {raw!r}")
            return ()
        rows, names = [], set()
        for index, row in enumerate(raw):
            parsed = cls.parse(row, problems, f"rows[{index}]", method, names)
            if parsed is not None:
                rows.append(parsed)
        return tuple(rows)

    @classmethod
    def parse(cls, raw: Any, problems: Problems, key: str, spec_method: Method, names: set[str]) -> Row | None:
        """One row (``raw``, at ``key``) of a spec of ``spec_method``, whose rows before it are ``names`` (its own
        is added); None when its shape or its method does not hold. Its knobs, ``changes`` and
        ``follows_method`` are its own method's, which it may switch."""
        if (not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str)
                or set(raw) - {"name", "set", "changes", "follows_method"}):
            problems.add(key, f"expected {{name: str, set: {{knob: value}}, changes: [knob, ...], follows_method: "
                              f"[knob, ...]}}, got {raw!r}")
            return None
        if raw["name"] in names:
            problems.add(f"{key}.name", f"duplicate row name {raw['name']!r}")
        names.add(raw["name"])
        overrides = dict(raw.get("set") or {})
        row_method_name = overrides.get("method", spec_method.name)
        if row_method_name not in METHODS:
            try:
                get_method(str(row_method_name))
            except KeyError as error:  # its message has the known methods and a did-you-mean
                problems.add(f"{key}.set.method", str(error.args[0]))
            return None
        method = get_method(row_method_name)
        check_knob_values(problems, f"{key}.set", {k: v for k, v in overrides.items() if k != "method"}, method)
        changes = _parse_changes(problems, f"{key}.changes", raw.get("changes"), method)
        follows = _parse_follows(problems, f"{key}.follows_method", raw.get("follows_method"), changes, method)
        return cls(raw["name"], overrides, changes, follows)


def _parse_follows(problems: Problems, key: str, follows: Any, changes: tuple[str, ...] | None,
                   method: Method) -> tuple[str, ...]:
    """A row's ``follows_method``: knobs of its method (or ``views``), only beside ``changes: [method, ...]``."""
    if follows is None:
        return ()
    if not isinstance(follows, list) or not all(isinstance(name, str) for name in follows):
        problems.add(key, f"expected a list of knob names (or 'views'), got {follows!r}")
        return ()
    if changes is None or "method" not in changes:
        problems.add(key, "only a row that switches method (changes: [method, ...]) keeps that method's defaults")
    unknown = {name: None for name in follows if name != VIEWS and name not in method.all_knobs}
    check_knob_values(problems, key, unknown, method)
    if len(set(follows)) != len(follows) or set(follows) & set(changes or ()):
        problems.add(key, f"knobs repeat (in follows_method or in changes too): {follows}")
    return tuple(follows)


def _parse_changes(problems: Problems, key: str, changes: Any, method: Method) -> tuple[str, ...] | None:
    """A row's contract: the knobs (or ``method``) of its method in which it differs from the reference."""
    if changes is None:
        return None
    if not isinstance(changes, list) or not all(isinstance(name, str) for name in changes):
        problems.add(key, f"expected a list of knob names, got {changes!r}")
        return None
    unknown = {name: None for name in changes if name != "method" and name not in method.all_knobs}
    check_knob_values(problems, key, unknown, method)  # each an unknown knob, with a did-you-mean
    if len(set(changes)) != len(changes):
        problems.add(key, f"knobs repeat: {changes}")
    return tuple(changes)


@dataclass(frozen=True)
class Reference:
    """The row a spec's other rows are measured against (:mod:`sweep.spec.contracts`)."""

    row: str
    spec: Path | None = None
    """The spec it is a row of, when not this one."""
    stands_in_for: str | None = None
    """The paper's reference row, where it cannot run here and this one substitutes it."""
    is_the_papers_with: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The knob values (``--set`` ones, say the paper's views and a back-translation file) with which the row no
    longer stands in but is the paper's reference itself."""

    def describe(self) -> str:
        where = f" of {self.spec.name}" if self.spec else ""
        instead = f", standing in for {self.stands_in_for}" if self.stands_in_for else ""
        return f"{self.row!r}{where}{instead}"

    @classmethod
    def parse(cls, raw: Any, problems: Problems, rows: Sequence[Row], path: Path) -> Reference | None:
        """``reference`` of the spec at ``path``: a row of it, or ``{row, spec, stands_in_for, is_the_papers_with}``
        (``spec`` from the spec's folder); with one in this spec, every other row declares its ``changes`` and the
        reference row none."""
        if raw is None:
            if any(row.changes is not None for row in rows):
                problems.add("reference", "rows declare changes, but the spec names no reference row "
                                          "to measure them against")
            return None
        if isinstance(raw, str):
            raw = {"row": raw}
        if (not isinstance(raw, Mapping) or not isinstance(raw.get("row"), str)
                or set(raw) - {"row", "spec", "stands_in_for", "is_the_papers_with"}
                or not all(isinstance(raw.get(k, ""), str) for k in ("spec", "stands_in_for"))
                or not isinstance(raw.get("is_the_papers_with", {}), Mapping)):
            problems.add("reference", f"expected a row name or {{row: NAME, spec: PATH, stands_in_for: TEXT, "
                                      f"is_the_papers_with: {{knob: value}}}}, "
                                      f"got {raw!r}")
            return None
        for index, row in enumerate(rows):
            if "spec" not in raw and row.name == raw["row"]:
                if row.changes is not None:
                    problems.add(f"rows[{index}].changes", "the reference row changes nothing: drop its changes")
            elif row.changes is None:
                problems.add(f"rows[{index}]", f"row {row.name!r} needs 'changes': the knobs in which the paper's row "
                                               f"differs from the reference row {raw['row']!r}")
        names = [row.name for row in rows]
        if "spec" not in raw and raw["row"] not in names:
            problems.add("reference", f"{raw['row']!r} is not a row of this spec (rows: {names})")
        return cls(raw["row"], (path.parent / raw["spec"]).resolve() if "spec" in raw else None,
                   raw.get("stands_in_for"), dict(raw.get("is_the_papers_with") or {}))
