"""Row contracts: a paper table's row differs from the table's reference row in exactly the knobs the paper's
row changes, and in what comes with the method it switches to, each named.

A spec names its ``reference`` row (one of its rows, or a row of another spec); every other row declares
``changes``, the knobs in which the paper's row differs from the reference. A row that switches the method
(``changes: [method]``) also lists ``follows_method``: the knobs in which it differs because it keeps its own
method's defaults (its paper's batch size, its corpus, its training length, its views), each default citing
the paper or script it comes from (:attr:`trainers.method.Method.sources`). When the spec loads, each row's
resolved config is compared with the reference's (:func:`differences`: every knob the two methods share, and
their views) and a row that differs in a knob neither list names, or does not differ in one they name, is
refused (:func:`contract_problems`). So a row cannot silently train something other than its label: a base
that one spec of a table sets and another does not, a knob a row sets beside the one it is named for, or a
corpus, a training length or views that another method's defaults bring.

Some differences are never a row's change (:func:`exempt`): the seed, the knobs a budget caps, and the
bookkeeping knobs, which change no number.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sweep.spec.budget import CAPPED_KNOBS
from trainers.method import Config, Method
from trainers.metrics import SuiteName

Difference = tuple[Any, Any]
"""(the reference's value, the row's value) of one knob."""

VIEWS = "views"
"""The difference in the views two trained methods train on (:attr:`trainers.method.Method.views`): their knobs
are the methods' own (SCT's view1/view2, ConSERT's aug1/aug2, SimCSE's positive), so no shared knob shows it."""


TRAINING_DATA = "training data"
REGIME_KNOBS = ("epochs", "batch_size", "max_seq_length")
"""The budget knobs that, with the training data and the views, make a training regime: a table's rows that
differ there say so in its caption (``reports.table_specs``)."""


def training_data(config: Config, method: Method) -> str:
    """What a trained config trains on: its ``train_corpus``, or the ``bt_file`` it reads instead."""
    return f"bt_file {config['bt_file']}" if method.reads_bt_file(config) else config["train_corpus"]


def regime(config: Config, method: Method) -> dict[str, Any]:
    """A trained config's regime: its training data, :data:`REGIME_KNOBS` and views (empty for a method that
    trains nothing)."""
    if not method.trains:
        return {}
    return {TRAINING_DATA: training_data(config, method), **{knob: config[knob] for knob in REGIME_KNOBS},
            VIEWS: method.views(config)}


def exempt(*methods: Method) -> frozenset[str]:
    """Knobs whose difference is never part of a row's contract: the seed, the budget's caps, and the
    bookkeeping knobs of ``methods``. Written once, here."""
    bookkeeping = frozenset().union(*(method.all_knobs.bookkeeping for method in methods))
    return frozenset({"seed", *CAPPED_KNOBS}) | bookkeeping


def differences(reference: Config, reference_method: Method, row: Config, row_method: Method) -> dict[str, Difference]:
    """Every knob in which ``row`` differs from ``reference`` (resolved configs), each method's own defaults
    included: ``method`` first when it differs, then each knob both methods have, then :data:`VIEWS` when a row
    switches between two trained methods that train on different views. The suites a spec evaluates on
    (``SuiteName.KEY``) are the table's, not a row's: they add scores and change none."""
    found: dict[str, Difference] = {}
    switched = reference_method.name != row_method.name
    if switched:
        found["method"] = (reference_method.name, row_method.name)
    for name in row_method.all_knobs.names:
        if name in reference and name != SuiteName.KEY and reference[name] != row[name]:
            found[name] = (reference[name], row[name])
    if switched and reference_method.trains and row_method.trains:  # within a method, its view knobs show
        views = (reference_method.views(reference), row_method.views(row))
        if views[0] != views[1]:
            found[VIEWS] = views
    return found


def contract_problems(row: str, reference: str, changes: Sequence[str], follows: Sequence[str],
                      found: Mapping[str, Difference], exempt_knobs: frozenset[str],
                      set_on_both: frozenset[str] = frozenset()) -> list[str]:
    """Why ``row``'s differences ``found`` from ``reference`` break its contract: ``changes`` and ``follows`` (its
    ``follows_method``) together name every difference but the exempt ones (empty: they keep it). A named exempt
    knob must differ too: naming it says the row is about it; but not one that ``--set`` set (``set_on_both``),
    which may bring the reference to the row's value (SCT Table 4's views at the paper's two back-translations
    make 'Back-translation (default)' the reference itself)."""
    named = [*changes, *follows]
    unnamed = [name for name in found if name not in named and name not in exempt_knobs]
    unchanged = [name for name in named if name not in found and name not in set_on_both]
    problems = []
    if unnamed:
        where = f"changes {list(changes)}" + (f" and follows_method {list(follows)}" if follows else "")
        problems.append(f"row {row!r} differs from the reference row {reference!r} in {describe(found, unnamed)}, "
                        f"which its {where} do not name")
    if unchanged:
        problems.append(f"row {row!r} names {unchanged} in its changes or follows_method, but does not differ from "
                        f"the reference row {reference!r} there")
    return problems


def tuned_knobs(method: Method, config: Config) -> frozenset[str]:
    """The knobs ``method`` tunes per model (``settings_by_model``): a row that follows its method there may come to
    the reference's value on one model and not on another (DCLR's batch of 128 is SCT's; on BERT-large, 256)."""
    return frozenset(method.settings_by_model(config)[1]) if method.settings_by_model else frozenset()


def follows_problems(row: str, follows: Sequence[str], config: Config, method: Method) -> list[str]:
    """A knob a row lists in ``follows_method`` is at its method's own value, which names its source: its default,
    or what the method tunes for the row's model (``settings_by_model``); a value the row (or the spec's base) sets
    is a change of the row's, and goes in ``changes``."""
    problems = []
    knobs = method.all_knobs
    tuned = (method.settings_by_model(config)[0] if method.settings_by_model else None) or {}
    for name in follows:
        own = tuned.get(name, knobs[name].default) if name in knobs else None
        if name != VIEWS and name in knobs and config[name] != own:
            problems.append(f"row {row!r} lists {name} in follows_method, but sets it ({config[name]!r}, "
                            f"{method.name}'s own for its model: {own!r}): name it in changes")
        elif name not in method.sources:
            problems.append(f"row {row!r} lists {name} in follows_method, but method {method.name!r} declares no "
                            f"source for it (trainers/methods/{method.name}.py: sources)")
    return problems


def describe(found: Mapping[str, Difference], names: Sequence[str] | None = None) -> str:
    """``knob: reference -> row`` for each of ``names`` (all of ``found`` by default)."""
    return "; ".join(f"{name}: {found[name][0]!r} -> {found[name][1]!r}" for name in (names or list(found)))
