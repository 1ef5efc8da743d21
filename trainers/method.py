"""What a method is: its knobs, and (for trained methods) its training stages.

A method's declaration (:class:`Method`) is all that validating a spec, listing its knobs and
planning a sweep read, so it imports no torch, transformers or Ray. What a stage trains is an
:class:`~trainers.objectives.base.Objective`, named here as ``"module:Class"`` and imported when the loop
builds the stage. Most methods train in one stage; a method with several (ConSERT's NLI stage
followed by unsupervised transfer) lists them, and the loop runs, reports and checkpoints each in
turn on the same encoder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from trainers.common_knobs import COMMON_KNOBS, TRAINING_KNOBS, pooler_problems, pooling_problems, training_problems
from trainers.data.sources import (
    BT_COLUMNS,
    corpus_problem,
    evaluation_names,
    hub_reachable,
    load_corpus,
    read_backtranslations,
    sts_problems,
)
from trainers.identity import json_digest
from trainers.knobs import ConfigError, Exchangeable, KnobSet, Problem
from trainers.models.pretrained import layers_problem, model_family_problem, model_problem, wk_layers_problem
from trainers.references import resolve

if TYPE_CHECKING:  # torch's types, not the encoder's nor the objectives': those import the method registry, above
    from torch import nn

Config = Mapping[str, Any]
Examples = Callable[[Config], Sequence[Any]]


def corpus_examples(config: Config) -> list[str]:
    """Default training examples: the sentences of the ``train_corpus`` knob."""
    return load_corpus(config["train_corpus"], config["sts_source"])


def corpus_or_backtranslations(config: Config, reads_bt_file: bool) -> Sequence[Any]:
    """A method's training examples when a knob of it may read ``bt_file`` (SimCSE's and SG's back-translated
    positives): the file's (sentence, bt1, bt2) rows when it does, else the corpus sentences."""
    return read_backtranslations(config["bt_file"]) if reads_bt_file else corpus_examples(config)


def bt_file_problems(config: Config, reader: str | None, unused: str) -> list[Problem]:
    """What :func:`corpus_or_backtranslations` needs: ``reader`` names the knob value that reads ``bt_file``
    (e.g. "positive 'bt1'"), None when none does; ``unused`` says, when a bt_file is given that nothing reads,
    which knob would read it. A file nothing reads is accepted and ignored (a table's ``--set bt_file`` reaches its
    rows that take no back-translation too), but must exist: a mistyped path is refused all the same."""
    if reader is None:
        problems = []
        if config["bt_file"] and not Path(config["bt_file"]).is_file():
            problems.append(Problem("bt_file", f"{config['bt_file']!r} does not exist (it would be ignored: {unused})"))
        return problems
    if not config["bt_file"] or not Path(config["bt_file"]).is_file():
        given = f"{config['bt_file']!r} does not exist" if config["bt_file"] else "no bt_file is set"
        return [Problem("bt_file", f"{reader} needs a TSV ({', '.join(BT_COLUMNS)}) that "
                                   f"`python -m trainers.data.backtranslate` writes; {given}")]
    return []


@dataclass(frozen=True)
class Stage:
    """One training stage: the objective it trains, the examples its batches come from, and the
    knobs it sets for itself (a stage's own learning rate, epochs, patience).

    ``reads_corpus`` says whether its examples come from the ``train_corpus`` knob (unless the method reads its
    ``bt_file`` instead, :attr:`Method.reads_bt_file`): :meth:`Method.environment_problems` checks that corpus for
    every such stage, so no method checks it again. An NLI stage reads labelled pairs instead.

    ``objective`` names the stage's :class:`~trainers.objectives.base.Objective` subclass as
    ``"module:Class"``, built as ``Class(config, encoder)``; naming it keeps torch out of the
    declaration until the loop builds the stage."""

    name: str
    objective: str
    examples: Examples = corpus_examples
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reads_corpus: bool = True

    def objective_class(self) -> type[nn.Module]:
        """The stage's :class:`~trainers.objectives.base.Objective` subclass (imports torch)."""
        return resolve(self.objective)

    def build(self, config: Config, encoder: nn.Module) -> nn.Module:
        """The stage's :class:`~trainers.objectives.base.Objective` around ``encoder`` (a
        :class:`~trainers.models.encoder.SentenceEncoder`), for the stage's config (its overrides applied)."""
        return self.objective_class()(config, encoder)


Stages = Callable[[Config], tuple[Stage, ...]]


def settings_read(config: Config, stages: Sequence[Stage], knobs: KnobSet) -> dict[str, Any]:
    """What ``stages`` may read of ``config`` (of a method with ``knobs``): its knobs but the bookkeeping ones and,
    when none of the stages reads the training corpus, those that only choose its texts (:attr:`Knob.corpus`); and
    the stages with their overrides. Part of a shared stage's key (:mod:`trainers.training.shared_stages`), and
    what ``sweep plan`` groups trials by to say how many train such stages."""
    left_out = knobs.bookkeeping | (frozenset() if any(stage.reads_corpus for stage in stages) else knobs.corpus)
    counted = {k: v for k, v in config.items() if k not in left_out}
    return {"knobs": json_digest(counted),
            "stages": [[stage.name, stage.objective, dict(stage.overrides)] for stage in stages]}


@dataclass(frozen=True)
class FrozenTable:
    """What a config's frozen model (SG's BERT_F, SCT's teacher) computes once per fixed training text,
    before training (:mod:`trainers.models.frozen_outputs`): declared here so that ``sweep plan`` can size it.

    ``texts`` gives the fixed texts of the training examples the model is asked about (the table's rows);
    ``numbers_per_text`` reads the frozen model's config (transformers, no torch) for one row's size."""

    what: str
    texts: Callable[[Sequence[Any]], list[str]]
    numbers_per_text: Callable[[], int]


def single_stage(objective: str, examples: Examples = corpus_examples) -> Stages:
    """The stages of a method that trains one objective (``"module:Class"``) on one set of examples."""
    stage = Stage("train", objective, examples)
    return lambda config: (stage,)


SettingsByModel = Callable[[Config], tuple[Mapping[str, Any] | None, tuple[str, ...], str]]
"""A method's ``settings_by_model`` (:class:`Method`)."""


def settings_per_model(table: Mapping[tuple[str, ...], tuple[Any, ...]], knobs: tuple[str, ...]) -> SettingsByModel:
    """A method's ``settings_by_model`` from a table of its values of ``knobs`` per model (each row keyed by the
    model's hub ids): None for a model the table has no row for, which keeps the spec's values, by default the
    method's own (never refused, so the last part of what it returns is empty)."""

    def settings(overrides: Config) -> tuple[dict[str, Any] | None, tuple[str, ...], str]:
        model = overrides.get("model")
        values = next((values for models, values in table.items() if model in models), None)
        return (dict(zip(knobs, values)) if values else None), knobs, ""

    return settings


@dataclass(frozen=True)
class Method:
    """A method's declaration: everything about it but the torch code its stages train.

    ``knobs`` are the method's own knobs; ``defaults`` changes the default of
    common knobs for this method (e.g. its paper's batch size). ``stages`` gives
    a config's training stages, each naming its objective; it is None for methods
    that do not train (the ``none`` baseline). ``check`` finds problems that involve several knobs or
    the environment (a missing file, a hub that cannot be reached) before any
    trial starts. ``regime`` says, as warnings, where a config trained for
    ``steps`` steps leaves the paper's regime (SCT's instance queues that such a
    run cannot fill). ``exchangeable`` lists knob pairs whose values can swap without changing the
    experiment (what a spec's ``symmetric`` axes need). ``frozen_table`` declares the
    table of frozen-model outputs a config computes before training (None: none). ``after_pooling`` names
    (``"module:function"``, called with the config and the encoder's width) a learned map of the pooled vector
    that is part of the sentence vector the method produces (BERT-flow's flow): the encoder holds it
    (:attr:`trainers.models.encoder.SentenceEncoder.after_pooling`), so evaluation, selection, checkpoints and
    export see it; None for the methods whose sentence vector is the pooling's. ``views`` says, in words, the two
    views a trained config trains on (compared when a row switches method, :mod:`sweep.spec.contracts`);
    ``reads_bt_file`` whether a config reads its ``bt_file`` (one it does not read is ignored).
    ``settings_by_model`` (SCT's Table 1 and its authors' distillation table, SimCSE's Table A.1, DCLR's
    run.sh), given a row's overrides, says which knob values its paper tuned for that row's model (None: none for
    this model), which knobs it tunes, and, in words, every model's (empty: a model without them is never
    refused), for a refusal of ``--set model=`` with such a model; a row takes them for the knobs nothing sets
    (:func:`sweep.spec.sweep_spec.model_settings`); :func:`settings_per_model` makes one from a table. ``sources``
    cites, for each default a row that switches to this method may keep (``follows_method``), the paper section
    or the authors' script it comes from.
    """

    name: str
    summary: str
    knobs: KnobSet = KnobSet()
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    stages: Stages | None = None
    check: Callable[[Config], list[str]] = lambda config: []
    regime: Callable[[Config, int], list[str]] = lambda config, steps: []
    exchangeable: tuple[Exchangeable, ...] = ()
    frozen_table: Callable[[Config], FrozenTable | None] = lambda config: None
    after_pooling: str | None = None
    views: Callable[[Config], str] = lambda config: "none"
    reads_bt_file: Callable[[Config], bool] = lambda config: False
    settings_by_model: SettingsByModel | None = None
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def trains(self) -> bool:
        return self.stages is not None

    @property
    def seed_free(self) -> bool:
        """A method that trains nothing evaluates a fixed model: every seed gives the same numbers."""
        return not self.trains

    @property
    def all_knobs(self) -> KnobSet:
        every = COMMON_KNOBS + (TRAINING_KNOBS if self.trains else KnobSet()) + self.knobs
        unknown = set(self.defaults) - set(every.names)
        if unknown:
            raise ValueError(f"method {self.name!r} changes defaults of unknown knobs {sorted(unknown)}")
        return KnobSet(tuple(
            dataclasses.replace(knob, default=self.defaults[knob.name]) if knob.name in self.defaults else knob
            for knob in every
        ))

    def resolve(self, overrides: Config) -> dict[str, Any]:
        """The full config: defaults updated by ``overrides``, validated (each knob, then what only the
        whole config shows)."""
        config = self.all_knobs.resolve({k: v for k, v in overrides.items() if k != "method"})
        problems = pooling_problems(config) + (training_problems(config) if self.trains else [])
        if problems:
            raise ConfigError(problems)
        config["method"] = self.name
        return config

    def environment_problems(self, config: Config) -> list[Problem]:
        """What a resolved config needs that this machine lacks (files, the hub)."""
        found = []
        reads_corpus = self.trains and not self.reads_bt_file(config)
        if reads_corpus and any(stage.reads_corpus for stage in self.stages(config)):
            if problem := corpus_problem(config["train_corpus"], config["sts_source"]):
                found.append(Problem("train_corpus", problem))
        problem = model_problem(config["model"])
        if problem or (problem := model_family_problem(config["model"])):
            found.append(Problem("model", problem))
        elif problem := layers_problem(config["model"], config["model_layers"]):
            found.append(Problem("model_layers", problem))
        elif config["pooling"] == "wk" and (
                problem := wk_layers_problem(config["model"], config["model_layers"], config["wk_layer_start"],
                                             config["wk_window"])):
            found.append(Problem("wk_layer_start", problem))
        found += pooler_problems(config, ("pooling", "selection_pooling"))
        if config["sts_source"] == "hub" and not hub_reachable():
            found.append(Problem("sts_source", "'hub' needs the Hugging Face hub, which cannot be reached"))
        elif config["sts_source"] == "local":
            names = evaluation_names(config.get("selection_metric", "stsb"))
            found += [Problem("evaluation set", problem) for problem in sts_problems(names)]
        return found + self.check(config)


class TrialConfig(dict):
    """A trial's config as :meth:`Method.resolve` completed and validated it: every knob,
    with ``method``, and the spec's evaluation suites under :attr:`~results.record.SuiteName.KEY`. What
    the sweep resolves once per trial and the worker runs as it is."""
