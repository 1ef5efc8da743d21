"""Multilingual STS (SG-BERT Tables 2 and 3): STS17 tracks ar-ar, es-es, en-en and the STS14 Spanish
sets, cosine similarity against gold scores, Spearman x 100, as the English STS sets
(:func:`trainers.suites.sts.evaluate_sets`).

Data: ``$MULTILINGUAL_STS_DATA_DIR/{sts17-ar-ar,sts17-es-es,sts17-en-en,sts14-es}.tsv`` in the STS TSV
format (``trainers/data/sts_data/SOURCES.md``: sentence1, sentence2, score 0-5, optional subset), read by
:func:`trainers.data.sources.read_sts_tsv`. Metrics: ``test_multilingual_sts_<set>_{spearman,pearson}`` (with
``-`` written ``_``) and ``test_multilingual_sts_avg_{spearman,pearson}``; the paper's tables print
Pearson ("for a fair comparison with previous work", Section 4.3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trainers.data.sources import STSSet, read_sts_tsv
from trainers.metrics import Metric, SuiteName
from trainers.suites import Encode, Suite
from trainers.suites.sts import evaluate_sets

SETS = ("sts17-ar-ar", "sts17-es-es", "sts17-en-en", "sts14-es")
SUITE = Suite(
    name=SuiteName.MULTILINGUAL_STS,
    summary="Multilingual STS: STS17 ar-ar, es-es, en-en and STS14 Spanish (Spearman)",
    module=__name__, env="MULTILINGUAL_STS_DATA_DIR",
    layout="sts17-ar-ar.tsv, sts17-es-es.tsv, sts17-en-en.tsv, sts14-es.tsv, each in the STS TSV format "
    "(sentence1, sentence2, score 0-5; trainers/data/sts_data/SOURCES.md)",
)


def load_local(folder: str | Path) -> dict[str, STSSet]:
    return {name: read_sts_tsv(Path(folder) / f"{name}.tsv", name) for name in SETS}


def evaluate(encode: Encode, data: Mapping[str, STSSet], options: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Spearman (as the English sets) and Pearson (what SG-BERT Tables 2 and 3 print) of every set, and
    the average of each."""
    scores = evaluate_sets(encode, {name.replace("-", "_"): data[name] for name in SETS})
    metrics = {}
    for statistic in (SuiteName.SPEARMAN, SuiteName.PEARSON):
        values = {name.replace("-", "_"): scores[Metric.sts(name.replace("-", "_"), statistic)] for name in SETS}
        metrics.update({SUITE.metric(name, statistic): v for name, v in values.items()})
        metrics[SUITE.metric(SuiteName.AVG, statistic)] = float(np.mean(list(values.values())))
    return metrics
