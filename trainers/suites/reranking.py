"""Re-ranking MAP (SCT Table 3): AskUbuntu and SciDocs in the USEB / MTEB setting.

For each query its candidates (the positives and the negatives) are ranked by cosine similarity to
the query, and the query's average precision is the mean, over its positives, of the precision at each
positive's rank (scikit-learn's ``average_precision_score``, as MTEB's RerankingEvaluator computes it).
MAP is the mean over queries x 100; a query without a positive or without a negative is skipped, as
MTEB skips it. Data: ``$RERANKING_DATA_DIR/{askubuntu,scidocs}/test.jsonl`` with one
``{"query": str, "positive": [str], "negative": [str]}`` per line (MTEB's columns), or the hub's
``mteb/askubuntudupquestions-reranking`` and ``mteb/scidocs-reranking`` test splits. Metrics:
``test_reranking_<askubuntu|scidocs>_map`` and ``test_reranking_avg_map``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from trainers.data.sources import DataError
from trainers.metrics import SuiteName
from trainers.suites import Encode, Suite

DATASETS = {"askubuntu": "mteb/askubuntudupquestions-reranking", "scidocs": "mteb/scidocs-reranking"}
"""Our name -> the hub's dataset (its ``test`` split)."""
SUITE = Suite(
    name=SuiteName.RERANKING, summary="Re-ranking MAP: AskUbuntu and SciDocs (USEB/MTEB)",
    module=__name__, env="RERANKING_DATA_DIR",
    layout="askubuntu/test.jsonl and scidocs/test.jsonl, one {query, positive: [...], negative: [...]} per line",
    hub=tuple(DATASETS.values()),
)


@dataclass(frozen=True)
class Query:
    query: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]


def queries_from_rows(rows: Iterable[Mapping[str, Any]], origin: str) -> list[Query]:
    queries = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping) or not isinstance(row.get("query"), str) or not all(
                isinstance(row.get(key), list) for key in ("positive", "negative")):
            raise DataError(f"{origin} row {number}: expected {{query: str, positive: [str], negative: [str]}}")
        queries.append(Query(row["query"], tuple(row["positive"]), tuple(row["negative"])))
    if not queries:
        raise DataError(f"{origin}: no queries")
    return queries


def read_jsonl(path: Path) -> list[Query]:
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected one JSON object per line)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataError(f"{path}:{number}: not JSON ({error.msg})") from None
    return queries_from_rows(rows, str(path))


def load_local(folder: str | Path) -> dict[str, list[Query]]:
    return {name: read_jsonl(Path(folder) / name / "test.jsonl") for name in DATASETS}


def load_hub() -> dict[str, list[Query]]:
    import datasets

    return {name: queries_from_rows(datasets.load_dataset(dataset, split="test"), f"{dataset}[test]")
            for name, dataset in DATASETS.items()}


def mean_average_precision(queries: list[Query], encode: Encode) -> float:
    """MAP x 100 over the queries that have both positives and negatives."""
    import torch
    from sklearn.metrics import average_precision_score

    kept = [q for q in queries if q.positive and q.negative]
    texts = list(dict.fromkeys(t for q in kept for t in (q.query, *q.positive, *q.negative)))
    vectors = torch.nn.functional.normalize(encode(texts).double(), dim=-1)
    row = {text: i for i, text in enumerate(texts)}
    precisions = []
    for q in kept:
        candidates = [*q.positive, *q.negative]
        scores = (vectors[[row[c] for c in candidates]] @ vectors[row[q.query]]).numpy()
        relevant = np.array([1] * len(q.positive) + [0] * len(q.negative))
        precisions.append(average_precision_score(relevant, scores))
    return 100 * float(np.mean(precisions))


def evaluate(encode: Encode, data: Mapping[str, list[Query]], options: Mapping[str, Any],
             seed: int) -> dict[str, float]:
    maps = {name: mean_average_precision(data[name], encode) for name in DATASETS}
    metrics = {SUITE.metric(name, SuiteName.MAP): value for name, value in maps.items()}
    metrics[SUITE.metric(SuiteName.AVG, SuiteName.MAP)] = float(np.mean(list(maps.values())))
    return metrics
