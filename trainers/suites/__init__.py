"""Evaluation suites beyond STS, one module per suite (as sentence-transformers keeps one evaluator
per task), declared here without torch so that validating a spec imports none.

A spec chooses its suites with ``evaluations: [sts, senteval, ...]`` (default ``[sts]``); an entry is
a suite name or ``{name: {option: value}}``. STS always runs (model selection needs STS-B dev); every
other chosen suite evaluates each trial's best state after training, with frozen sentence vectors
from the encoder's ``encode`` (the STS evaluator's path). Each suite reads its data from a local
folder named by an environment variable (its layout in :attr:`Suite.layout` and docs/evaluations.md)
or, where a hub copy is known and the folder variable is unset, from the Hugging Face hub.

GLUE (SG-BERT Table 10) is no suite: it fine-tunes the encoder (a spec's ``glue`` key, ``python -m sweep
glue``, docs/glue.md), beside the training loop (:mod:`trainers.glue`, its data and knobs in
:mod:`trainers.glue_data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from trainers.data import DataSource
from trainers.knobs import ConfigError, Knob, KnobSet
from trainers.run_schema import Glue, SuiteName

Encode = Callable[[Sequence[str]], Any]
"""Sentences -> a [n, dim] tensor of their vectors (row i for sentence i)."""

CLASSIFIER = Knob("classifier", str, "mlp", "SentEval's classifier on frozen vectors: 'mlp' (50 hidden units, "
                  "SG-BERT Table 9) or 'logreg' (SentEval's nhid 0, SimCSE's setting).", choices=("mlp", "logreg"))
KFOLD = Knob("kfold", int, 10, "Folds of SentEval's cross-validation (MR, CR, SUBJ, MPQA; TREC and MRPC "
             "choose their L2 penalty by it).", low=2)


@dataclass(frozen=True, kw_only=True)
class Suite(DataSource):
    """One evaluation suite: where its data lives (:class:`~trainers.data.DataSource`) and which options it
    takes.

    ``module`` implements ``load_local(folder)``, ``load_hub()`` (when ``hub`` names datasets) and
    ``evaluate(encode, data, options, seed) -> {metric: value}``, metric names from
    :meth:`trainers.run_schema.Metric.suite`."""

    name: str
    summary: str
    options: KnobSet = KnobSet()

    def resolve(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The suite's options, defaults filled in; raises ConfigError naming each bad option."""
        return self.options.resolve(options)


SUITES: dict[str, Suite] = {
    SuiteName.STS: Suite(name=SuiteName.STS, summary="STS12-16, STS-B, SICK-R (always run; trainers.suites.sts)",
                     module="trainers.suites.sts"),
    SuiteName.SENTEVAL: Suite(
        name=SuiteName.SENTEVAL, summary="SentEval transfer: MR, CR, SUBJ, MPQA, SST2, TREC, MRPC (accuracy)",
        module="trainers.suites.senteval", env="SENTEVAL_DATA_DIR",
        layout="SentEval's data/downstream: MR/rt-polarity.{pos,neg}, CR/custrev.{pos,neg}, SUBJ/subj.{objective,"
        "subjective}, MPQA/mpqa.{pos,neg}, SST/binary/sentiment-{train,dev,test}, TREC/{train_5500,TREC_10}.label, "
        "MRPC/msr_paraphrase_{train,test}.txt",
        options=KnobSet((CLASSIFIER, KFOLD)),
    ),
    SuiteName.NLI: Suite(
        name=SuiteName.NLI, summary="NLI accuracy: SICK-E and SNLI, a classifier on SentEval's pair features",
        module="trainers.suites.nli", env="SENTEVAL_DATA_DIR",
        layout="SentEval's data/downstream: SICK/SICK_{train,trial,test_annotated}.txt, "
        "SNLI/{s1,s2,labels}.{train,dev,test}",
        options=KnobSet((CLASSIFIER,)),
    ),
    SuiteName.RERANKING: Suite(
        name=SuiteName.RERANKING, summary="Re-ranking MAP: AskUbuntu and SciDocs (USEB/MTEB)",
        module="trainers.suites.reranking", env="RERANKING_DATA_DIR",
        layout="askubuntu/test.jsonl and scidocs/test.jsonl, one {query, positive: [...], negative: [...]} per line",
        hub=("mteb/askubuntudupquestions-reranking", "mteb/scidocs-reranking"),
    ),
    SuiteName.MULTILINGUAL_STS: Suite(
        name=SuiteName.MULTILINGUAL_STS,
        summary="Multilingual STS: STS17 ar-ar, es-es, en-en and STS14 Spanish (Spearman)",
        module="trainers.suites.multilingual_sts", env="MULTILINGUAL_STS_DATA_DIR",
        layout="sts17-ar-ar.tsv, sts17-es-es.tsv, sts17-en-en.tsv, sts14-es.tsv, each in the STS TSV format "
        "(sentence1, sentence2, score 0-5; trainers/sts_data/SOURCES.md)",
    ),
}


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
                option, message = problem.split(":", 1)
                problems.append((f"[{index}].{name}.{option}",
                                 message.strip().replace("unknown knob", "unknown option")))
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


def evaluate_suites(chosen: Sequence[Mapping[str, Any]], encode: Encode, seed: int) -> dict[str, float]:
    """Every chosen suite but STS (the loop's own evaluator) on ``encode``'s vectors."""
    metrics: dict[str, float] = {}
    for entry in chosen:
        if entry["suite"] == SuiteName.STS:
            continue
        suite = SUITES[entry["suite"]]
        options = {k: v for k, v in entry.items() if k != "suite"}
        metrics.update(suite.implementation().evaluate(encode, suite.load(), options, seed))
    return metrics
