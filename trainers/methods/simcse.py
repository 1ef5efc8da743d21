"""Unsupervised SimCSE (Gao et al. 2021): dropout noise is the augmentation.

Each sentence is encoded twice in training mode; the two dropout masks give
two views, and in-batch InfoNCE pulls them together. Defaults are the paper's
unsupervised BERT-base setting: temperature 0.05, batch 64, lr 3e-5, max
length 32, [CLS] with an MLP on top during training only.

``positive: bt1`` (or ``bt2``) makes the positive of each sentence its
back-translation from ``bt_file`` instead of the sentence itself: SG-BERT's
"Contrastive (BT)" baseline (Table 1, Table 7; Appendix A.2: NT-Xent with
back-translated positives, [CLS]). The training examples are then the file's
rows, not ``train_corpus``.
"""

from __future__ import annotations

from typing import Any, Sequence

from trainers.common_knobs import BT_FILE_KNOBS, STEP_GRAPH_KNOBS
from trainers.knobs import Knob, KnobSet, Problem
from trainers.library_defaults import TRAINER_DEFAULTS
from trainers.method import (
    Config,
    Method,
    bt_file_problems,
    corpus_or_backtranslations,
    settings_per_model,
    single_stage,
)

BT_POSITIVES = ("bt1", "bt2")


def reads_bt_file(config: Config) -> bool:
    """A back-translated positive reads bt_file; SimCSE's own (dropout) ignores one given."""
    return config["positive"] in BT_POSITIVES


def simcse_examples(config: Config) -> Sequence[Any]:
    """(sentence, bt1, bt2) rows for a back-translated positive, else the corpus sentences."""
    return corpus_or_backtranslations(config, reads_bt_file(config))


def positive_views(config: Config) -> str:
    """The two views of SimCSE and the methods built on its batches (DCLR, DiffCSE), in words."""
    if config["positive"] in BT_POSITIVES:
        return f"the sentence and its back-translation {config['positive']}"
    return "the sentence twice, two dropout masks"


SIMCSE_PAPER = "SimCSE (Gao et al. 2021)"
BERT_BASE = ("bert-base-uncased", "google-bert/bert-base-uncased")
BERT_LARGE = ("bert-large-uncased", "google-bert/bert-large-uncased")
ROBERTA_BASE = ("roberta-base", "FacebookAI/roberta-base")
ROBERTA_LARGE = ("roberta-large", "FacebookAI/roberta-large")
"""The hub ids of the four models SimCSE and the methods built on it tune for (a model's old and new id)."""

TABLE_A1_KNOBS = ("learning_rate", "batch_size")
TABLE_A1 = {BERT_BASE: (3e-5, 64), BERT_LARGE: (1e-5, 64), ROBERTA_BASE: (1e-5, 512), ROBERTA_LARGE: (3e-5, 512)}
"""SimCSE Table A.1: unsupervised SimCSE's learning rate and batch size per model. The defaults are BERT-base's,
which every other model (the SCT paper's smaller BERTs, the bundled model) takes."""

SIMCSE_SOURCES = {
    "batch_size": f"{SIMCSE_PAPER}, Table A.1: unsupervised batch 64 (BERT-base and -large; RoBERTa 512)",
    "learning_rate": f"{SIMCSE_PAPER}, Table A.1: unsupervised lr 3e-5 (BERT-base, RoBERTa-large; BERT-large and "
    "RoBERTa-base 1e-5)",
    "max_seq_length": f"{SIMCSE_PAPER}: silent; the authors' run_unsup_example.sh: max length 32",
    "eval_every": f"{SIMCSE_PAPER}, Appendix A: 'evaluate the model every 250 training steps on the development "
    "set of STS-B' (the authors' run_unsup_example.sh: --eval_steps 125)",
    "epochs": f"{SIMCSE_PAPER}, Section 3: one epoch over 10^6 Wikipedia sentences",
    "pooling": f"{SIMCSE_PAPER}, Appendix A: [CLS] (with an MLP in training only)",
    "temperature": f"{SIMCSE_PAPER}, Table D.1: tau 0.05",
    "warmup_ratio": f"{SIMCSE_PAPER}: the authors' run_unsup_example.sh sets no warm-up (HF Trainer's 0)",
    "patience": f"{SIMCSE_PAPER}: the authors' code selects the best STS-B dev checkpoint and never stops early",
    "early_stopping_rule": f"{SIMCSE_PAPER}: no early stop (patience 0), so the rule counts nothing",
    "eval_grid": f"{SIMCSE_PAPER}: the authors' Trainer evaluates every eval_steps of the whole run, and not after "
    "the last step",
    "final_state": f"{SIMCSE_PAPER}: the authors' run_unsup_example.sh: --load_best_model_at_end, the best STS-B dev "
    "checkpoint",
    "adam_beta2": f"{SIMCSE_PAPER}: HF Trainer's AdamW, beta2 0.999",
    "train_corpus": f"{SIMCSE_PAPER}, Section 3: 10^6 English Wikipedia sentences (wiki1m), not shipped here",
    "views": f"{SIMCSE_PAPER}, Section 3: the same sentence twice, two dropout masks",
    "max_grad_norm": f"{SIMCSE_PAPER}: silent; the authors' run_unsup_example.sh keeps HF Trainer's max_grad_norm 1",
    "adam_epsilon": f"{SIMCSE_PAPER}: silent; HF Trainer's adam_epsilon 1e-8 (run_unsup_example.sh)",
    "weight_decay": f"{SIMCSE_PAPER}: silent; HF Trainer's weight_decay 0 (run_unsup_example.sh)",
    "adam_implementation": f"{SIMCSE_PAPER}: silent; HF Trainer (transformers 4.2.1) creates transformers.AdamW",
    "adam_bias_correction": f"{SIMCSE_PAPER}: silent; HF Trainer's transformers.AdamW, bias corrected",
    "eval_max_length": f"{SIMCSE_PAPER}: silent; the authors' SentEval batcher (trainers.py, evaluation.py) encodes "
    "untruncated: BERT's 512 positions",
    "fp16_schedule": f"{SIMCSE_PAPER}: silent; the authors' Trainer (transformers 4.2.1) steps the scheduler every "
    "step, a skipped fp16 update too",
}
"""Where each default of SimCSE a row that switches to it keeps comes from (``follows_method``)."""


def built_on_simcse_sources(paper: str, corpus_section: str, **script: str) -> dict[str, str]:
    """The sources of a method built on SimCSE's batches (DCLR, DiffCSE): SimCSE's, its corpus (its paper's
    ``corpus_section``: SimCSE's Wikipedia sentences) and the values of its authors' BERT-base script."""
    return {**SIMCSE_SOURCES,
            **{knob: f"{paper}: the authors' BERT-base script, {value}" for knob, value in script.items()},
            "train_corpus": f"{paper}, {corpus_section}: SimCSE's 10^6 Wikipedia sentences, not shipped here"}


def simcse_problems(config: Config) -> list[Problem]:
    """A back-translated positive needs an existing bt_file; a bt_file needs a back-translated positive."""
    reader = f"positive {config['positive']!r}" if reads_bt_file(config) else None
    return bt_file_problems(config, reader, "positive is 'dropout' (set positive to bt1 or bt2)")


SIMCSE_KNOBS = KnobSet(
    (
        Knob("temperature", float, 0.05, "Temperature tau of the InfoNCE loss.", low=1e-4, high=10.0),
        Knob("mlp_during_training", bool, True, "Put SimCSE's dense+tanh head on the pooled vector in training "
             "(evaluation never uses it)."),
        Knob("positive", str, "dropout", "Each sentence's positive: 'dropout' (the sentence again, another "
             "dropout mask: SimCSE) or its back-translation 'bt1'/'bt2' from bt_file (SG-BERT's "
             "Contrastive (BT)).", choices=("dropout",) + BT_POSITIVES),
    )
) + BT_FILE_KNOBS
"""SimCSE's knobs, which the methods built on its views (DCLR, DiffCSE) have too."""

METHOD = Method(
    name="simcse",
    summary="Unsupervised SimCSE: two dropout views of each sentence (or its back-translation), in-batch InfoNCE.",
    knobs=SIMCSE_KNOBS + STEP_GRAPH_KNOBS,
    defaults={"batch_size": 64, "learning_rate": 3e-5, "max_seq_length": 32, "pooling": "cls", "eval_every": 250,
              **TRAINER_DEFAULTS},
    stages=single_stage("trainers.objectives.simcse:SimCSEObjective", simcse_examples),
    check=simcse_problems,
    views=positive_views,
    reads_bt_file=reads_bt_file,
    settings_by_model=settings_per_model(TABLE_A1, TABLE_A1_KNOBS),
    sources=SIMCSE_SOURCES,
)
