"""Evaluation suites, one module per suite (as sentence-transformers keeps one evaluator per task): STS
(:mod:`trainers.suites.sts`), SentEval transfer, NLI, re-ranking and multilingual STS.

A suite is its module and its ``"module:SUITE"`` reference in :data:`SUITES`' list below (registered as methods
and objectives are, :mod:`trainers.registry`). The module declares the suite as ``SUITE``
(a :class:`Suite`: its name, data folder and options, importable without torch so that validating a spec
imports none; torch is imported where the suite computes) and implements ``load_local(folder)``,
``load_hub()`` (when ``hub`` names datasets) and ``evaluate(encode, data, options, seed) -> {metric:
value}``, naming its metrics with ``SUITE.metric(dataset, statistic)``.

A spec chooses its suites with ``evaluations: [sts, senteval, ...]`` (default ``[sts]``); an entry is
a suite name or ``{name: {option: value}}``. STS always runs, first (model selection needs STS-B dev);
every chosen suite evaluates each trial's best state after training, with frozen sentence vectors
from the encoder's ``encode``, through :func:`evaluate_suite`. Each suite reads its data from a local
folder named by an environment variable (its layout in :attr:`Suite.layout` and docs/evaluations.md)
or, where a hub copy is known and the folder variable is unset, from the Hugging Face hub.

GLUE (SG-BERT Table 10) is no suite: it fine-tunes the encoder (a spec's ``glue`` key, ``python -m sweep
glue``, docs/glue.md), beside the training loop (:mod:`trainers.training.glue`, its data and knobs in
:mod:`trainers.data.glue_tasks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from trainers.data.sources import DataSource
from trainers.knobs import ConfigError, KnobSet
from trainers.metrics import Glue, Metric, SuiteName
from trainers.references import Registry

Encode = Callable[[Sequence[str]], Any]
"""Sentences -> a [n, dim] tensor of their vectors (row i for sentence i)."""


@dataclass(frozen=True, kw_only=True)
class Suite(DataSource):
    """One evaluation suite, as its module declares it (``SUITE``): its name, where its data lives
    (:class:`~trainers.data.sources.DataSource`; ``module`` is the suite's own, ``__name__``), which options a spec
    may give it, and which knobs of the trial's config it reads besides (``config_knobs``, passed with its
    options)."""

    name: str
    summary: str
    options: KnobSet = KnobSet()
    config_knobs: tuple[str, ...] = ()

    def resolve(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The suite's options, defaults filled in; raises ConfigError naming each bad option."""
        return self.options.resolve(options)

    def metric(self, dataset: str, statistic: str) -> str:
        """The name of one of this suite's final metrics (``senteval``: ``mr``, ``accuracy`` ->
        ``test_senteval_mr_accuracy``; ``dataset`` ``avg`` is the suite's average): every metric a suite
        reports is named here, from its declared name."""
        return Metric.suite(self.name, dataset, statistic)

    def read(self, options: Mapping[str, Any]) -> Any:
        """The data a trial evaluates on, for its options (config knobs included): the folder's, else the hub's."""
        return self.load()


def _declared_here(reference: str, suite: Suite) -> str | None:
    """Why a suite's declaration is refused: a ``module`` that is not its own (where its implementation is read)."""
    module = reference.partition(":")[0]
    if suite.module != module:
        return f"SUITE.module is {suite.module!r}; declare it with module=__name__"
    return None


SUITES: Registry[Suite] = Registry("suite", (
    "trainers.suites.sts:SUITE",
    "trainers.suites.senteval:SUITE",
    "trainers.suites.nli:SUITE",
    "trainers.suites.reranking:SUITE",
    "trainers.suites.multilingual_sts:SUITE",
), check=_declared_here)
"""Every suite by name, in the order listed (the order messages list them in): a spec may choose it by name, and
:func:`evaluate_suite` runs it. A new suite adds its reference here (:mod:`trainers.registry`)."""


def parse_evaluations(value: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """A spec's ``evaluations`` value -> (each suite as ``{"suite": name, **options}`` with defaults,
    problems as (key, message)). ``sts`` is always first: model selection needs it."""
    entries = list(SuiteName.DEFAULT) if value is None else value
    if not isinstance(entries, list) or not entries:
        return [], [("", f"expected a non-empty list of suites {list(SUITES)}, got {value!r}")]
    chosen, problems = [{"suite": SuiteName.STS}], []
    for index, entry in enumerate(entries):
        name, options = _name_and_options(entry)
        if name == Glue.KEY:
            problems.append((f"[{index}]", "GLUE fine-tunes the encoder, it is no suite of frozen vectors: give the "
                                           "spec a 'glue:' key and run `python -m sweep glue SPEC` (docs/glue.md)"))
            continue
        if name not in SUITES or not isinstance(options, Mapping):
            problems.append((f"[{index}]", f"expected a suite name in {list(SUITES)} or {{name: {{option: value}}}}, "
                                           f"got {entry!r}"))
            continue
        try:
            resolved = SUITES[name].resolve(dict(options))
        except ConfigError as error:
            for problem in error.problems:  # KnobSet's words are about knobs; these are a suite's options
                problems.append((f"[{index}].{name}.{problem.key}",
                                 problem.message.replace("unknown knob", "unknown option")))
            continue
        if name != SuiteName.STS and all(c["suite"] != name for c in chosen):
            chosen.append({"suite": name, **resolved})
    return chosen, problems


def _name_and_options(entry: Any) -> tuple[Any, Any]:
    """``name`` or ``{name: options}`` (options may be empty) -> (name, options); (None, None) otherwise."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, Mapping) and len(entry) == 1:
        name, options = next(iter(entry.items()))
        return name, {} if options is None else options
    return None, None


def trial_suites(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The suites a trial's config chooses (``evaluations``, as :func:`parse_evaluations` resolved them),
    STS first; a config without them (a trial run outside a sweep) is evaluated on STS alone."""
    chosen = [dict(entry) for entry in config.get(SuiteName.KEY, ())]
    sts = next((entry for entry in chosen if entry["suite"] == SuiteName.STS), {"suite": SuiteName.STS})
    return [sts, *(entry for entry in chosen if entry["suite"] != SuiteName.STS)]


def evaluate_suite(entry: Mapping[str, Any], encode: Encode, config: Mapping[str, Any],
                   data: Any = None) -> dict[str, float]:
    """One chosen suite (``{"suite": name, **options}``) on ``encode``'s vectors, for the trial whose config is
    ``config`` (its seed, and the knobs the suite reads); ``data`` is the suite's data when the caller has
    read it already. The end of every trial (:func:`trainers.training.loop.run_trial`) and ``sweep evaluate`` of a kept
    encoder (:mod:`sweep.commands.evaluate`) evaluate through here."""
    suite = SUITES[entry["suite"]]
    options = {**{k: v for k, v in entry.items() if k != "suite"}, **{k: config[k] for k in suite.config_knobs}}
    data = suite.read(options) if data is None else data
    return suite.implementation().evaluate(encode, data, options, config["seed"])


def evaluate_suites(chosen: Sequence[Mapping[str, Any]], encode: Encode, config: Mapping[str, Any]) -> dict[str, float]:
    """Every suite of ``chosen`` (:func:`evaluate_suite`), their metrics together."""
    metrics: dict[str, float] = {}
    for entry in chosen:
        metrics.update(evaluate_suite(entry, encode, config))
    return metrics
