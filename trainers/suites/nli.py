"""NLI accuracy on frozen vectors (SCT Table 3): SICK-E and SNLI in SentEval's setting.

SentEval's features and protocol per task: SICK-E classifies (|u - v|, u * v) with the L2 penalty
chosen on SICK's trial split; SNLI classifies (u, v, u * v, |u - v|) with no penalty, 15 epochs of
one pass each (SentEval's ``max_epoch 15, epoch_size 1, noreg``). Data: SentEval's
``data/downstream`` (``$SENTEVAL_DATA_DIR``): ``SICK/SICK_{train,trial,test_annotated}.txt`` (TSV with
a header: pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment) and
``SNLI/{s1,s2,labels}.{train,dev,test}`` (one sentence or label per line). Metrics:
``test_nli_<sicke|snli>_accuracy`` and ``test_nli_avg_accuracy`` (x 100).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trainers.data.sources import DataError
from trainers.knobs import KnobSet
from trainers.metrics import SuiteName
from trainers.suites import Encode, Suite
from trainers.suites.senteval import CLASSIFIER, Labelled, read_lines

SUITE = Suite(
    name=SuiteName.NLI, summary="NLI accuracy: SICK-E and SNLI, a classifier on SentEval's pair features",
    module=__name__, env="SENTEVAL_DATA_DIR",
    layout="SentEval's data/downstream: SICK/SICK_{train,trial,test_annotated}.txt, "
    "SNLI/{s1,s2,labels}.{train,dev,test}",
    options=KnobSet((CLASSIFIER,)),
)

LABELS = ("entailment", "neutral", "contradiction")
SICK_LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")
SPLITS = ("train", "dev", "test")
SICK_FILES = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")


def read_sick(path: Path) -> Labelled:
    left, right, labels = [], [], []
    for number, line in enumerate(read_lines(path)[1:], start=2):
        fields = line.split("\t")
        if len(fields) < 5 or fields[4] not in SICK_LABELS:
            raise DataError(f"{path}:{number}: expected pair_ID, sentence_A, sentence_B, relatedness_score and "
                            f"entailment_judgment in {list(SICK_LABELS)}")
        left.append(fields[1])
        right.append(fields[2])
        labels.append(SICK_LABELS.index(fields[4]))
    return Labelled((tuple(left), tuple(right)), np.array(labels))


def read_snli(folder: Path, split: str) -> Labelled:
    first, second = read_lines(folder / f"s1.{split}", "latin-1"), read_lines(folder / f"s2.{split}", "latin-1")
    labels = read_lines(folder / f"labels.{split}", "latin-1")
    if not len(first) == len(second) == len(labels):
        raise DataError(f"{folder}: s1.{split}, s2.{split} and labels.{split} have {len(first)}, {len(second)} and "
                        f"{len(labels)} lines; expected the same number")
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise DataError(f"{folder / f'labels.{split}'}: labels {unknown[:3]} not in {list(LABELS)}")
    return Labelled((tuple(first), tuple(second)), np.array([LABELS.index(label) for label in labels]))


def load_local(folder: str | Path) -> dict[str, tuple[Labelled, ...]]:
    folder = Path(folder)
    return {
        "sicke": tuple(read_sick(folder / "SICK" / name) for name in SICK_FILES),
        "snli": tuple(read_snli(folder / "SNLI", split) for split in SPLITS),
    }


def pair_vectors(encode: Encode, data: Labelled) -> tuple[np.ndarray, np.ndarray]:
    left, right = (encode(list(side)).double().numpy() for side in data.texts)
    return left, right


def sick_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.hstack([np.abs(u - v), u * v])


def snli_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.hstack([u, v, u * v, np.abs(u - v)])


def evaluate(encode: Encode, data: Mapping[str, Any], options: Mapping[str, Any], seed: int) -> dict[str, float]:
    from trainers.suites.classifier import ClassifierConfig, split_accuracy

    config = ClassifierConfig.named(options["classifier"], seed)
    sick = [(sick_features(*pair_vectors(encode, split)), split.labels) for split in data["sicke"]]
    snli = [(snli_features(*pair_vectors(encode, split)), split.labels) for split in data["snli"]]
    accuracies = {
        "sicke": split_accuracy(config, *sick),
        "snli": split_accuracy(dataclasses.replace(config, max_epoch=15, epoch_size=1), *snli, penalties=(1e-9,)),
    }
    metrics = {SUITE.metric(task, SuiteName.ACCURACY): value for task, value in accuracies.items()}
    metrics[SUITE.metric(SuiteName.AVG, SuiteName.ACCURACY)] = float(np.mean(list(accuracies.values())))
    return metrics
