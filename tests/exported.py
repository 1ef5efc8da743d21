"""What every test of ``sweep export``'s folders checks: sentence-transformers reads it back as the trial."""

from __future__ import annotations

from typing import Any, Mapping

import pytest
import torch

from trainers.data.sources import evaluation_names, load_sts
from trainers.models.encoder import SentenceEncoder
from trainers.suites.sts import STSEvaluator


def assert_scores_as_logged(model: Any, final: Mapping[str, float], encoder: SentenceEncoder) -> None:
    """The exported ``model`` (a SentenceTransformer) scores the trial's logged STS test average and gives its
    ``encoder``'s vectors."""
    scored = STSEvaluator(load_sts("local", evaluation_names())).test(
        lambda sentences: torch.from_numpy(model.encode(list(sentences), batch_size=64)))
    assert scored["avg_spearman"] == pytest.approx(final["test_avg_spearman"], abs=1e-6)
    sentences = ["A man plays a guitar.", "Two dogs run in a field."]
    torch.testing.assert_close(torch.from_numpy(model.encode(sentences)), encoder.encode(sentences),
                               rtol=1e-5, atol=1e-6)
