"""Small data in each evaluation suite's layout (docs/evaluations.md), written for the tests, and a
keyword encoder whose vectors make each task's right answer known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

POSITIVE, NEGATIVE = "good", "bad"
CLASS_WORDS = ("abbr", "desc", "enty", "hum", "loc", "num")


def keyword_encode(sentences: Sequence[str]) -> torch.Tensor:
    """Row i: +1 in dimension 0 if sentence i has the word 'good', -1 if 'bad'; a one-hot of the first
    TREC class word it holds in dimensions 1-6; 'same'/'other'/'opposite' pairs (NLI) in 7-8."""
    vectors = torch.zeros(len(sentences), 10)
    for row, sentence in enumerate(sentences):
        words = sentence.lower().split()
        vectors[row, 0] = 1.0 if POSITIVE in words else -1.0 if NEGATIVE in words else 0.0
        for index, word in enumerate(CLASS_WORDS):
            if word in words:
                vectors[row, 1 + index] = 1.0
                break
        if "topic" in words:  # NLI: 'topic N' with a sign: u = v, u = -v, or u orthogonal to v
            vectors[row, 7] = -1.0 if "not" in words else 1.0
        if "elsewhere" in words:
            vectors[row, 7], vectors[row, 8] = 0.0, 1.0
    return vectors


def _write(path: Path, lines: Sequence[str], encoding: str = "utf-8") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding=encoding)


def senteval_folder(root: Path, n: int = 20, invert_sst2_test: bool = False) -> Path:
    """SentEval's data/downstream layout with ``n`` sentences per label and file."""
    good = [f"a good thing number {i}" for i in range(n)]
    bad = [f"a bad thing number {i}" for i in range(n)]
    for task, (first, second) in {"MR": ("rt-polarity.pos", "rt-polarity.neg"), "CR": ("custrev.pos", "custrev.neg"),
                                  "SUBJ": ("subj.subjective", "subj.objective"),
                                  "MPQA": ("mpqa.pos", "mpqa.neg")}.items():
        _write(root / task / first, good, "latin-1")
        _write(root / task / second, bad, "latin-1")
    for split in ("train", "dev", "test"):
        one, zero = ("0", "1") if invert_sst2_test and split == "test" else ("1", "0")
        _write(root / "SST/binary" / f"sentiment-{split}",
               [f"{s}\t{one}" for s in good] + [f"{s}\t{zero}" for s in bad])
    for name in ("train_5500.label", "TREC_10.label"):
        _write(root / "TREC" / name, [f"{word.upper()}:fine what {word} question {i}"
                                      for word in CLASS_WORDS for i in range(n // 2)], "latin-1")
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for split in ("train", "test"):  # paraphrases: same sentiment word; not: opposite words
        rows = [f"1\t{i}\t{i}\t{good[i]}\ta good one {i}" for i in range(n)]
        rows += [f"0\t{i}\t{i}\t{good[i]}\ta bad one {i}" for i in range(n)]
        _write(root / "MRPC" / f"msr_paraphrase_{split}.txt", [header, *rows])
    return root


def nli_folder(root: Path, n: int = 12) -> Path:
    """SICK and SNLI in SentEval's layout: entailment u = v, contradiction u = -v, neutral u orthogonal v."""
    pairs = {"entailment": "topic here", "contradiction": "not topic here", "neutral": "elsewhere"}
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        rows = [f"{i}\ttopic {i}\t{second} {i}\t3.0\t{label.upper()}"
                for label, second in pairs.items() for i in range(n)]
        _write(root / "SICK" / name, [header, *rows])
    for split in ("train", "dev", "test"):
        labels = [label for label in pairs for _ in range(n)]
        _write(root / "SNLI" / f"s1.{split}", [f"topic {i}" for i in range(len(labels))], "latin-1")
        _write(root / "SNLI" / f"s2.{split}", [f"{pairs[label]} {i}" for i, label in enumerate(labels)], "latin-1")
        _write(root / "SNLI" / f"labels.{split}", labels, "latin-1")
    return root


def reranking_folder(root: Path, queries: Sequence[dict]) -> Path:
    for name in ("askubuntu", "scidocs"):
        _write(root / name / "test.jsonl", [json.dumps(query) for query in queries])
    return root


def multilingual_sts_folder(root: Path, sets: dict[str, Sequence[tuple[str, str, float]]]) -> Path:
    for name, rows in sets.items():
        _write(root / f"{name}.tsv", ["sentence1\tsentence2\tscore", *(f"{a}\t{b}\t{s}" for a, b, s in rows)])
    return root
