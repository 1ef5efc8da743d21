"""BERT-flow (Li et al. 2020): a Glow normalising flow fit by maximum likelihood on the frozen encoder's
sentence vectors; the flow's Gaussian latent is the sentence vector.

Defaults follow the authors' code (github.com/bohanli/BERT-flow): the flow config ``config_l3_d3_w32`` (3
levels of 3 steps, additive coupling of width 32, channel reversal for the 1 x 1 convolution), the pooling
``avg-last-2`` of their README, which their code computes as the mean of the first and last layers
(``all_encoder_layers[-0]`` is the first: our ``first_last_avg``), the flow's AdamW at a constant 1e-3 with
weight decay 0.01 and epsilon 1e-6, gradients clipped to global norm 1.0, batch 32, max length 64, one epoch
over the target sentences (STS-B's three splits, their ``use_full_for_training``), and the last state kept
(their code selects nothing).
"""

from __future__ import annotations

from trainers.knobs import Knob, KnobSet, Problem
from trainers.method import Config, Method, single_stage
from trainers.pretrained import model_config, model_problem


def flow_problems(config: Config) -> list[Problem]:
    """The flow halves the vector at every level: the encoder's width must be divisible by 2^levels."""
    if model_problem(config["model"]):
        return []  # reported as the model's problem
    width = model_config(config["model"]).hidden_size
    if width % 2 ** config["flow_levels"]:
        return [Problem("flow_levels", f"{config['flow_levels']} levels halve the vector {config['flow_levels']} "
                                       f"times; {config['model']!r} gives {width} dimensions, not divisible by "
                                       f"{2 ** config['flow_levels']}")]
    return []


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
        )
    ),
    defaults={"pooling": "first_last_avg", "learning_rate": 1e-3, "lr_schedule": "constant", "weight_decay": 0.01,
              "adam_epsilon": 1e-6, "max_grad_norm": 1.0, "final_state": "last", "batch_size": 32,
              "max_seq_length": 64, "epochs": 1},
    stages=single_stage("trainers.objectives.flow:FlowObjective"),
    check=flow_problems,
    after_pooling="trainers.objectives.flow:flow_from_config",
)
