"""SG and SG-OPT: self-guided contrastive learning (Kim et al., ACL 2021).

BERT is cloned into BERT_F (fixed) and BERT_T (tuned). BERT_T's last-layer
[CLS] vector c_i is pulled towards views h_{i,k} = p(H_{i,k}) that BERT_F's
layers k = 0..l give of the same sentence, and pushed from other sentences'
views (Section 3). After training only BERT_T is kept, and its [CLS] is the
sentence vector. Defaults are the paper's (Table 8).

"BERT_F is fixed during training" (Section 3.1): its parameters are never
updated. The paper is silent on its dropout, so ``bert_f_dropout`` follows the
authors' code: galsang/SG-BERT loss.py builds BERT_F in eval mode, but
modules.py ``fit()`` sets the whole loss module, BERT_F with it, to train mode
at each epoch's start and after each evaluation, so their views had dropout
noise, drawn anew each step. By default (true) BERT_F therefore reads each
step's batch in train mode, without gradient, where the table below is read
otherwise; its dropout draws from torch's generator, which the trial's seed
sets and every checkpoint keeps, just before BERT_T's (the authors' Loss.forward
also runs BERT_F first). No table is built then, whatever
``share_frozen_outputs`` says. With ``bert_f_dropout: false`` BERT_F runs
without dropout, so a sentence's views are a fixed function of the sentence:
they are computed for the whole corpus in one batched pass before training, a
table of sentences x views x width (pooled layers, not token states: 7 x 384
float32 = 10.8 kB a sentence for the bundled model, 13 x 768 = 40 kB for
BERT-base), and read by every step (:mod:`trainers.models.frozen_outputs`);
with ``share_frozen_outputs`` (on by default) the trials of a node share one
table.

``bt_view: bt1`` (or ``bt2``) with ``bt_file`` joins each sentence's back-translation to SG-OPT: SG-BERT's
"BT + SG-OPT" (Section 6, Table 7). The training examples are then the file's rows. The paper's one
sentence on it ("inserting the original sentence into BERT_T and its back-translation into BERT_T")
leaves open which network reads the back-translation: ``bt_into`` chooses
(:func:`trainers.losses.self_guided.sg_opt_bt_loss`).

``loss: bt`` with ``bt_view`` and ``bt_file`` is SG-BERT's Contrastive (BT) baseline (Appendix A.2: "identical
with our Contrastive (SG) model, except that it utilizes back-translation to generate positive samples ...
trained with the NT-Xent loss"): L_base over BERT_T's [CLS] of each sentence and of its back-translation, both
through f, plus lambda L_reg against BERT_F. BERT_F only anchors L_reg there, so no table of its views is built.
"""

from __future__ import annotations

from typing import Any, Sequence

from trainers.common_knobs import BT_FILE_KNOBS, FROZEN_OUTPUT_KNOBS, STEP_GRAPH_KNOBS
from trainers.data.sources import BT_COLUMNS
from trainers.knobs import Knob, KnobSet, Problem
from trainers.library_defaults import FIT_DEFAULTS, FIT_SOURCES
from trainers.method import Config, FrozenTable, Method, bt_file_problems, corpus_or_backtranslations, single_stage
from trainers.models.pretrained import model_config

LOSSES = ("sg", "opt1", "opt2", "opt3", "bt")
BT_LOSSES = ("opt3", "bt")
"""The losses a back-translation (``bt_view``) takes part in: BT + SG-OPT (Table 7) and Contrastive (BT)."""
VIEW_POOLINGS = ("max", "mean")
"""Poolings p of BERT_F's layers into views (:func:`trainers.models.pooling.pool_layer`)."""
BT_VIEWS = ("none", "bt1", "bt2")
BT_INTO = ("fixed", "tuned", "fixed_join")
"""Where the back-translation enters (:func:`trainers.losses.self_guided.sg_opt_bt_loss`)."""


def reads_bt_file(config: Config) -> bool:
    return config["bt_view"] != "none"


def sg_examples(config: Config) -> Sequence[Any]:
    """(sentence, bt1, bt2) rows when a back-translation joins SG-OPT, else the corpus sentences."""
    return corpus_or_backtranslations(config, reads_bt_file(config))


def bert_f_texts(config: Config, examples: Sequence[Any]) -> list[str]:
    """The texts BERT_F reads: the sentences, and (``bt_into`` fixed, fixed_join) their back-translations,
    or only those (fixed)."""
    if not reads_bt_file(config):
        return list(examples)
    column = BT_COLUMNS.index(config["bt_view"])
    translations = [row[column] for row in examples]
    if config["bt_into"] == "fixed":
        return translations
    originals = [row[0] for row in examples]
    return originals + translations if config["bt_into"] == "fixed_join" else originals


def views_table(config: Config) -> FrozenTable | None:
    """BERT_F's views of each text it reads: layers skip_first_layers..L pooled, each of the model's width;
    None for loss 'bt' (Contrastive (BT) contrasts BERT_T's vectors only: BERT_F is read by L_reg alone), and
    with ``bert_f_dropout`` (BERT_F's views are drawn anew each step: there is nothing to table)."""
    if config["loss"] == "bt" or config["bert_f_dropout"]:
        return None

    def numbers_per_text() -> int:
        shape = model_config(config["model"])
        layers = config["model_layers"] or shape.num_hidden_layers
        return (layers + 1 - config["skip_first_layers"]) * shape.hidden_size

    return FrozenTable("BERT_F's views", lambda examples: bert_f_texts(config, examples), numbers_per_text)


def sg_problems(config: Config) -> list[Problem]:
    """The back-translation file (or the corpus), and the losses a back-translation takes part in."""
    reader = f"bt_view {config['bt_view']!r}" if reads_bt_file(config) else None
    problems = bt_file_problems(config, reader, "bt_view is 'none' (set bt_view to bt1 or bt2)")
    if reads_bt_file(config) and config["loss"] not in BT_LOSSES:
        problems.append(Problem("bt_view", f"a back-translation joins SG-OPT's loss (loss 'opt3', SG-BERT Table 7) "
                        f"or is Contrastive (BT)'s positive (loss 'bt', Appendix A.2); got loss {config['loss']!r}"))
    if config["loss"] == "bt" and not reads_bt_file(config):
        problems.append(Problem("loss", "'bt' (Contrastive (BT), SG-BERT Appendix A.2) takes each sentence's "
                        "back-translation as its positive: set bt_view to bt1 or bt2, a column of bt_file"))
    if config["cuda_graph"] and reads_bt_file(config):
        problems.append(Problem("cuda_graph", "records the step of SG and SG-OPT on the corpus sentences; a "
                        "back-translated view (bt_view) is not in it: set cuda_graph false or bt_view 'none'"))
    return problems


def views_named(config: Config) -> str:
    """What a row's positives are: Contrastive (BT)'s, BERT_T's reading of the back-translation; else BERT_F's
    layer views, with the back-translation's joined where ``bt_view`` is set."""
    if config["loss"] == "bt":
        return f"BERT_T's [CLS] of the back-translation ({config['bt_view']})"
    return "BERT_F's hidden states" + (f" + {config['bt_view']}" if config["bt_view"] != "none" else "")


METHOD = Method(
    name="sg",
    summary="SG / SG-OPT: BERT_T's [CLS] contrasted with views from every layer of a frozen BERT_F.",
    knobs=KnobSet(
        (
            Knob("loss", str, "opt3", "Objective: 'sg' (L_base, NT-Xent over c and h), 'opt1', 'opt2' (single "
                 "sampled view), 'opt3' (SG-OPT: all l+1 views), 'bt' (Contrastive (BT), Appendix A.2: L_base "
                 "over BERT_T's [CLS] of each sentence and of its back-translation, bt_view of bt_file; no views "
                 "of BERT_F, which only anchors L_reg). Every loss adds lambda L_reg.", choices=LOSSES),
            Knob("temperature", float, 0.01, "Temperature tau of phi.", low=1e-5, high=10.0),
            Knob("reg_lambda", float, 0.1, "Weight lambda of L_reg = ||BERT_F - BERT_T||^2.", low=0.0),
            Knob("view_pooling", str, "max", "Pooling p of BERT_F's layers into views. The paper uses max; the "
                 "authors' public code defaults to mean.", choices=VIEW_POOLINGS),
            Knob("projection_head", bool, True, "Pass c and h through the projection head f before the loss."),
            Knob("projection_hidden", int, 4096, "Width of both layers of f.", low=1),
            Knob("skip_first_layers", int, 0, "Drop views of layers 0..N-1 (the paper's SentEval variant).", low=0),
            Knob("bt_view", str, "none", "Each sentence's back-translation (bt1 or bt2 of bt_file): with loss opt3 "
                 "it joins SG-OPT as a positive, SG-BERT's 'BT + SG-OPT' (Table 7); with loss bt it is "
                 "Contrastive (BT)'s positive (Appendix A.2). The training examples are then bt_file's rows. "
                 "'none': SG/SG-OPT alone on train_corpus.", choices=BT_VIEWS),
            Knob("bt_into", str, "fixed", "Which network reads the back-translation of bt_view. The paper leaves it "
                 "open (Section 6: 'the original sentence into BERT_T and its back-translation into BERT_T'), so "
                 "this is our choice. 'fixed' (default: the framework's two inputs filled, the second BERT_T read "
                 "as BERT_F): BERT_F's l+1 views of the back-translation replace the original's; 'tuned' (as "
                 "printed, BERT_F keeps the original): BERT_T's [CLS] of the back-translation is one more guide "
                 "beside the original's l+1 views; 'fixed_join': BERT_F's views of both, 2(l+1) guides. Does not "
                 "apply to loss bt, where BERT_T reads both texts by definition, and is ignored there (not "
                 "refused: a `--set bt_into=...` for sg_bt.yaml's BT + SG-OPT row reaches its Contrastive (BT) "
                 "row too).", choices=BT_INTO),
            Knob("bert_f_dropout", bool, True, "BERT_F's dropout while BERT_T trains. The paper only says that "
                 "BERT_F is fixed (Section 3.1: its parameters are not updated), so the default is the authors' "
                 "code: galsang/SG-BERT loss.py builds BERT_F in eval mode, but modules.py fit() sets the whole "
                 "loss module, BERT_F in it, to train mode at each epoch's start and after each evaluation. true "
                 "(the authors' runs): BERT_F reads each step's batch in train mode, without gradient, its dropout "
                 "drawn anew each step (from the trial's seeded torch generator, before BERT_T's); no table of its "
                 "views is built, so share_frozen_outputs and the frozen_outputs_* knobs do not apply, and with "
                 "cuda_graph its pass runs before each replay, outside the graph. false: BERT_F without dropout, "
                 "its views a fixed function of the sentence, computed once for the corpus as a table (one forward "
                 "less per step, the same views at every step). No effect with loss bt, whose BERT_F only anchors "
                 "L_reg."),
        )
    )
    + FROZEN_OUTPUT_KNOBS
    + BT_FILE_KNOBS
    + STEP_GRAPH_KNOBS,
    defaults={
        "pooling": "cls",
        "batch_size": 16,
        "learning_rate": 5e-5,
        "adam_beta2": 0.9,
        "epochs": 1,
        "eval_every": 50,
        "patience": 10,
        "early_stopping_rule": "drops",
        "final_state": "last",
        "max_seq_length": 128,
        "eval_max_length": 128,
        "fp16_schedule": "hold",
        "train_corpus": "stsb_sentences",
        "warmup_ratio": 0.1,  # Table 8 is silent on it and on FIT_DEFAULTS': the authors' training.py
        **FIT_DEFAULTS,
    },
    stages=single_stage("trainers.objectives.sg:SelfGuidedObjective", sg_examples),
    check=sg_problems,
    frozen_table=views_table,
    reads_bt_file=reads_bt_file,
    views=views_named,
    sources={knob: f"SG-BERT (Kim et al. 2021), {what}" for knob, what in {
        "batch_size": "Appendix A.1, Table 8: batch 16", "learning_rate": "Table 8: lr 5e-5", "adam_beta2": "Table 8: "
        "beta2 0.9", "epochs": "Table 8: one epoch", "max_seq_length": "silent (Table 8 names none); the authors' "
        "sentence-transformers 0.3.9 Transformer's max_seq_length 128",
        "eval_max_length": "silent; the authors' Transformer's max_seq_length 128, at which encode truncates too",
        "fp16_schedule": "silent (the authors train in fp32); their fit() under use_amp skips the scheduler's step "
        "where the loss scale changed",
        "patience": "Table 8: early stopping endurance 10",
        "early_stopping_rule": "Table 8's endurance, undefined there, as galsang/SG-BERT modules.py fit() counts it: "
        "evaluations below the one before, never reset", "final_state": "silent; the authors' training.py tests the "
        "model fit() leaves, its last state (fit() saves the best dev state to disk and does not reload it)",
        "temperature": "Table 8: tau 0.01", "pooling": "Section 4: "
        "[CLS]", "train_corpus": "Section 4: STS-B's sentences",
        "warmup_ratio": "Table 8 names no warm-up; the authors' training.py warms up over 10% of the steps",
        **FIT_SOURCES, "adam_bias_correction": "silent; the authors' training.py: correct_bias True",
        "views": "Section 3: BERT_F's hidden states",
        "bert_f_dropout": "silent (Section 3.1: BERT_F is fixed, its parameters); galsang/SG-BERT modules.py fit() "
        "sets the loss module, BERT_F in it, to train mode: dropout on",
    }.items()},
)
