"""STS evaluation: cosine similarity against gold scores, Spearman and Pearson x 100.

For STS12-16, which are made of subsets, three aggregations are computed:
``all`` (every subset's pairs concatenated; the default, as SimCSE, ConSERT and
SCT report it), ``mean`` (the plain mean of per-subset correlations) and
``wmean`` (the mean weighted by subset size, SentEval's other figure).
Metric names: ``<set>_spearman`` / ``<set>_pearson`` for ``all``,
``<set>_mean_spearman`` and ``<set>_wmean_spearman`` for the others, and
``avg_spearman`` (plus ``avg_mean_spearman``, ``avg_wmean_spearman``) over the
seven sets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

from trainers.data import DEV_SET, TEST_SETS, STSSet

Encode = Callable[[Sequence[str]], torch.Tensor]
INFERENCE_BATCH_SIZE = 16
"""SG-BERT Table 6 times inference "when tested on STS-B ... using batch size 16" (``stsb_test_seconds_b16``)."""


def cosine_scores(left: torch.Tensor, right: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.cosine_similarity(left.double(), right.double(), dim=-1).numpy()


def correlations(predicted: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(Spearman, Pearson) x 100."""
    return 100 * float(spearmanr(predicted, gold).statistic), 100 * float(pearsonr(predicted, gold).statistic)


def set_metrics(name: str, sts: STSSet, predicted: np.ndarray) -> dict[str, float]:
    spearman, pearson = correlations(predicted, sts.scores)
    metrics = {f"{name}_spearman": spearman, f"{name}_pearson": pearson}
    subsets = np.asarray(sts.subsets)
    names = list(dict.fromkeys(sts.subsets))
    if len(names) > 1:
        per_subset = [correlations(predicted[subsets == s], sts.scores[subsets == s])[0] for s in names]
        sizes = [int((subsets == s).sum()) for s in names]
        metrics[f"{name}_mean_spearman"] = float(np.mean(per_subset))
        metrics[f"{name}_wmean_spearman"] = float(np.average(per_subset, weights=sizes))
    return metrics


def average_metrics(metrics: Mapping[str, float], names: Sequence[str] = TEST_SETS) -> dict[str, float]:
    """Seven-set averages; sets without subsets count with their single figure in every average."""
    averages = {"avg_spearman": float(np.mean([metrics[f"{n}_spearman"] for n in names]))}
    for aggregation in ("mean", "wmean"):
        values = [metrics.get(f"{n}_{aggregation}_spearman", metrics[f"{n}_spearman"]) for n in names]
        averages[f"avg_{aggregation}_spearman"] = float(np.mean(values))
    return averages


def evaluate_sets(encode: Encode, sets: Mapping[str, STSSet]) -> dict[str, float]:
    """Metrics of every set in ``sets`` (keyed by the name used in metric names).

    All sentences of all sets go to ``encode`` in one call, so a sentence that
    appears in several sets or pairs is encoded once.
    """
    sentences = [s for sts in sets.values() for s in (*sts.sentence1, *sts.sentence2)]
    vectors = encode(sentences)
    metrics: dict[str, float] = {}
    offset = 0
    for name, sts in sets.items():
        n = len(sts)
        left, right = vectors[offset : offset + n], vectors[offset + n : offset + 2 * n]
        offset += 2 * n
        metrics.update(set_metrics(name, sts, cosine_scores(left, right)))
    return metrics


@dataclass
class STSEvaluator:
    """STS-B dev for model selection, the seven test sets for the final figures.

    ``sets`` maps file names (``stsb-dev``, ``sts12-test`` ...) to data;
    ``max_pairs`` keeps only the first N pairs of each (0 = all).
    """

    sets: Mapping[str, STSSet]
    max_pairs: int = 0

    def _subset(self, file_name: str) -> STSSet:
        return self.sets[file_name].head(self.max_pairs)

    def dev(self, encode: Encode) -> dict[str, float]:
        return evaluate_sets(encode, {"dev": self._subset(DEV_SET)})

    def test(self, encode: Encode) -> dict[str, float]:
        metrics = evaluate_sets(encode, {name: self._subset(f"{name}-test") for name in TEST_SETS})
        metrics.update(average_metrics(metrics))
        return metrics

    def stsb_test_seconds(self, encode: Encode) -> float:
        """Seconds to test on STS-B alone with ``encode``: its sentences encoded, their cosines scored (SG-BERT
        Table 6's inference, "the time elapsed during ... inference when tested on STS-B")."""
        started = time.perf_counter()
        evaluate_sets(encode, {"stsb": self._subset("stsb-test")})
        return time.perf_counter() - started
