"""DCLR (Zhou et al. 2022): SimCSE with noise-based negatives and instance weights.

Each batch is SimCSE's (two dropout views, or a back-translated positive, the same knobs). Two
changes to its InfoNCE (:mod:`trainers.losses.dclr`): ``noise_times`` x batch Gaussian vectors
(std ``noise_std``), moved ``noise_steps`` times by normalised gradient ascent (step
``noise_step_size``) on the contrastive loss, join the negatives; and a frozen complementary model
(any encoder folder or sentence-transformers export, or a hub id; the paper's is unsupervised SimCSE
BERT-base) weighs out every in-batch negative whose cosine to the anchor's sentence exceeds ``phi``:
a likely false negative. Defaults are the authors' BERT-base script (batch 128, lr 3e-5, max length
32, phi 0.9, noise_times 1, four ascent steps of 1e-3, 3 epochs over their corpus); a row on one of the other
three models of their run.sh takes that model's settings (:data:`RUN_SH`).
"""

from __future__ import annotations

from trainers.common_knobs import POOLINGS, STEP_GRAPH_KNOBS, pooler_problems
from trainers.knobs import Knob, KnobSet, Problem
from trainers.library_defaults import TRAINER_DEFAULTS
from trainers.method import Config, Method, settings_per_model, single_stage
from trainers.methods.simcse import (
    BERT_BASE,
    BERT_LARGE,
    ROBERTA_BASE,
    ROBERTA_LARGE,
    SIMCSE_KNOBS,
    built_on_simcse_sources,
    positive_views,
    reads_bt_file,
    simcse_examples,
    simcse_problems,
)
from trainers.models.pretrained import model_problem

COMPLEMENTARY_MODEL = "princeton-nlp/unsup-simcse-bert-base-uncased"
COMPLEMENTARY_ROBERTA = "princeton-nlp/unsup-simcse-roberta-base"
SIMCSE_LARGE = ("princeton-nlp/unsup-simcse-bert-large-uncased", "princeton-nlp/unsup-simcse-roberta-large")
"""The checkpoints run.sh starts BERT-large and RoBERTa-large from."""

RUN_SH_KNOBS = ("learning_rate", "batch_size", "epochs", "phi", "noise_times", "mlp_during_training",
                "complementary_model")
RUN_SH = {
    BERT_BASE: (3e-5, 128, 3, 0.9, 1.0, True, COMPLEMENTARY_MODEL),
    ROBERTA_BASE: (3e-5, 128, 3, 0.85, 2.5, True, COMPLEMENTARY_ROBERTA),
    (*BERT_LARGE, SIMCSE_LARGE[0]): (3e-5, 256, 1, 0.9, 3.0, False, COMPLEMENTARY_MODEL),
    (*ROBERTA_LARGE, SIMCSE_LARGE[1]): (1e-5, 256, 1, 0.85, 5.0, False, COMPLEMENTARY_ROBERTA),
}
"""RUCAIBox/DCLR run.sh, per model: learning rate, batch, epochs, phi, noise_times, the training head and the
complementary model. The large models train on 4 GPUs x 64 sentences whose vectors each GPU gathers (models.py:
all_gather before the loss and the noise), one batch of 256, and without SimCSE's MLP (--is_base False). run.sh
starts them from SimCSE's trained checkpoint of their size, which a row's ``model`` names: a row on that checkpoint
takes the same line. The defaults are BERT-base's, which every other model (the SCT paper's smaller BERTs, the
bundled model) takes."""


def dclr_problems(config: Config) -> list[Problem]:
    """SimCSE's (the positive and its file), a complementary model that cannot be loaded here, and a pooling
    'pooler' of a model whose weights hold no trained pooler."""
    problem = model_problem(config["complementary_model"])
    return (simcse_problems(config) + ([Problem("complementary_model", problem)] if problem else [])
            + pooler_problems(config, ("train_pooling",))
            + pooler_problems(config, ("complementary_pooling",), "complementary_model"))


METHOD = Method(
    name="dclr",
    summary="DCLR: SimCSE with gradient-refined Gaussian noise negatives and a complementary model's "
            "false-negative weights.",
    knobs=SIMCSE_KNOBS
    + KnobSet(
        (
            Knob("complementary_model", str, COMPLEMENTARY_MODEL, "Frozen complementary model that finds false "
                 "negatives: a Hugging Face id, an encoder folder or a `sweep export` folder (the paper: "
                 "unsupervised SimCSE BERT-base)."),
            Knob("complementary_pooling", str, "pooler", "How the complementary model pools its token vectors: "
                 "the authors' is its pooler output (models.py), in a SimCSE release SimCSE's trained MLP over "
                 "[CLS].", choices=POOLINGS),
            Knob("complementary_dropout", bool, True, "The complementary model weighs a step's negatives with "
                 "dropout on, comparing its two dropout views of the sentences (anchor i's against positive j's), "
                 "as in the authors' code, where it is a submodule of the trained module (models.py: "
                 "cos_sim_fix of z1_fix and z2_fix). false: one pass without dropout, the sentences' cosines "
                 "alone."),
            Knob("train_pooling", str, "pooler", "The pooling of the training step's vectors, before SimCSE's "
                 "MLP: 'same' is pooling's, as in SimCSE; the authors' is 'pooler' (models.py feeds BERT's "
                 "pretrained pooler, dense + tanh of [CLS], to the MLP, and its dev evaluations score the pooler "
                 "output: selection_pooling 'pooler'); their test pools [CLS] before it (pooling cls).",
                 choices=("same",) + POOLINGS),
            Knob("attend_to_padding", bool, True, "The encoder and the complementary model read each training "
                 "batch without an attention mask, as the authors' code calls them (models.py: "
                 "encoder.encoder(embedding_output, noise, ...) leaves the mask None): a sentence attends to the "
                 "padding up to its batch's longest sentence (to max_seq_length with pad_to_max_length); poolings "
                 "still average real tokens only. false masks it. The dev evaluations read their SentEval batches "
                 "without a mask too (selection_batches 'senteval'); the test always masks."),
            Knob("selection_batches", str, "senteval", "How the dev evaluations that select batch their sentences. "
                 "'senteval', the authors' (their trainer hands SentEval a batcher, and models.py's "
                 "sentemb_forward_vat drops the mask): each dev set in its file's order, 128 pairs at a time, their "
                 "first sentences in one batch and their second sentences in another, each padded to its longest "
                 "and, with attend_to_padding, read without a mask, so that a sentence's dev vector depends on its "
                 "batch. 'distinct': every other evaluation's way, each distinct sentence once, masked.",
                 choices=("senteval", "distinct")),
            Knob("phi", float, 0.9, "Weight threshold: an in-batch negative whose complementary-model cosine "
                 "to the anchor exceeds phi gets weight 0 (the authors' BERT-base setting; their code compares "
                 "cosine / temperature with 20 phi, the same at their temperature 0.05).", low=-1.0, high=1.0),
            Knob("noise_times", float, 1.0, "Noise negatives per step, as a multiple of the batch size "
                 "(int(batch_size x noise_times)); 0 = none.", low=0.0),
            Knob("noise_std", float, 1.0, "Standard deviation of the Gaussian the noise vectors start from.",
                 low=0.0),
            Knob("noise_steps", int, 4, "Gradient-ascent steps that refine the noise vectors.", low=0),
            Knob("noise_step_size", float, 1e-3, "Length of each ascent step (the gradient normalised per vector).",
                 low=0.0),
        )
    )
    + STEP_GRAPH_KNOBS,
    defaults={"batch_size": 128, "learning_rate": 3e-5, "max_seq_length": 32, "pooling": "cls", "eval_every": 125,
              "epochs": 3, "selection_metric": "avg_sts", "selection_pooling": "pooler", **TRAINER_DEFAULTS},
    stages=single_stage("trainers.objectives.dclr:DCLRObjective", simcse_examples),
    check=dclr_problems,
    views=positive_views,
    reads_bt_file=reads_bt_file,
    settings_by_model=settings_per_model(RUN_SH, RUN_SH_KNOBS),
    sources=built_on_simcse_sources("DCLR (Zhou et al. 2022)", "Section 4.1",
                                    batch_size="batch 128 (run.sh's large models: 256; RUN_SH)",
                                    learning_rate="lr 3e-5 (run.sh's RoBERTa-large: 1e-5; RUN_SH)",
                                    epochs="3 epochs (run.sh's large models: 1; RUN_SH)",
                                    max_seq_length="max length 32", eval_every="--eval_steps 125",
                                    selection_metric="--metric_for_best_model avg_sts, the mean of STS-B dev's and "
                                    "SICK-R dev's Spearman (the paper was not read here)",
                                    selection_pooling="--pooler_type cls, whose dev evaluations score the pooler "
                                    "output (RUCAIBox/DCLR simcse/models.py sentemb_forward_vat: BERT's pooler over "
                                    "[CLS]); its test pools [CLS] before it (--pooler cls_before_pooler)"),
)
