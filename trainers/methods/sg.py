"""SG and SG-OPT: self-guided contrastive learning (Kim et al., ACL 2021).

BERT is cloned into BERT_F (fixed) and BERT_T (tuned). BERT_T's last-layer
[CLS] vector c_i is pulled towards views h_{i,k} = p(H_{i,k}) that BERT_F's
layers k = 0..l give of the same sentence, and pushed from other sentences'
views (Section 3). After training only BERT_T is kept, and its [CLS] is the
sentence vector. Defaults are the paper's (Table 8).

BERT_F runs without dropout (the authors' code puts it in eval mode), so a
sentence's views are a fixed function of the sentence: they are computed for
the whole corpus in one batched pass before training, a table of
sentences x views x width (pooled layers, not token states: 7 x 384 float32 =
10.8 kB a sentence for the bundled model, 13 x 768 = 40 kB for BERT-base), and
read by every step (:mod:`trainers.frozen_outputs`); with
``share_frozen_outputs`` (on by default) the trials of a node share one table.
"""

from __future__ import annotations

from trainers.common_knobs import FROZEN_OUTPUT_KNOBS
from trainers.knobs import Knob, KnobSet
from trainers.method import Config, FrozenTable, Method, single_stage
from trainers.pretrained import model_config

VIEW_POOLINGS = ("max", "mean")
"""Poolings p of BERT_F's layers into views (:func:`trainers.encoder.pool_layer`)."""


def views_table(config: Config) -> FrozenTable:
    """BERT_F's views of each corpus sentence: layers skip_first_layers..L pooled, each of the model's width."""
    def numbers_per_text() -> int:
        shape = model_config(config["model"])
        layers = config["model_layers"] or shape.num_hidden_layers
        return (layers + 1 - config["skip_first_layers"]) * shape.hidden_size

    return FrozenTable("BERT_F's views", lambda sentences: list(sentences), numbers_per_text)


METHOD = Method(
    name="sg",
    summary="SG / SG-OPT: BERT_T's [CLS] contrasted with views from every layer of a frozen BERT_F.",
    knobs=KnobSet(
        (
            Knob("loss", str, "opt3", "Objective: 'sg' (L_base, NT-Xent over c and h), 'opt1', 'opt2' (single "
                 "sampled view), 'opt3' (SG-OPT: all l+1 views).", choices=("sg", "opt1", "opt2", "opt3")),
            Knob("temperature", float, 0.01, "Temperature tau of phi.", low=1e-5, high=10.0),
            Knob("reg_lambda", float, 0.1, "Weight lambda of L_reg = ||BERT_F - BERT_T||^2.", low=0.0),
            Knob("view_pooling", str, "max", "Pooling p of BERT_F's layers into views. The paper uses max; the "
                 "authors' public code defaults to mean.", choices=VIEW_POOLINGS),
            Knob("projection_head", bool, True, "Pass c and h through the projection head f before the loss."),
            Knob("projection_hidden", int, 4096, "Width of both layers of f.", low=1),
            Knob("skip_first_layers", int, 0, "Drop views of layers 0..N-1 (the paper's SentEval variant).", low=0),
        )
    )
    + FROZEN_OUTPUT_KNOBS,
    defaults={
        "pooling": "cls",
        "batch_size": 16,
        "learning_rate": 5e-5,
        "adam_beta2": 0.9,
        "epochs": 1,
        "eval_every": 50,
        "patience": 10,
        "max_seq_length": 128,
        "train_corpus": "stsb_sentences",
    },
    stages=single_stage("trainers.objectives.sg:SelfGuidedObjective"),
    frozen_table=views_table,
)
