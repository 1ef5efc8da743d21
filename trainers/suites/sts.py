"""The STS suite: cosine similarity against gold scores, Spearman and Pearson x 100, on STS-B dev (model
selection, at every evaluation) and the seven test sets (a trial's final figures).

For STS12-16, which are made of subsets, three aggregations are computed:
``all`` (every subset's pairs concatenated; the default, as SimCSE, ConSERT and
SCT report it), ``mean`` (the plain mean of per-subset correlations) and
``wmean`` (the mean weighted by subset size, SentEval's other figure).
Metric names (all made by :meth:`results.record.Metric.sts`): ``<set>_spearman`` /
``<set>_pearson`` for ``all``, ``<set>_mean_spearman`` and ``<set>_wmean_spearman`` for the others, and
``avg_spearman`` (plus ``avg_mean_spearman``, ``avg_wmean_spearman``) over the seven sets; a trial's
final report prefixes ``test_`` (``test_avg_spearman``), STS-B dev's are ``dev_spearman`` and
``dev_pearson``.

STS is registered as every other suite (:mod:`trainers.suites`), always chosen, first; the training loop
also scores STS-B dev with it to select a trial's state (:class:`STSEvaluator`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from trainers.data.sources import (
    DEV_SET,
    HUB_DATASETS,
    SICKR_DEV_SET,
    STS_DIR_ENV,
    TEST_SETS,
    STSSet,
    evaluation_names,
    load_sts,
    load_sts_hub,
    load_sts_local,
)
from trainers.metrics import Metric, SuiteName
from trainers.suites import Encode, Suite

if TYPE_CHECKING:
    import torch

SELECTION_PARTS = (Metric.sts(Metric.DEV_STSB), Metric.sts(Metric.DEV_SICKR))
"""The two dev scores whose mean is ``avg_sts``'s ``dev_spearman``, reported beside it at each evaluation."""
INFERENCE_BATCH_SIZE = 16
"""SG-BERT Table 6 times inference "when tested on STS-B ... using batch size 16" (``stsb_test_seconds_b16``)."""
SENTEVAL_BATCH_PAIRS = 128
"""SentEval's batch (its engine's default ``batch_size``): the pairs whose first sentences, then whose second
sentences, go to the encoder together in its STS evaluations (``selection_batches: senteval``)."""


@dataclass(frozen=True, kw_only=True)
class STSSuite(Suite):
    """STS's declaration. Its sets are the ones the trial's config names (``sts_source``: the shipped folder
    or ``$STS_DATA_DIR``, or the hub), each cut to its first ``eval_max_pairs`` pairs; every method's
    environment checks read them (:meth:`trainers.method.Method.environment_problems`), so the suite adds
    no data problem of its own. Its metrics carry no suite name (``test_stsb_spearman``), as trials have
    recorded them from the start."""

    def read(self, options: Mapping[str, Any]) -> dict[str, STSSet]:
        """The seven test sets and the dev sets of a trial's ``selection_metric`` (STS-B dev without one)."""
        return load_sts(options["sts_source"], evaluation_names(options.get("selection_metric", "stsb")))

    def data_problem(self, *which: Any) -> str | None:
        return None

    def metric(self, dataset: str, statistic: str) -> str:
        return Metric.test_set(dataset, statistic)


SUITE = STSSuite(
    name=SuiteName.STS, summary="STS12-16, STS-B, SICK-R (always run; STS-B dev selects)", module=__name__,
    env=STS_DIR_ENV, layout="stsb-dev.tsv and {stsb,sickr,sts12,sts13,sts14,sts15,sts16}-test.tsv in the STS TSV "
    "format (trainers/data/sts_data/SOURCES.md; the shipped copy is trainers/data/sts_data)",
    hub=tuple(dict.fromkeys(dataset for dataset, _ in HUB_DATASETS.values())),
    config_knobs=("sts_source", "eval_max_pairs"),
)


def load_local(folder: str | Path) -> dict[str, STSSet]:
    return load_sts_local(evaluation_names(), folder)


def load_hub() -> dict[str, STSSet]:
    return load_sts_hub(evaluation_names())


def evaluate(encode: Encode, data: Mapping[str, STSSet], options: Mapping[str, Any], seed: int) -> dict[str, float]:
    """A trial's final STS figures: the seven test sets, each cut to ``eval_max_pairs`` pairs, and their
    averages (``test_<set>_<statistic>``, ``test_avg_spearman``)."""
    tested = STSEvaluator(data, options["eval_max_pairs"]).test(encode)
    return {Metric.test(name): value for name, value in tested.items()}


def cosine_scores(left: Any, right: Any) -> np.ndarray:
    """Row-wise cosine similarities of two [n, dim] tensors, in float64."""
    import torch

    return torch.nn.functional.cosine_similarity(left.double(), right.double(), dim=-1).numpy()


def correlations(predicted: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(Spearman, Pearson) x 100."""
    from scipy.stats import pearsonr, spearmanr

    return 100 * float(spearmanr(predicted, gold).statistic), 100 * float(pearsonr(predicted, gold).statistic)


def set_metrics(name: str, sts: STSSet, predicted: np.ndarray) -> dict[str, float]:
    spearman, pearson = correlations(predicted, sts.scores)
    metrics = {Metric.sts(name, SuiteName.SPEARMAN): spearman, Metric.sts(name, SuiteName.PEARSON): pearson}
    subsets = np.asarray(sts.subsets)
    names = list(dict.fromkeys(sts.subsets))
    if len(names) > 1:
        per_subset = [correlations(predicted[subsets == s], sts.scores[subsets == s])[0] for s in names]
        sizes = [int((subsets == s).sum()) for s in names]
        metrics[Metric.sts(name, "mean_spearman")] = float(np.mean(per_subset))
        metrics[Metric.sts(name, "wmean_spearman")] = float(np.average(per_subset, weights=sizes))
    return metrics


def average_metrics(metrics: Mapping[str, float], names: Sequence[str] = TEST_SETS) -> dict[str, float]:
    """Seven-set averages; sets without subsets count with their single figure in every average."""
    averages = {Metric.sts(Metric.STS_AVG): float(np.mean([metrics[Metric.sts(n)] for n in names]))}
    for statistic in ("mean_spearman", "wmean_spearman"):
        values = [metrics.get(Metric.sts(n, statistic), metrics[Metric.sts(n)]) for n in names]
        averages[Metric.sts(Metric.STS_AVG, statistic)] = float(np.mean(values))
    return averages


def dev_batch_pairs(config: Mapping[str, Any]) -> int:
    """The pairs of a SentEval batch the dev evaluations that select encode at a time (``selection_batches``
    'senteval', DCLR's); 0: all the dev sentences in one call."""
    return SENTEVAL_BATCH_PAIRS if config.get("selection_batches") == "senteval" else 0


SetVectors = dict[str, tuple["torch.Tensor", "torch.Tensor"]]
"""Each set's vectors of its first sentences and of its second sentences, pair by pair."""


def evaluate_sets(encode: Encode, sets: Mapping[str, STSSet], batch_pairs: int = 0) -> dict[str, float]:
    """Metrics of every set in ``sets`` (keyed by the name used in metric names).

    All sentences of all sets go to ``encode`` in one call, so a sentence that appears in several sets or pairs
    is encoded once. ``batch_pairs`` (SentEval's way, :data:`SENTEVAL_BATCH_PAIRS`): each set's pairs in their
    order, ``batch_pairs`` at a time, their first sentences in one call and then their second sentences in
    another, so that an encoder whose vectors depend on their batch (one reading its padding) gets SentEval's.
    """
    vectors = in_batches(encode, sets, batch_pairs) if batch_pairs else at_once(encode, sets)
    metrics: dict[str, float] = {}
    for name, sts in sets.items():
        left, right = vectors[name]
        metrics.update(set_metrics(name, sts, cosine_scores(left, right)))
    return metrics


def at_once(encode: Encode, sets: Mapping[str, STSSet]) -> SetVectors:
    """Each set's first and second sentences' vectors, from one call of ``encode``."""
    vectors = encode([s for sts in sets.values() for s in (*sts.sentence1, *sts.sentence2)])
    found, offset = {}, 0
    for name, sts in sets.items():
        n = len(sts)
        found[name] = vectors[offset : offset + n], vectors[offset + n : offset + 2 * n]
        offset += 2 * n
    return found


def in_batches(encode: Encode, sets: Mapping[str, STSSet], batch_pairs: int) -> SetVectors:
    """Each set's first and second sentences' vectors, from a call of ``encode`` per SentEval batch."""
    import torch

    found = {}
    for name, sts in sets.items():
        starts = range(0, len(sts), batch_pairs)
        halves = [(encode(sts.sentence1[i : i + batch_pairs]), encode(sts.sentence2[i : i + batch_pairs]))
                  for i in starts]
        found[name] = torch.cat([left for left, _ in halves]), torch.cat([right for _, right in halves])
    return found


@dataclass
class STSEvaluator:
    """STS-B dev for model selection, the seven test sets for the final figures.

    ``sets`` maps file names (``stsb-dev``, ``sts12-test`` ...) to data;
    ``max_pairs`` keeps only the first N pairs of each (0 = all); ``selection_metric`` is the dev score
    :meth:`dev` gives as ``dev_spearman`` (``selection_metric``: STS-B dev's, or ``avg_sts``, the mean of STS-B
    dev's and SICK-R dev's, as SimCSE's trainer computes it); ``dev_batch_pairs`` hands :meth:`dev`'s encode
    SentEval's batches (``selection_batches``: 'senteval', :func:`evaluate_sets`).
    """

    sets: Mapping[str, STSSet]
    max_pairs: int = 0
    selection_metric: str = "stsb"
    dev_batch_pairs: int = 0  # the dev sets encoded in SentEval's batches of this many pairs (0: all at once)

    def _subset(self, file_name: str) -> STSSet:
        return self.sets[file_name].head(self.max_pairs)

    @classmethod
    def of_trial(cls, config: Mapping[str, Any]) -> STSEvaluator:
        """The sets a trial's config names (``sts_source``), cut to its ``eval_max_pairs`` (:data:`SUITE`), with
        the dev sets of its ``selection_metric``."""
        return cls(SUITE.read(config), config["eval_max_pairs"], config.get("selection_metric", "stsb"),
                   dev_batch_pairs(config))

    def dev(self, encode: Encode) -> dict[str, float]:
        """The selection's dev metrics: ``dev_spearman`` (and STS-B dev's ``dev_pearson``); for ``avg_sts`` the mean
        of ``dev_stsb_spearman`` and ``dev_sickr_spearman``, with both."""
        if self.selection_metric == "stsb":
            return evaluate_sets(encode, {Metric.STS_DEV: self._subset(DEV_SET)}, self.dev_batch_pairs)
        parts = {Metric.DEV_STSB: self._subset(DEV_SET), Metric.DEV_SICKR: self._subset(SICKR_DEV_SET)}
        scores = evaluate_sets(encode, parts, self.dev_batch_pairs)
        spearman = {name: scores[name] for name in SELECTION_PARTS}
        return {Metric.DEV: float(np.mean(list(spearman.values()))), **spearman}

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
