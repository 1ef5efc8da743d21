"""The frozen-output knobs of SG and SCT reach the shared store: ``frozen_outputs_dir`` is where the
outputs are kept, and ``frozen_outputs_gb`` bounds them (0: nothing is kept, every output is computed
again). They never change a result (tests/test_frozen_outputs.py), so what they change is checked here:
the files on disk and the count of outputs computed."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

import trainers.frozen_outputs as frozen_outputs
from trainers.encoder import SentenceEncoder
from trainers.objectives.sct import SCTObjective
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]


def sg_outputs(tiny_bert: str, tiny_teacher: str, **knobs) -> tuple[Callable[[], None], Callable[[], dict]]:
    config = get_method("sg").resolve({"model": tiny_bert, "projection_hidden": 16, **knobs})
    objective = SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_bert))
    return lambda: objective.views(BATCH), objective.statistics


def sct_teacher_outputs(tiny_bert: str, tiny_teacher: str, **knobs) -> tuple[Callable[[], None], Callable[[], dict]]:
    config = get_method("sct").resolve({"model": tiny_bert, "queue_size": 8, "projector_expansion": 2,
                                        "distillation": "cd", "teacher": tiny_teacher, **knobs})
    objective = SCTObjective(config, SentenceEncoder.from_config(config))
    return lambda: objective.teacher.vectors(BATCH, fixed_texts=True), objective.statistics


@pytest.mark.parametrize("outputs", [sg_outputs, sct_teacher_outputs], ids=["sg-views", "sct-teacher"])
@pytest.mark.parametrize("gb", [1.0, 0.0])  # 1.0: the control, where outputs are kept
def test_the_knobs_say_where_outputs_are_kept_and_how_many(tiny_bert, tiny_teacher, tmp_path, monkeypatch, outputs, gb):
    monkeypatch.setattr(frozen_outputs, "_STORES", {})  # no store of an earlier test in this process
    folder = tmp_path / "shared"
    compute, statistics = outputs(tiny_bert, tiny_teacher, frozen_outputs_dir=str(folder), frozen_outputs_gb=gb)
    with torch.no_grad():
        compute()
        compute()
    shards = list(folder.rglob("*.pt"))
    if gb:
        assert shards, f"nothing kept under frozen_outputs_dir {folder}"
        assert statistics() == {"frozen_outputs_computed": 4.0, "frozen_outputs_reused": 4.0}
    else:
        assert shards == []  # a bound of 0 keeps nothing on disk...
        assert statistics() == {"frozen_outputs_computed": 8.0, "frozen_outputs_reused": 0.0}  # ...nor in memory
