"""SCT: self-supervised cross-view training with instance queues (Limkonchotiwat et al.).

Two views of each sentence go through the online encoder f_theta (plus the
projector h) and through a reference encoder f_ref. The online distribution
of view 1 over queue D2 is trained to match the reference distribution of
view 2 over D2, and vice versa (Eq. 2); D1 and D2 are FIFO queues of the
reference vectors of views 1 and 2 (Section 3.1). Mean pooling, all encoder
outputs normalised. The batch is enqueued at the start of its step (Section
3.1), so each distribution is over the queue extended by the batch's
reference vectors of that view, as in the authors' code; the oldest entries
make room after the step. The 'contrastive' ablation is InfoNCE, the other
view's reference vector the positive: against the queue (MoCo-like), or with
``queues='in_batch'`` against the batch's other reference vectors (SimCSE-like,
what the paper's Table 4 row runs: Section 5.4's "contrastive learning similar
to SimCSE").

f_ref is by default the online encoder itself, which encodes each view again
without gradient (the paper: "the architecture and weights of f_ref and f_theta
are identical", and "the views x1 and x2 are again encoded by the f_ref(.)
encoder"; the authors' code runs that second no-grad pass, with a dropout mask
of its own); ``reference='online_same_pass'`` takes the online pass's vectors
under stop-gradient instead (no second pass, the same dropout mask: the default
here until 2026-11-28); ``'momentum'`` is Table 4's momentum encoder and
``'frozen'`` keeps the model as it was before training.

Views: back-translations from a precomputed file (``bt1``/``bt2``, the paper's
default, ``bt1`` twice for "same BT"), masked-LM rewriting (``mlm``, 15%),
one-word synonym replacement (``synonym``, WordNet), ConSERT's embedding-layer
augmentations (the same random transformation for the online and the
reference pass of a view), or ``dropout_mask``. Offline, the defaults are
ConSERT's shuffle and feature cutoff on the unlabelled STS sentences, and
they are recorded in every run's params.

Distillation (Section 3.4, Tables 6 and 7): a frozen teacher f_large encodes
the text of each view (the plain sentence for embedding-layer views) and
fills its own two queues; the student's pooled vector, mapped into the
teacher's space (a Linear + tanh when the widths differ, as in the authors'
code), is trained with ``distillation`` (L_CD, L_MSE, L_ConGen or L_CKD) plus
L_SCT unless ``self_supervised`` is off. The ablation knobs act on L_SCT. The
teacher is frozen and in eval mode, so its vectors of the fixed texts of both
views are computed in one batched pass before training and read by every step,
shared by the trials of a node with ``share_frozen_outputs``
(:mod:`trainers.models.frozen_outputs`); random rewrites (mlm, synonym: made once
before training, or in every step, ``rewrite_views``) are encoded in every step, as one batch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from trainers.common_knobs import (
    AUGMENTATIONS,
    BT_FILE_KNOBS,
    FROZEN_OUTPUT_KNOBS,
    POOLINGS,
    RATE_KNOBS,
    STEP_GRAPH_KNOBS,
    pooler_problems,
)
from trainers.data.sources import BT_COLUMNS, load_corpus, read_backtranslations
from trainers.data.wordnet import wordnet_problem
from trainers.knobs import Knob, KnobSet, Problem
from trainers.library_defaults import FIT_DEFAULTS, FIT_SOURCES
from trainers.method import Config, FrozenTable, Method, single_stage
from trainers.models.pretrained import mlm_problem, model_config, model_problem

# ---------------------------------------------------------------- views and distillation (Section 3.4, Tables 6, 7)
# A frozen teacher f_large is distilled into the student with one of DISTILLATION_LOSSES, plus L_SCT unless
# ``self_supervised`` is off; the teacher itself is :class:`trainers.objectives.sct_distillation.Teacher`.

TEXT_VIEWS = ("bt1", "bt2")
"""Views that are a column of the back-translation file."""
REWRITE_VIEWS = ("mlm", "synonym")
"""Views that rewrite the sentence at random (once before training, or in every step: ``rewrite_views``); never
in the teacher's table."""
REWRITE_TIMES = ("once", "per_step")

DISTILLATION_LOSSES = ("cd", "mse", "congen", "ckd")
"""The distillation losses of :mod:`trainers.losses.distillation`, by their names in the knob."""

DISTILLATION_KNOBS = KnobSet(
    (
        Knob("distillation", str, "none", "Distillation loss with a teacher (Tables 6 and 7): 'cd' (L_CD, "
             "Eq. 4), 'mse', 'congen' or 'ckd'; 'none' trains L_SCT alone.",
             choices=("none",) + DISTILLATION_LOSSES),
        Knob("self_supervised", bool, True, "Add L_SCT to the distillation loss (False: the distillation "
             "loss alone, Table 7)."),
        Knob("teacher", str, "", "Teacher f_large for distillation: a Hugging Face model id or folder (the "
             "paper: princeton-nlp/unsup-simcse-bert-large-uncased)."),
        Knob("teacher_pooling", str, "mean", "How the teacher pools its token vectors.", choices=POOLINGS),
        Knob("distillation_map", str, "encoder", "Where the student's map into a wider (or narrower) teacher's "
             "space, Linear + tanh, lives: 'encoder' (the authors' SCT_main_distillation.py: the student's last "
             "module, so L_SCT and the distillation loss read the mapped vectors and the model selected, tested "
             "and exported ends with it) or 'loss' (inside the distillation loss only: L_SCT and the evaluated "
             "model use the pooled vector). No map where the widths are equal.", choices=("encoder", "loss")),
    )
)


def distillation_problems(config: Config) -> list[Problem]:
    """What a config's distillation knobs lack or contradict: a teacher that cannot be loaded here (or lacks the
    pooler its pooling names), a teacher without distillation, or no loss at all."""
    if config["distillation"] == "none":
        problems = [Problem("teacher", "given, but distillation is 'none'")] if config["teacher"] else []
        if not config["self_supervised"]:
            problems.append(Problem("self_supervised", "off with distillation 'none' leaves no loss to train"))
        return problems
    if not config["teacher"]:
        return [Problem("teacher", f"distillation {config['distillation']!r} needs a teacher model (id or folder)")]
    problem = model_problem(config["teacher"])
    return [Problem("teacher", problem)] if problem else pooler_problems(config, ("teacher_pooling",), "teacher")


def view_texts(example: Any, view: str) -> str:
    """The text a fixed (not rewritten) view of ``example`` starts from: its back-translation column for
    a text view, else the sentence (the example itself, or the first column of a back-translation row)."""
    if view in TEXT_VIEWS:
        return example[BT_COLUMNS.index(view)]
    return example if isinstance(example, str) else example[0]


def teacher_table(config: Config) -> FrozenTable | None:
    """The teacher's vectors of the texts of both views that are not rewritten at random (None without one)."""
    if config["distillation"] == "none":
        return None
    fixed = [view for view in (config["view1"], config["view2"]) if view not in REWRITE_VIEWS]
    return FrozenTable(
        "the teacher's vectors",
        lambda examples: list(dict.fromkeys(view_texts(e, v) for v in fixed for e in examples)),
        lambda: model_config(config["teacher"]).hidden_size,
    )


# ---------------------------------------------------------------- the method

VIEWS = AUGMENTATIONS + ("dropout_mask",) + TEXT_VIEWS + REWRITE_VIEWS


def sct_examples(config: Config) -> Sequence[Any]:
    """(sentence, bt1, bt2) rows when a view is a back-translation (the objective takes the sentence of a row for
    its other view); with a ``bt_file`` that no view reads, its sentences, so that a table's rows with other views
    (Dropout mask, MLM, synonyms) train on the sentences its back-translation rows do; else the corpus."""
    if set((config["view1"], config["view2"])) & set(TEXT_VIEWS):
        return read_backtranslations(config["bt_file"])
    if config["bt_file"]:
        return [row[0] for row in read_backtranslations(config["bt_file"])]
    return load_corpus(config["train_corpus"], config["sts_source"])


def sct_problems(config: Config) -> list[Problem]:
    """What the views, their files and models, and the distillation need that is missing or contradictory."""
    problems = []
    views = {config["view1"], config["view2"]}
    if views & set(TEXT_VIEWS):
        if config["bt_file"] and not Path(config["bt_file"]).is_file():
            problems.append(Problem("bt_file", f"{config['bt_file']!r} does not exist (expected a TSV with columns "
                            f"{', '.join(BT_COLUMNS)})"))
        elif not config["bt_file"]:
            problems.append(
                Problem("view1/view2", f"a back-translation view needs bt_file, a TSV ({', '.join(BT_COLUMNS)}) that "
                "`python -m trainers.data.backtranslate` writes on a machine with translation models; "
                f"got {config['bt_file']!r}")
            )
    elif config["bt_file"]:  # no view reads it: its sentences are the corpus (sct_examples)
        if not Path(config["bt_file"]).is_file():
            problems.append(Problem("bt_file", f"{config['bt_file']!r} does not exist (expected a TSV with columns "
                            f"{', '.join(BT_COLUMNS)}; no view reads it, so its sentences would be the corpus)"))
    if "mlm" in views:
        problem = mlm_problem(config["mlm_model"])
        if problem:
            problems.append(Problem("mlm_model", problem))
    elif config["mlm_model"]:
        problems.append(Problem("mlm_model", "given, but neither view is mlm"))
    if config["rewrite_views"] != "once" and not views & set(REWRITE_VIEWS):
        problems.append(Problem("rewrite_views", f"{config['rewrite_views']!r}, but neither view rewrites the "
                                f"sentence ({', '.join(REWRITE_VIEWS)})"))
    if "synonym" in views and (problem := wordnet_problem()):
        problems.append(Problem("view1/view2", f"the synonym view {problem}"))
    if config["objective"] == "contrastive" and not config["cross_view"]:
        problems.append(Problem("cross_view", "the contrastive objective is always cross-view"))
    problems += distillation_problems(config)
    return problems


TUNED_KNOBS = ("learning_rate", "queue_size", "tau_ref", "tau_theta")
"""The knobs SCT tunes per model size, in the order of :data:`TABLE1` and :data:`DISTILLATION_SETTINGS`."""
MODEL_SIZES = {
    "BERT-Tiny": ("google/bert_uncased_L-2_H-128_A-2", "prajjwal1/bert-tiny"),
    "BERT-Mini": ("google/bert_uncased_L-4_H-256_A-4", "prajjwal1/bert-mini"),
    "BERT-Small": ("google/bert_uncased_L-4_H-512_A-8", "nreimers/BERT-Small-L-4_H-512_A-8", "prajjwal1/bert-small"),
    "BERT-Base": ("bert-base-uncased", "google-bert/bert-base-uncased"),
    "BERT-Large": ("bert-large-uncased", "google-bert/bert-large-uncased"),
}
"""The model ids of each size the SCT paper trains."""
TABLE1 = {
    "BERT-Tiny": (5e-4, 131072, 0.03, 0.04),
    "BERT-Mini": (3e-4, 131072, 0.01, 0.03),
    "BERT-Small": (3e-4, 65536, 0.02, 0.03),
    "BERT-Base": (5e-4, 65536, 0.04, 0.05),
    "BERT-Large": (5e-4, 16384, 0.04, 0.05),
}
"""SCT Table 1: the learning rate, queue size k, tau_ref and tau_theta tuned per model (:data:`TUNED_KNOBS`)."""
DISTILLATION_SETTINGS = {
    "BERT-Tiny": (5e-4, 131072, 0.03, 0.04),
    "BERT-Mini": (1e-4, 65536, 0.04, 0.05),
    "BERT-Small": (1e-4, 131072, 0.04, 0.05),
    "BERT-Base": (1e-4, 65536, 0.04, 0.05),
}
"""The same knobs tuned per student for distillation, which the paper does not give: the authors' README.md
('Parameters', Distillation; their Running_distillation_script.sh runs BERT-Small's). BERT-Large is the teacher."""


def tuned_settings(overrides: Config) -> tuple[dict[str, Any] | None, tuple[str, ...], str]:
    """The settings SCT tunes for a row's model (None where it has none), the knobs it tunes, and every size's,
    in words: Table 1's, or for a distillation row the authors' distillation table's."""
    distilled = overrides.get("distillation", "none") != "none"
    table, where = ((DISTILLATION_SETTINGS, "the SCT authors' README tunes distillation per student") if distilled
                    else (TABLE1, "SCT Table 1 tunes them per model"))
    model = overrides.get("model")
    values = next((table[size] for size, models in MODEL_SIZES.items() if model in models and size in table), None)
    every = "; ".join(f"{size} ({MODEL_SIZES[size][0]}): " + ", ".join(f"{k} {v:g}" for k, v in zip(TUNED_KNOBS, row))
                      for size, row in table.items())
    return (dict(zip(TUNED_KNOBS, values)) if values else None), TUNED_KNOBS, f"{where}: {every}"


def queue_fill_warnings(config: Config, steps: int) -> list[Problem]:
    """An instance queue holds real sentence vectors only after k / (vectors per step) steps; until
    then most of it is the random vectors it started with, far from the paper's regime."""
    if config["queues"] == "in_batch" or not config["queue_update"]:
        return []  # no queue, or the ablation that keeps the random one on purpose
    per_step = config["batch_size"] * (2 if config["queues"] == "one" else 1)
    fill = math.ceil(config["queue_size"] / per_step)
    if steps >= fill:
        return []
    return [
        Problem("queue_size", f"a queue of k = {config['queue_size']:,} takes {fill:,} steps to fill at {per_step} "
        f"vectors per step (batch_size {config['batch_size']}); this trial trains {steps:,} steps, so most "
        f"of the queue stays the random vectors it started with: train >= {fill:,} steps (max_steps) "
        f"or lower queue_size to <= {steps * per_step:,}")
    ]


METHOD = Method(
    name="sct",
    summary="SCT: cross-view similarity-distribution matching against instance queues, optionally distilled.",
    knobs=KnobSet(
        (
            Knob("view1", str, "shuffle", "Augmentation making view 1: bt1/bt2 (back-translation file), mlm "
                 "(masked-LM rewriting of 15% of the tokens), synonym (one WordNet synonym), a ConSERT "
                 "augmentation, or dropout_mask. The paper uses bt1.", choices=VIEWS),
            Knob("view2", str, "feature_cutoff", "Augmentation making view 2 (paper: bt2; 'same BT' = bt1).",
                 choices=VIEWS),
            Knob("mlm_model", str, "", "Masked LM (id or folder, with its MLM head) that rewrites the mlm view."),
            Knob("rewrite_views", str, "once", "When the mlm and synonym views rewrite a sentence: 'once', before "
                 "training, one fixed rewrite of each training sentence per view, two augmented copies of the "
                 "corpus as the back-translation views are two files (Section 5.3.3 measures 'our training and "
                 "augmentation datasets', Table 5; the released code has neither view); 'per_step', afresh each "
                 "time the sentence is in a batch.", choices=REWRITE_TIMES),
            Knob("tau_theta", float, 0.03, "Temperature of the online distributions.", low=1e-4, high=10.0),
            Knob("tau_ref", float, 0.02, "Temperature of the reference distributions.", low=1e-4, high=10.0),
            Knob("queue_size", int, 65536, "Length k of each instance queue.", low=1),
            Knob("queues", str, "two", "'two' (D1, D2), 'one' (a single shared queue) or 'in_batch' (no queue: "
                 "the batch's reference vectors).", choices=("two", "one", "in_batch")),
            Knob("queue_update", bool, True, "Enqueue the reference vectors after each step (False: the random "
                 "initial negatives stay)."),
            Knob("objective", str, "kl", "'kl' (L_SCT, Eq. 2); Tables 4/6's 'KL -> CE', which the paper does not "
                 "define: 'ce' = soft cross-entropy -sum_j p_ref(j) log p_online(j), as the authors' code writes "
                 "it (same gradient as KL, so it trains as 'kl' does), or 'ce_hard' = cross-entropy against the "
                 "reference's argmax queue entry (not in their code); or 'contrastive' (distribution -> "
                 "contrastive): InfoNCE with the other view's reference vector as the positive, against the queue "
                 "(MoCo-like) or, with queues 'in_batch', the batch's (SimCSE-like: Table 4's row).",
                 choices=("kl", "ce", "ce_hard", "contrastive")),
            Knob("cross_view", bool, True, "Compare across views (False: the identical-view ablation)."),
            Knob("reference", str, "online", "f_ref: the online encoder, which encodes each view again without "
                 "gradient, a dropout mask of its own ('online': Section 3.1's 'again encoded by f_ref', as the "
                 "authors' code does); the online pass's own vectors under stop-gradient ('online_same_pass', no "
                 "second pass: this project's default until 2026-11-28); a momentum encoder ('momentum', Table 4); "
                 "or the model as it was before training ('frozen').",
                 choices=("online", "online_same_pass", "momentum", "frozen")),
            Knob("momentum", float, 0.999, "EMA factor of the momentum reference (the paper gives none; MoCo's "
                 "0.999).", low=0.0, high=1.0),
            Knob("projector", bool, True, "Use the projector h (False: the 'no MLPs' ablation)."),
            Knob("projector_expansion", int, 10, "Expansion factor w of the projector.", low=1),
        )
    )
    + BT_FILE_KNOBS
    + DISTILLATION_KNOBS
    + RATE_KNOBS
    + FROZEN_OUTPUT_KNOBS
    + STEP_GRAPH_KNOBS,
    defaults={
        "pooling": "mean",
        "batch_size": 128,
        "epochs": 10,
        "learning_rate": 3e-4,
        "warmup_ratio": 0.1,
        "eval_every": 64,
        "max_seq_length": 128,
        "eval_max_length": 128,
        "train_corpus": "sts_all_sentences",
        **FIT_DEFAULTS,  # Section 4.1 is silent on these: the authors' SCT_main.py and its fit()
        "adam_bias_correction": False,
        "fp16_schedule": "hold",
        "patience": 7,
        "early_stopping_rule": "epoch_ends",
    },
    stages=single_stage("trainers.objectives.sct:SCTObjective", sct_examples),
    check=sct_problems,
    regime=queue_fill_warnings,
    frozen_table=teacher_table,
    after_pooling="trainers.objectives.sct_distillation:student_map_from_config",
    views=lambda config: f"{config['view1']} + {config['view2']}",
    reads_bt_file=lambda config: bool(config["bt_file"]),
    settings_by_model=tuned_settings,
    sources={knob: f"SCT (Limkonchotiwat et al.), {what}" for knob, what in {
        "batch_size": "Section 4.1: batch 128", "epochs": "Section 4.1: ten epochs", "learning_rate": "Table 1: "
        "BERT-Small lr 3e-4", "warmup_ratio": "Section 4.1: linear warm-up over 10% of the training data",
        "pooling": "the authors' SCT_main.py: sentence-transformers' Pooling, mean", "max_seq_length": "silent; "
        "the authors' Running_script.sh and Running_distillation_script.sh: max_seq_langth=128",
        "eval_max_length": "silent; the saved model's max_seq_length 128 (Running_script.sh), at which the authors' "
        "dev evaluator and evaluation.py encode",
        "train_corpus": "Section 4.1: NLI texts, hub only; offline the seven STS sets' unlabelled texts",
        "patience": "Section 4.1 keeps the best dev checkpoint and is silent on stopping; the authors' SCT_main.py: "
        "--early_stopping_patience 7",
        "early_stopping_rule": "silent; the authors' sentence-transformers fork stops after patience epochs whose "
        "end scored below the best epoch end",
        "adam_beta2": "Section 4.1: AdamW, beta2 0.999", **FIT_SOURCES,
        "final_state": "Section 4.1: the best checkpoint is the final model",
        "adam_bias_correction": "silent; the authors' SCT_main.py: correct_bias False",
        "fp16_schedule": "silent; the authors' fit(use_amp=True) does not step the scheduler when the loss scale "
        "changed",
        "distillation_map": "Eq. 4's c_theta, Section 3.2's projected z_theta: open; the authors' "
        "SCT_main_distillation.py ends the student with models.Dense(..., Tanh())",
        "views": "Section 3.1: two back-translations; offline shuffle + feature cutoff",
    }.items()},
)
