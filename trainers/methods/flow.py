"""BERT-flow (Li et al. 2020): a Glow normalising flow fit by maximum likelihood on the frozen encoder's
sentence vectors; the flow's Gaussian latent is the sentence vector.

Defaults follow the authors' code (github.com/bohanli/BERT-flow): the flow config ``config_l3_d3_w32`` (3
levels of 3 steps, additive coupling of width 32, channel reversal for the 1 x 1 convolution), the pooling
``avg-last-2`` of their README, which their code computes as the mean of the first and last layers
(``all_encoder_layers[-0]`` is the first: our ``first_last_avg``), the flow's AdamW at a constant 1e-3 with
weight decay 0.01 and epsilon 1e-6, gradients clipped to global norm 1.0, batches of 32 sentence pairs (each
side's mean loss summed; an epoch's short last batch dropped), max length 64, one epoch over the target pairs
(a test set's train, dev and test splits, their ``use_full_for_training``), and the last state kept (their code
selects nothing).
"""

from __future__ import annotations

from typing import Any, Sequence

from trainers.common_knobs import NLI_STAGE_KNOBS, SHARED_STAGE_KNOBS, selection_pooling
from trainers.data.nli_examples import nli_examples, nli_hub_problems
from trainers.data.sources import CORPUS_FILES, load_corpus_pairs
from trainers.knobs import Knob, KnobSet, Problem
from trainers.method import Config, Method, Stage, corpus_examples
from trainers.models.pretrained import model_config, model_problem


def flow_examples(config: Config) -> Sequence[Any]:
    """The flow's training examples: ``train_corpus``'s sentence pairs (``flow_batch`` 'pairs', a batch of
    ``batch_size`` pairs) or its sentences."""
    if config["flow_batch"] == "pairs":
        return load_corpus_pairs(config["train_corpus"], config["sts_source"])
    return corpus_examples(config)


FLOW = Stage("flow", "trainers.objectives.flow:FlowObjective", flow_examples)
NLI_STAGE_SETTINGS = {"batch_size": 16, "epochs": 1, "patience": 0, "warmup_ratio": 0.1, "lr_schedule": "linear",
                      "final_state": "last", "weight_decay_exempt": "biases_and_norms"}
"""The NLI fine-tuning of the authors' README (``run_siamese.py`` on ALLNLI: one epoch, batch 16, BERT's 10%
warm-up then linear decay, the last state), beside ``nli_learning_rate``; their optimiser settings (weight
decay 0.01, epsilon 1e-6, clipping at 1.0, BERT's TensorFlow update) are the flow's defaults too, but for the
decay's exemptions: ``optimization.py``'s exclude_from_weight_decay (LayerNorm, layer_norm, bias) matches BERT's
variables, where it matches none of the flow's. ``max_steps`` (a budget's cap) still applies."""


def stages(config: Config) -> tuple[Stage, ...]:
    """The flow on the frozen encoder; with ``nli_supervision``, after an SBERT fine-tuning of the encoder on
    labelled NLI, whose last state the flow's stage freezes."""
    if not config["nli_supervision"]:
        return (FLOW,)
    nli = Stage("nli", "trainers.objectives.nli:SBERTNLIObjective", nli_examples,
                overrides={**NLI_STAGE_SETTINGS, "learning_rate": config["nli_learning_rate"]}, reads_corpus=False)
    return nli, FLOW


def flow_problems(config: Config) -> list[Problem]:
    """The flow halves the vector at every level: the encoder's width must be divisible by 2^levels. The NLI
    stage needs the hub. Dev evaluations pool as the flow reads."""
    problems = (nli_hub_problems("nli_supervision", "true", "set it false to fit the flow on the encoder as it is",
                                 config["nli_pairs"])
                if config["nli_supervision"] else [])
    if config["flow_batch"] == "pairs" and config["train_corpus"] not in CORPUS_FILES:
        problems.append(Problem("flow_batch", f"'pairs' batches the sentence pairs of an STS corpus "
                                f"({', '.join(CORPUS_FILES)}); train_corpus {config['train_corpus']!r} has none: "
                                "set flow_batch 'sentences' (and batch_size 64, the same sentences a step)"))
    if selection_pooling(config) != config["pooling"]:
        problems.append(Problem("selection_pooling", f"the flow is fit on {config['pooling']!r} vectors, so its dev "
                                "evaluations pool the same way: set selection_pooling 'same'"))
    if model_problem(config["model"]):
        return problems  # the width is reported as the model's problem
    width = model_config(config["model"]).hidden_size
    if width % 2 ** config["flow_levels"]:
        problems.append(Problem("flow_levels", f"{config['flow_levels']} levels halve the vector "
                                f"{config['flow_levels']} times; {config['model']!r} gives {width} dimensions, "
                                f"not divisible by {2 ** config['flow_levels']}"))
    return problems


METHOD = Method(
    name="flow",
    summary="BERT-flow: a Glow flow fit by maximum likelihood on the frozen encoder's pooled vectors; its "
            "Gaussian latent is the sentence vector.",
    knobs=KnobSet(
        (
            Knob("flow_levels", int, 3, "Levels of the flow; after each but the last, half the dimensions leave "
                 "as latents (the authors' n_levels, config_l3_d3_w32).", low=1, high=8),
            Knob("flow_depth", int, 3, "Flow steps (actnorm, 1x1 convolution, coupling) per level (depth).",
                 low=1, high=32),
            Knob("flow_width", int, 32, "Hidden width of the coupling's network (coupling_width).", low=1),
            Knob("flow_coupling", str, "additive", "'additive' (x2 + NN(x1), the authors' configs) or 'affine' "
                 "((x2 + shift) * sigmoid(scale + 2), Glow's).", choices=("additive", "affine")),
            Knob("flow_permutation", bool, True, "The 1x1 convolution is the fixed reversal of the dimensions "
                 "(the authors' configs: permutation true); false: Glow's learned LU-parametrised matrix."),
            Knob("flow_actnorm_init", str, "released", "How the actnorms start: 'released' as the authors' "
                 "released code runs (run_siamese.py never passes the GlowInitHook that would run Glow's "
                 "data-dependent initialisation, so they keep TensorFlow's Glorot-uniform draw); 'data': Glow's "
                 "initialisation from the first batch (zero mean, unit variance per channel).",
                 choices=("released", "data")),
            Knob("flow_batch", str, "pairs", "What a batch of batch_size holds: 'pairs', train_corpus's STS pairs, "
                 "each side pooled on its own and the two sides' mean losses summed (the authors' run_siamese.py: "
                 "flow_loss_batch_a + flow_loss_batch_b); 'sentences', its sentences in one shuffled order, one "
                 "mean loss (any corpus).", choices=("pairs", "sentences")),
            Knob("nli_supervision", bool, False, "Li et al.'s NLI-supervised setting (BERT-NLI-flow; ConSERT Table "
                 "3's BERT-flow rows): first fine-tune the encoder on labelled SNLI + MultiNLI with SBERT's "
                 "classification objective (the authors' script: one epoch, batch 16, nli_learning_rate, mean of "
                 "the last layer), then fit the flow on train_corpus from its last state. Needs the hub."),
        )
    )
    + NLI_STAGE_KNOBS + SHARED_STAGE_KNOBS,
    defaults={"pooling": "first_last_avg", "learning_rate": 1e-3, "lr_schedule": "constant", "weight_decay": 0.01,
              "weight_decay_exempt": "none",
              "adam_epsilon": 1e-6, "max_grad_norm": 1.0, "final_state": "last", "batch_size": 32,
              "max_seq_length": 64, "eval_max_length": 64, "epochs": 1, "adam_implementation": "bert_tf",
              "adam_bias_correction": False, "nli_classifier": "bert", "nli_pairs": "all_nli_snli_eval",
              "last_batch": "drop"},
    stages=stages,
    check=flow_problems,
    after_pooling="trainers.objectives.flow:flow_from_config",
    views=lambda config: "none: a flow fit on the frozen model's sentence vectors"
                         + (", a batch of STS pairs" if config["flow_batch"] == "pairs" else ""),
    sources={knob: f"BERT-flow (Li et al. 2020), the authors' code github.com/bohanli/BERT-flow: {what}"
             for knob, what in {
        "pooling": "README's avg-last-2, computed as the first and last layers' mean",
        "learning_rate": "flow optimiser AdamW at lr 1e-3", "lr_schedule": "a constant learning rate",
        "weight_decay": "weight decay 0.01",
        "weight_decay_exempt": "optimization_bert_flow.py's exclude_from_weight_decay (LayerNorm, layer_norm, bias) "
                               "matches none of the flow's variables (flow/glow_ops_1x1.py: b, logs, W, L, U, "
                               "log_S): every one decayed", "adam_epsilon": "epsilon 1e-6", "adam_beta2": "beta2 0.999",
        "max_grad_norm": "gradients clipped to global norm 1.0", "final_state": "the last state, no selection",
        "batch_size": "run_siamese.py: train_batch_size 32, of sentence pairs (flow_batch)",
        "flow_batch": "run_siamese.py: a batch of sentence pairs, a pass a side, the two sides' mean losses summed",
        "last_batch": "run_siamese.py: the training input's drop_remainder=True, int(n / 32) steps an epoch",
        "max_seq_length": "max length 64",
        "eval_max_length": "max length 64, its encoding's too", "epochs": "one epoch",
        "patience": "no early stopping", "early_stopping_rule": "no early stopping, so the rule counts nothing",
        "eval_grid": "no dev evaluations; ours only report, as the last state is kept",
        "warmup_ratio": "no warm-up", "optimizer": "AdamW",
        "fp16_schedule": "fp32 throughout (its flow configs' use_fp16 false): no loss is scaled, so none",
        "adam_bias_correction": "optimization_bert_flow.py: BERT's AdamWeightDecayOptimizer, no bias correction",
        "adam_implementation": "optimization_bert_flow.py: BERT's AdamWeightDecayOptimizer, the uncorrected update "
                               "with the decay of the weights as they were before it (bert_tf)",
        "nli_classifier": "run_siamese.py: the NLI classifier's output_weights, no bias, "
                          "truncated_normal_initializer(stddev=0.02)",
        "nli_pairs": "run_siamese.py: task allnli trains on MNLI train, then SNLI train, dev and test",
        "selection_pooling": "the flow's own pooling (it maps those vectors); the last state is kept, no selection",
        "train_corpus": "STS-B's three splits (use_full_for_training)",
        "views": "no views: a flow, fit on batches of sentence pairs (run_siamese.py)",
    }.items()},
)
