"""SentEval transfer (SG-BERT Table 4): MR, CR, SUBJ, MPQA, SST2, TREC, MRPC accuracy on frozen vectors.

Data: SentEval's ``data/downstream`` folder (``$SENTEVAL_DATA_DIR``; its ``get_transfer_data.bash``
downloads it), files read as SentEval reads them: the binary tasks one sentence per line (latin-1),
SST2 ``sentence<TAB>label``, TREC ``LABEL:fine question``, MRPC the MSR TSV (label, ids, two
sentences). Sentences are kept as written (SentEval splits them into words and joins them again with
spaces; for a Hugging Face tokenizer that changes nothing but whitespace). Metrics:
``test_senteval_<task>_accuracy`` and ``test_senteval_avg_accuracy`` (x 100).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trainers.data.sources import DataError
from trainers.knobs import Knob, KnobSet
from trainers.metrics import SuiteName
from trainers.suites import Encode, Suite

CLASSIFIER = Knob("classifier", str, "mlp", "SentEval's classifier on frozen vectors: 'mlp' (50 hidden units, "
                  "SG-BERT Table 9) or 'logreg' (SentEval's nhid 0, SimCSE's setting).", choices=("mlp", "logreg"))
KFOLD = Knob("kfold", int, 10, "Folds of SentEval's cross-validation (MR, CR, SUBJ, MPQA; TREC and MRPC "
             "choose their L2 penalty by it).", low=2)
SUITE = Suite(
    name=SuiteName.SENTEVAL, summary="SentEval transfer: MR, CR, SUBJ, MPQA, SST2, TREC, MRPC (accuracy)",
    module=__name__, env="SENTEVAL_DATA_DIR",
    layout="SentEval's data/downstream: MR/rt-polarity.{pos,neg}, CR/custrev.{pos,neg}, SUBJ/subj.{objective,"
    "subjective}, MPQA/mpqa.{pos,neg}, SST/binary/sentiment-{train,dev,test}, TREC/{train_5500,TREC_10}.label, "
    "MRPC/msr_paraphrase_{train,test}.txt",
    options=KnobSet((CLASSIFIER, KFOLD)),
)

BINARY_FILES = {
    "mr": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "cr": ("CR/custrev.pos", "CR/custrev.neg"),
    "subj": ("SUBJ/subj.subjective", "SUBJ/subj.objective"),
    "mpqa": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
"""Each cross-validated task's two files: label 1's, then label 0's (SentEval's order)."""
TASKS = SuiteName.SENTEVAL_TASKS
TREC_LABELS = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


@dataclass(frozen=True)
class Labelled:
    """Sentences (or sentence pairs, as two tuples) with integer labels."""

    texts: tuple[tuple[str, ...], ...]  # one tuple per side: (sentences,) or (left, right)
    labels: np.ndarray


def read_lines(path: Path, encoding: str = "utf-8") -> list[str]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    lines = [line.strip() for line in path.read_text(encoding=encoding).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise DataError(f"{path}: no lines")
    return lines


def read_binary(folder: Path, task: str) -> Labelled:
    positive, negative = (read_lines(folder / name, "latin-1") for name in BINARY_FILES[task])
    return Labelled((tuple(positive + negative),), np.array([1] * len(positive) + [0] * len(negative)))


def read_sst2(path: Path) -> Labelled:
    sentences, labels = [], []
    for number, line in enumerate(read_lines(path), start=1):
        sentence, _, label = line.rpartition("\t")
        if label not in ("0", "1") or not sentence:
            raise DataError(f"{path}:{number}: expected 'sentence<TAB>0|1', got {line!r}")
        sentences.append(sentence)
        labels.append(int(label))
    return Labelled((tuple(sentences),), np.array(labels))


def read_trec(path: Path) -> Labelled:
    sentences, labels = [], []
    for number, line in enumerate(read_lines(path, "latin-1"), start=1):
        coarse, _, rest = line.partition(":")
        fine_and_question = rest.split(" ", 1)
        if coarse not in TREC_LABELS or len(fine_and_question) != 2:
            raise DataError(f"{path}:{number}: expected 'LABEL:fine question' with LABEL in {list(TREC_LABELS)}, "
                            f"got {line!r}")
        sentences.append(fine_and_question[1])
        labels.append(TREC_LABELS.index(coarse))
    return Labelled((tuple(sentences),), np.array(labels))


def read_mrpc(path: Path) -> Labelled:
    left, right, labels = [], [], []
    for number, line in enumerate(read_lines(path)[1:], start=2):  # a header line first
        fields = line.split("\t")
        if len(fields) != 5 or fields[0] not in ("0", "1"):
            raise DataError(f"{path}:{number}: expected 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String' "
                            f"with Quality 0 or 1, got {len(fields)} fields")
        labels.append(int(fields[0]))
        left.append(fields[3])
        right.append(fields[4])
    return Labelled((tuple(left), tuple(right)), np.array(labels))


def load_local(folder: str | Path) -> dict[str, Any]:
    """Every task's data from SentEval's ``data/downstream`` layout; a missing or bad file raises DataError."""
    folder = Path(folder)
    data: dict[str, Any] = {task: read_binary(folder, task) for task in BINARY_FILES}
    data["sst2"] = tuple(read_sst2(folder / f"SST/binary/sentiment-{split}") for split in ("train", "dev", "test"))
    data["trec"] = (read_trec(folder / "TREC/train_5500.label"), read_trec(folder / "TREC/TREC_10.label"))
    data["mrpc"] = (read_mrpc(folder / "MRPC/msr_paraphrase_train.txt"),
                    read_mrpc(folder / "MRPC/msr_paraphrase_test.txt"))
    return data


def features(encode: Encode, data: Labelled) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of single sentences, or SentEval's pair features (|u - v|, u * v) for MRPC."""
    sides = [encode(list(texts)).double().numpy() for texts in data.texts]
    x = sides[0] if len(sides) == 1 else np.hstack([np.abs(sides[0] - sides[1]), sides[0] * sides[1]])
    return x, data.labels


def evaluate(encode: Encode, data: Mapping[str, Any], options: Mapping[str, Any], seed: int) -> dict[str, float]:
    from trainers.suites.classifier import ClassifierConfig, inner_kfold_accuracy, kfold_accuracy, split_accuracy

    config = ClassifierConfig.named(options["classifier"], seed)
    k = options["kfold"]
    accuracies = {task: inner_kfold_accuracy(config, *features(encode, data[task]), k) for task in BINARY_FILES}
    accuracies["sst2"] = split_accuracy(config, *(features(encode, split) for split in data["sst2"]))
    for task in ("trec", "mrpc"):
        train, test = (features(encode, split) for split in data[task])
        accuracies[task] = kfold_accuracy(config, train, test, k)
    metrics = {SUITE.metric(task, SuiteName.ACCURACY): accuracies[task] for task in TASKS}
    metrics[SUITE.metric(SuiteName.AVG, SuiteName.ACCURACY)] = float(np.mean(list(accuracies.values())))
    return metrics
