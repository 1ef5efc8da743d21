"""Evaluation suites beyond STS, one module per suite (as sentence-transformers keeps one evaluator
per task), declared here without torch so that validating a spec imports none.

A spec chooses its suites with ``evaluations: [sts, senteval, ...]`` (default ``[sts]``); an entry is
a suite name or ``{name: {option: value}}``. STS always runs (model selection needs STS-B dev); every
other chosen suite evaluates each trial's best state after training, with frozen sentence vectors
from the encoder's ``encode`` (the STS evaluator's path). Each suite reads its data from a local
folder named by an environment variable (its layout in :attr:`Suite.layout` and docs/evaluations.md)
or, where a hub copy is known and the folder variable is unset, from the Hugging Face hub.

GLUE (:data:`GLUE`, SG-BERT Table 10) is declared here too, for its data and knobs, but is no suite: it
fine-tunes the encoder (a spec's ``glue`` key, ``python -m sweep glue``, docs/glue.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from trainers.common_knobs import COMMON_KNOBS, TRAINING_KNOBS
from trainers.data import hub_reachable
from trainers.knobs import ConfigError, Knob, KnobSet
from trainers.run_schema import Glue
from trainers.run_schema import Suite as Names

Encode = Callable[[Sequence[str]], Any]
"""Sentences -> a [n, dim] tensor of their vectors (row i for sentence i)."""

CLASSIFIER = Knob("classifier", str, "mlp", "SentEval's classifier on frozen vectors: 'mlp' (50 hidden units, "
                  "SG-BERT Table 9) or 'logreg' (SentEval's nhid 0, SimCSE's setting).", choices=("mlp", "logreg"))
KFOLD = Knob("kfold", int, 10, "Folds of SentEval's cross-validation (MR, CR, SUBJ, MPQA; TREC and MRPC "
             "choose their L2 penalty by it).", low=2)


@dataclass(frozen=True)
class Suite:
    """One evaluation suite: where its data lives and which options it takes.

    ``module`` implements ``load_local(folder)``, ``load_hub()`` (when ``hub`` names datasets) and
    ``evaluate(encode, data, options, seed) -> {metric: value}``, metric names from
    :meth:`trainers.run_schema.Metric.suite`."""

    name: str
    summary: str
    module: str
    env: str = ""
    layout: str = ""
    hub: tuple[str, ...] = ()
    options: KnobSet = KnobSet()

    def resolve(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The suite's options, defaults filled in; raises ConfigError naming each bad option."""
        return self.options.resolve(options)

    def implementation(self):
        return importlib.import_module(self.module)

    def folder(self) -> Path | None:
        value = os.environ.get(self.env, "") if self.env else ""
        return Path(value) if value else None

    def data_problem(self, *which: Any) -> str | None:
        """Why this suite's data cannot be read here (None when it can): the folder is read at plan time,
        as the STS files are; the hub only when no folder is given. ``which`` (GLUE's tasks) goes to the
        loader."""
        folder = self.folder()
        if folder is not None:
            try:
                self.implementation().load_local(folder, *which)
            except (ValueError, OSError) as error:  # DataError, and a file that is not UTF-8
                return f"${self.env}={folder}: {error}"
            return None
        if not self.hub:
            return (f"needs its data in a local folder: set ${self.env} to a folder laid out as {self.layout} "
                    "(no Hugging Face hub copy is known; see docs/evaluations.md)")
        if not hub_reachable():
            return (f"needs the Hugging Face hub datasets {list(self.hub)}, which cannot be reached (offline); "
                    f"or set ${self.env} to a folder laid out as {self.layout} (docs/evaluations.md)")
        return None

    def load(self, *which: Any) -> Any:
        folder = self.folder()
        module = self.implementation()
        return module.load_local(folder, *which) if folder is not None else module.load_hub(*which)


SUITES: dict[str, Suite] = {
    Names.STS: Suite(Names.STS, "STS12-16, STS-B, SICK-R (always run; trainers.evaluation)", "trainers.evaluation"),
    Names.SENTEVAL: Suite(
        Names.SENTEVAL, "SentEval transfer: MR, CR, SUBJ, MPQA, SST2, TREC, MRPC (accuracy)",
        "trainers.evaluations.senteval", "SENTEVAL_DATA_DIR",
        "SentEval's data/downstream: MR/rt-polarity.{pos,neg}, CR/custrev.{pos,neg}, SUBJ/subj.{objective,"
        "subjective}, MPQA/mpqa.{pos,neg}, SST/binary/sentiment-{train,dev,test}, TREC/{train_5500,TREC_10}.label, "
        "MRPC/msr_paraphrase_{train,test}.txt",
        options=KnobSet((CLASSIFIER, KFOLD)),
    ),
    Names.NLI: Suite(
        Names.NLI, "NLI accuracy: SICK-E and SNLI, a classifier on SentEval's pair features",
        "trainers.evaluations.nli", "SENTEVAL_DATA_DIR",
        "SentEval's data/downstream: SICK/SICK_{train,trial,test_annotated}.txt, SNLI/{s1,s2,labels}.{train,dev,test}",
        options=KnobSet((CLASSIFIER,)),
    ),
    Names.RERANKING: Suite(
        Names.RERANKING, "Re-ranking MAP: AskUbuntu and SciDocs (USEB/MTEB)",
        "trainers.evaluations.reranking", "RERANKING_DATA_DIR",
        "askubuntu/test.jsonl and scidocs/test.jsonl, one {query, positive: [...], negative: [...]} per line",
        hub=("mteb/askubuntudupquestions-reranking", "mteb/scidocs-reranking"),
    ),
    Names.MULTILINGUAL_STS: Suite(
        Names.MULTILINGUAL_STS, "Multilingual STS: STS17 ar-ar, es-es, en-en and STS14 Spanish (Spearman)",
        "trainers.evaluations.multilingual_sts", "MULTILINGUAL_STS_DATA_DIR",
        "sts17-ar-ar.tsv, sts17-es-es.tsv, sts17-en-en.tsv, sts14-es.tsv, each in the STS TSV format "
        "(sentence1, sentence2, score 0-5; trainers/sts_data/SOURCES.md)",
    ),
}


GLUE_DEFAULTS = {"max_seq_length": 128, "batch_size": 32, "epochs": 3, "learning_rate": 2e-5}
"""SG-BERT's appendix (A.4) states no fine-tuning hyperparameters: these are Hugging Face's run_glue
example's (max length 128, batch 32, 3 epochs, AdamW at 2e-5, linear decay, no warm-up or decay)."""
GLUE_KNOBS = KnobSet(
    tuple(dataclasses.replace(knob, default=GLUE_DEFAULTS.get(knob.name, knob.default))
          for knob in (*TRAINING_KNOBS, *COMMON_KNOBS)
          if knob.name in ("train_limit", "max_seq_length", "batch_size", "epochs", "max_steps", "optimizer",
                           "learning_rate", "adam_beta1", "adam_beta2", "weight_decay", "warmup_ratio",
                           "lr_schedule", "eval_batch_size"))
    + (Knob("eval_every", int, 0, "Score the first 10% of each validation set (the selection part) every N "
            "training steps, and after the last; 0 = at the end of each epoch.", low=0),)
)
"""GLUE fine-tuning's knobs (the spec's ``glue`` mapping): the training loop's own declarations, with
:data:`GLUE_DEFAULTS`, and when to score the selection part."""
GLUE = Suite(
    Glue.KEY, "GLUE fine-tuning: QNLI, SST-2, CoLA, MRPC, RTE (SG-BERT Table 10; python -m sweep glue)",
    "trainers.evaluations.glue_data", "GLUE_DATA_DIR",
    "{QNLI,SST-2,CoLA,MRPC,RTE}/{train,dev}.tsv (GLUE's download layout; docs/glue.md)",
    hub=("nyu-mll/glue",), options=GLUE_KNOBS,
)
"""GLUE's data and options. Not in :data:`SUITES`: it fine-tunes the encoder (``python -m sweep glue``)
rather than classifying frozen vectors after a trial."""


def parse_glue(value: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A spec's ``glue`` mapping -> (its knobs with defaults and ``tasks``, problems as (key, message))."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        return {}, [("", f"expected a mapping of fine-tuning knobs and '{Glue.TASKS_KEY}', got {value!r}")]
    options = dict(value)
    tasks = options.pop(Glue.TASKS_KEY, list(Glue.TASKS))
    problems = []
    if (not isinstance(tasks, list) or not tasks or any(t not in Glue.TASKS for t in tasks)
            or len(set(tasks)) < len(tasks)):
        problems.append((f".{Glue.TASKS_KEY}", f"expected a non-empty list of distinct tasks from {list(Glue.TASKS)}, "
                                               f"got {tasks!r}"))
    try:
        resolved = GLUE.resolve(options)
    except ConfigError as error:
        resolved = {}
        for problem in error.problems:
            knob, message = problem.split(":", 1)
            problems.append((f".{knob}", message.strip()))
    return {**resolved, Glue.TASKS_KEY: tasks}, problems


def parse_evaluations(value: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """A spec's ``evaluations`` value -> (each suite as ``{"suite": name, **options}`` with defaults,
    problems as (key, message)). ``sts`` is always first: model selection needs it."""
    entries = list(Names.DEFAULT) if value is None else value
    if not isinstance(entries, list) or not entries:
        return [], [("", f"expected a non-empty list of suites {list(SUITES)}, got {value!r}")]
    chosen, problems = [{"suite": Names.STS}], []
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
                option, message = problem.split(":", 1)
                problems.append((f"[{index}].{name}.{option}",
                                 message.strip().replace("unknown knob", "unknown option")))
            continue
        if name != Names.STS and all(c["suite"] != name for c in chosen):
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


def evaluate_suites(chosen: Sequence[Mapping[str, Any]], encode: Encode, seed: int) -> dict[str, float]:
    """Every chosen suite but STS (the loop's own evaluator) on ``encode``'s vectors."""
    metrics: dict[str, float] = {}
    for entry in chosen:
        if entry["suite"] == Names.STS:
            continue
        suite = SUITES[entry["suite"]]
        options = {k: v for k, v in entry.items() if k != "suite"}
        metrics.update(suite.implementation().evaluate(encode, suite.load(), options, seed))
    return metrics
