"""The frozen-output knobs of SG and SCT reach the shared table: ``frozen_outputs_dir`` is where the
table is kept, and ``frozen_outputs_gb`` bounds it (0: no table, the frozen model runs on every step's
batch). They never change a result (tests/test_frozen_outputs.py), so what they change is checked here:
the files on disk and the count of inputs run through the frozen model."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

import trainers.models.frozen_outputs as frozen_outputs
from trainers.metrics import Metric
from trainers.models.encoder import SentenceEncoder
from trainers.objectives.sct import SCTObjective
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]


Outputs = tuple[Callable[[], None], Callable[[], None], Callable[[], dict]]  # prepare, one step, statistics


def counts(statistics: dict) -> dict:
    """The statistics less the pass's seconds (tests/test_frozen_outputs.py times it)."""
    return {name: value for name, value in statistics.items() if name != Metric.FROZEN_OUTPUTS_SECONDS}


def sg_outputs(tiny_bert: str, tiny_teacher: str, **knobs) -> Outputs:
    config = get_method("sg").resolve({"model": tiny_bert, "projection_hidden": 16, "bert_f_dropout": False, **knobs})
    objective = SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_bert))
    return lambda: objective.prepare(BATCH), lambda: objective.views(BATCH), objective.statistics


def sct_teacher_outputs(tiny_bert: str, tiny_teacher: str, **knobs) -> Outputs:
    config = get_method("sct").resolve({"model": tiny_bert, "queue_size": 8, "projector_expansion": 2,
                                        "distillation": "cd", "teacher": tiny_teacher, **knobs})
    objective = SCTObjective(config, SentenceEncoder.from_config(config))
    return (lambda: objective.teacher.prepare(BATCH), lambda: objective.teacher.vectors(BATCH, fixed_texts=True),
            objective.statistics)


@pytest.mark.parametrize("outputs", [sg_outputs, sct_teacher_outputs], ids=["sg-views", "sct-teacher"])
@pytest.mark.parametrize("gb", [1.0, 0.0])  # 1.0: the control, where the table is kept
def test_the_knobs_say_where_outputs_are_kept_and_how_many(tiny_bert, tiny_teacher, tmp_path, monkeypatch, outputs, gb):
    monkeypatch.setattr(frozen_outputs, "_STORES", {})  # no store of an earlier test in this process
    folder = tmp_path / "shared"
    prepare, step, statistics = outputs(tiny_bert, tiny_teacher, frozen_outputs_dir=str(folder), frozen_outputs_gb=gb)
    with torch.no_grad():
        prepare()
        step()
        step()
    tables = list(folder.rglob(frozen_outputs.TABLE_FILE))
    if gb:
        assert len(tables) == 1, f"no table kept under frozen_outputs_dir {folder}"
        # the table's 4 texts run once; both steps read their 4 rows from it
        assert counts(statistics()) == {"frozen_outputs_computed": 4.0, "frozen_outputs_reused": 8.0}
    else:
        assert tables == []  # a bound of 0 keeps no table on disk...
        # ...each step runs the frozen model
        assert counts(statistics()) == {"frozen_outputs_computed": 8.0, "frozen_outputs_reused": 0.0}
