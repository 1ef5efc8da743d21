"""A trained trial's final checkpoint exported as a sentence-transformers folder, without a sweep: what
`sweep export` writes from the checkpoint, loaded back by sentence-transformers and scored on the STS sets."""

from __future__ import annotations

from pathlib import Path

import torch

from sweep.run.models import load_trial_encoder, save_sentence_transformer
from trainers.data.sources import TEST_SETS, evaluation_names, load_sts
from trainers.metrics import Metric
from trainers.suites.sts import STSEvaluator
from trainers.training.checkpoint import LocalSession
from trainers.training.loop import run_trial


def assert_export_scores_as_logged(config: dict, folder: Path) -> None:
    """Train ``config`` to the end with checkpoints, export its final checkpoint (the best encoder), load the
    folder in sentence-transformers, and score it as the trial logged (fp32 evaluation on both sides)."""
    from sentence_transformers import SentenceTransformer

    final = run_trial({**config, "eval_precision": "fp32"}, LocalSession(folder / "checkpoints"))
    (checkpoint,) = sorted((folder / "checkpoints").glob("checkpoint_*"))[-1:]
    encoder, record = load_trial_encoder(checkpoint)
    save_sentence_transformer(encoder, folder / "export", record.config["eval_max_length"])
    model = SentenceTransformer(str(folder / "export"), device="cpu")
    tested = STSEvaluator(load_sts("local", evaluation_names())).test(
        lambda s: torch.from_numpy(model.encode(list(s), batch_size=64)))
    for name in (*TEST_SETS, "avg"):
        assert abs(tested[f"{name}_spearman"] - final[Metric.test_set(name)]) < 0.01, name
    assert final[Metric.STEPS] == config["max_steps"]
