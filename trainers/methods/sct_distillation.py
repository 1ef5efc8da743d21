"""SCT's distillation (Section 3.4, Tables 6 and 7), as declared: its knobs and their validation.

A frozen teacher f_large is distilled into the student with one of :data:`DISTILLATION_LOSSES`,
plus L_SCT unless ``self_supervised`` is off; the teacher itself is
:class:`trainers.objectives.sct_distillation.Teacher`.
"""

from __future__ import annotations

from typing import Any

from trainers.common_knobs import POOLINGS
from trainers.data import BT_COLUMNS
from trainers.knobs import Knob, KnobSet
from trainers.method import Config, FrozenTable
from trainers.pretrained import model_config, model_problem

TEXT_VIEWS = ("bt1", "bt2")
"""Views that are a column of the back-translation file."""
REWRITE_VIEWS = ("mlm", "synonym")
"""Views that rewrite the sentence at random in every step: never in the teacher's table."""

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
    )
)


def distillation_problems(config: Config) -> list[str]:
    """What a config's distillation knobs lack or contradict: a teacher that cannot be loaded here,
    a teacher without distillation, or no loss at all."""
    if config["distillation"] == "none":
        problems = ["teacher: given, but distillation is 'none'"] if config["teacher"] else []
        if not config["self_supervised"]:
            problems.append("self_supervised: off with distillation 'none' leaves no loss to train")
        return problems
    if not config["teacher"]:
        return [f"teacher: distillation {config['distillation']!r} needs a teacher model (id or folder)"]
    problem = model_problem(config["teacher"])
    return [f"teacher: {problem}"] if problem else []


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
