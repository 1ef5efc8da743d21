"""DiffCSE (Chuang et al. 2022): SimCSE plus conditional replaced-token detection.

Each batch is SimCSE's (two dropout views, the same knobs), with SimCSE's InfoNCE. Each of the 2b
tokenised copies is also edited: ``mask_ratio`` of its tokens are chosen (BERT's masking: 80% [MASK],
10% a random token, 10% kept), a frozen masked-LM ``generator`` reads the masked copy and its
prediction (``generator_decoding``: sampled, as the paper says, or its argmax, as the authors' code does)
replaces the chosen tokens (``edited_positions``: the paper's x'' = G(x'); or every token but the first, as
their code does), and a discriminator (a second
copy of the pretrained encoder, trained) reads the edited copy with the copy's sentence vector in place
of its first token's embedding, and tells for every token whether it was replaced. The loss is InfoNCE
+ ``rtd_weight`` x L_RTD (:mod:`trainers.losses.diffcse`). Only the encoder is kept.

Defaults are the authors' BERT-base script: generator distilbert-base-uncased, mask ratio 0.30, lambda
0.005, batch 64, lr 7e-6, max length 32, 2 epochs over their corpus, and their two-layer
BatchNorm projector as the training head (``batchnorm_head``, their --batchnorm).
"""

from __future__ import annotations

from trainers.knobs import Knob, KnobSet, Problem
from trainers.library_defaults import TRAINER_DEFAULTS
from trainers.method import Config, Method, single_stage
from trainers.methods.simcse import (
    SIMCSE_KNOBS,
    built_on_simcse_sources,
    positive_views,
    reads_bt_file,
    simcse_examples,
    simcse_problems,
)
from trainers.models.pretrained import mlm_problem, model_config

GENERATOR = "distilbert-base-uncased"


def diffcse_problems(config: Config) -> list[Problem]:
    """SimCSE's (the positive and its file); a generator that cannot be loaded here, has no masked-LM head, or
    reads another vocabulary than the encoder's; a BatchNorm head without a training head."""
    problems = simcse_problems(config)
    problem = mlm_problem(config["generator"], "DiffCSE", "generator")
    if problem:
        problems.append(Problem("generator", problem))
    else:
        vocabulary, generator = model_config(config["model"]).vocab_size, model_config(config["generator"]).vocab_size
        if vocabulary != generator:
            problems.append(Problem("generator", f"{config['generator']!r} has a vocabulary of {generator:,} tokens, "
                                    f"the model {vocabulary:,}: the generator must read the encoder's token ids "
                                    "(the authors' README: distilbert-base-uncased for bert-base-uncased, "
                                    "distilroberta-base for roberta-base)"))
    if config["batchnorm_head"] and not config["mlp_during_training"]:
        problems.append(Problem("batchnorm_head", "needs mlp_during_training (the head it replaces)"))
    return problems


METHOD = Method(
    name="diffcse",
    summary="DiffCSE: SimCSE plus replaced-token detection conditioned on the sentence vector (a frozen MLM "
            "generator edits, a discriminator finds the edits).",
    knobs=SIMCSE_KNOBS
    + KnobSet(
        (
            Knob("generator", str, GENERATOR, "Frozen masked LM that edits the sentences: a Hugging Face id or a "
                 "local folder with a masked-LM head, reading the encoder's vocabulary (the paper: "
                 "distilbert-base-uncased for BERT)."),
            Knob("generator_decoding", str, "sample", "Which token the generator puts in: a sample of its "
                 "distribution ('sample', the paper: \"sampling from a masked language model\") or its most likely "
                 "one ('argmax', what the authors' code does).", choices=("sample", "argmax")),
            Knob("edited_positions", str, "masked", "Where the generator's prediction replaces the sentence's "
                 "token: 'masked', the positions chosen for masking (the paper, Section 3: the generator "
                 "\"recover[s] randomly masked tokens in x'\", x'' = G(x')), or 'all', every position but the "
                 "first and the padding, as the authors' code does (models.py: g_pred of every position).",
                 choices=("masked", "all")),
            Knob("rtd_positions", str, "padded", "The positions L_RTD averages over: 'padded', every position "
                 "of the padded batch, padding labelled kept, as the authors' code does (models.py: "
                 "CrossEntropyLoss's mean over the batch; the paper's L_RTD sums over a sentence's tokens, with no "
                 "normalisation said, and its lambda is the code's), or 'real', the real tokens alone (each then "
                 "weighs 1 / (share of real positions) times as much).", choices=("padded", "real")),
            Knob("mask_ratio", float, 0.30, "Share of each sentence's tokens masked for the generator.",
                 low=0.0, high=1.0),
            Knob("rtd_weight", float, 0.005, "lambda: weight of the replaced-token detection loss.", low=0.0),
            Knob("generator_dropout", bool, True, "Run the frozen generator with its dropout on, as the authors' "
                 "code does (its Trainer puts the whole model, the generator in it, in train mode each step; the "
                 "paper is silent); false: in eval mode."),
            Knob("batchnorm_head", bool, True, "Training head: Linear-BatchNorm-ReLU-Linear-BatchNorm (the authors' "
                 "--batchnorm, their BERT setting) in place of SimCSE's dense+tanh."),
        )
    ),
    defaults={"batch_size": 64, "learning_rate": 7e-6, "max_seq_length": 32, "pooling": "cls", "eval_every": 125,
              "epochs": 2, **TRAINER_DEFAULTS},
    stages=single_stage("trainers.objectives.diffcse:DiffCSEObjective", simcse_examples),
    check=diffcse_problems,
    views=positive_views,
    reads_bt_file=reads_bt_file,
    sources=built_on_simcse_sources("DiffCSE (Chuang et al. 2022)", "Section 4", batch_size="batch 64",
                                    learning_rate="lr 7e-6 (its Appendix: BERT-base STS)", epochs="2 epochs",
                                    max_seq_length="max length 32", eval_every="--eval_steps 125",
                                    generator_dropout="its Trainer puts the "
                                    "whole model, the generator in it, in train mode each step: dropout on"),
)
