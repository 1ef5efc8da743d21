"""The one way methods, suites and objectives are registered: a ``"module:Name"`` reference (:func:`resolve`).

A declaration (a method's :class:`~trainers.method.Method`, a suite's :class:`~trainers.suites.Suite`) and
an implementation (a stage's :class:`~trainers.objectives.base.Objective` subclass, a method's map after pooling)
are each named by the module that holds them and their name in it, and :func:`resolve` imports them. Why one
reference for all three:

- a method's stages name their objective without importing torch (validating a spec, ``sweep knobs`` and
  planning import none), so the light declarations never import the heavy code that implements them;
- a registry (:data:`trainers.registry.METHODS`, :data:`trainers.suites.SUITES`) is an explicit list of such
  references, in one place: reading it shows every entry, and no import registers anything as a side effect;
- a registry resolves its references when it is first read, not when it is imported: importing a registry imports
  none of its entries, so an entry's module may import what imports the registry (a suite module imports
  :mod:`trainers.suites`) with no circle and no late import to break one.

A new method or suite is its module, declaring ``METHOD`` or ``SUITE``, and its reference added to the registry's
list; a new objective is its class, named by the stages that train it.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Generic, Iterator, Mapping, Protocol, TypeVar

from trainers.errors import UnknownName


class Named(Protocol):
    name: str


Entry = TypeVar("Entry", bound=Named)


def resolve(reference: str) -> Any:
    """What ``"module:Name"`` names: ``Name`` in ``module``, which is imported if it was not."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


class Registry(Mapping[str, Entry], Generic[Entry]):
    """Name -> entry for the ``what`` (e.g. "method") that ``references`` name, in their order (the order messages
    list them in). ``check(reference, entry)`` says why an entry is refused (None: accepted)."""

    def __init__(self, what: str, references: tuple[str, ...],
                 check: Callable[[str, Entry], str | None] = lambda reference, entry: None):
        self.what = what
        self.references = list(references)
        self.check = check
        self._entries: dict[str, Entry] | None = None

    def add(self, reference: str) -> Entry:
        """Register one more entry (a test's own suite); refused when its check fails or its name is taken."""
        entry = self._accept(self.entries, reference)
        self.references.append(reference)
        return entry

    def remove(self, name: str) -> None:
        """Unregister the entry named ``name`` (what a test added)."""
        entry = self[name]
        self.references = [r for r in self.references if resolve(r) is not entry]
        del self.entries[name]

    @property
    def entries(self) -> dict[str, Entry]:
        if self._entries is None:
            entries: dict[str, Entry] = {}
            for reference in self.references:
                self._accept(entries, reference)
            self._entries = entries
        return self._entries

    def _accept(self, entries: dict[str, Entry], reference: str) -> Entry:
        entry = resolve(reference)
        if problem := self.check(reference, entry):
            raise ValueError(f"{reference}: {problem}")
        if entries.get(entry.name, entry) is not entry:
            raise ValueError(f"{reference}: a {self.what} named {entry.name!r} is already registered")
        entries[entry.name] = entry
        return entry

    def __getitem__(self, name: str) -> Entry:
        if name not in self.entries:
            hint = difflib.get_close_matches(name, list(self.entries), n=1) if isinstance(name, str) else []
            suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
            raise UnknownName(f"unknown {self.what} {name!r} (known: {sorted(self.entries)}){suggestion}")
        return self.entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)
