"""Row contracts: a paper table's row differs from the table's reference row in exactly the knobs the paper's
row changes.

A spec names its ``reference`` row (one of its rows, or a row of another spec); every other row declares
``changes``, the knobs in which the paper's row differs from the reference. When the spec loads, each row's
resolved config is compared with the reference's (:func:`differences`) and a row that differs in a knob its
contract does not name, or does not differ in one it names, is refused (:func:`contract_problems`). So a row
cannot silently train something other than its label: a base that one spec of a table sets and another
does not, a knob a row sets beside the one it is named for.

Some differences are never a row's change (:func:`exempt`): the seed, the knobs a budget caps, and the
bookkeeping knobs, which change no number. A row that switches the method changes ``method``; the knobs only
one of the two methods has, and common knobs left at each method's own default (its paper's batch size, its
learning rate), come with that change.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sweep.budget import CAPPED_KNOBS
from trainers.method import Config, Method
from trainers.run_schema import SuiteName

Difference = tuple[Any, Any]
"""(the reference's value, the row's value) of one knob."""


def exempt(*methods: Method) -> frozenset[str]:
    """Knobs whose difference is never part of a row's contract: the seed, the budget's caps, and the
    bookkeeping knobs of ``methods``. Written once, here."""
    bookkeeping = frozenset().union(*(method.all_knobs.bookkeeping for method in methods))
    return frozenset({"seed", *CAPPED_KNOBS}) | bookkeeping


def differences(reference: Config, reference_method: Method, row: Config, row_method: Method) -> dict[str, Difference]:
    """The knobs in which ``row`` differs from ``reference`` (resolved configs), ``method`` first when it
    differs; the knobs that come with a change of method are left out (module docstring)."""
    found: dict[str, Difference] = {}
    switched = reference_method.name != row_method.name
    if switched:
        found["method"] = (reference_method.name, row_method.name)
    for name in row_method.all_knobs.names:
        if name not in reference or name == SuiteName.KEY or reference[name] == row[name]:
            continue
        if switched and (reference[name] == reference_method.all_knobs[name].default
                         and row[name] == row_method.all_knobs[name].default):
            continue
        found[name] = (reference[name], row[name])
    return found


def contract_problems(row: str, reference: str, changes: Sequence[str], found: Mapping[str, Difference],
                      exempt_knobs: frozenset[str]) -> list[str]:
    """Why ``row``'s differences ``found`` from ``reference`` break its contract ``changes`` (empty: they keep
    it). A named exempt knob must differ too: naming it says the row is about it."""
    unnamed = [name for name in found if name not in changes and name not in exempt_knobs]
    unchanged = [name for name in changes if name not in found]
    problems = []
    if unnamed:
        problems.append(f"row {row!r} differs from the reference row {reference!r} in {describe(found, unnamed)}, "
                        f"which its changes {list(changes)} do not name")
    if unchanged:
        problems.append(f"row {row!r} names {unchanged} in its changes, but does not differ from the reference row "
                        f"{reference!r} there")
    return problems


def describe(found: Mapping[str, Difference], names: Sequence[str] | None = None) -> str:
    """``knob: reference -> row`` for each of ``names`` (all of ``found`` by default)."""
    return "; ".join(f"{name}: {found[name][0]!r} -> {found[name][1]!r}" for name in (names or list(found)))
