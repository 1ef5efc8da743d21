"""Labelled NLI (SNLI + MultiNLI) as a training stage of a method: the pairs, where they come from, and the
problem when they cannot be read. ConSERT's supervised settings and BERT-flow's NLI-supervised encoder both
train on them, always from the Hugging Face hub, never on substitute data."""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from trainers.data.sources import hub_reachable
from trainers.knobs import Problem

NLI_DATASET = "sentence-transformers/all-nli"
"""SNLI + MultiNLI training pairs with labels (config 'pair-class', 942,069 pairs):
the AllNLI file the ConSERT authors' code reads, as published on the hub."""
SNLI_DATASET = "stanfordnlp/snli"
"""SNLI 1.0 with its validation and test splits, label -1 where the annotators gave no gold label."""

NLI_TRAIN_PAIRS = 942_069
"""The pairs of all-nli's train split."""
SNLI_EVAL_PAIRS = 9_842 + 9_824
"""SNLI's validation and test pairs with a gold label."""
NLI_PAIR_SETS = {"all_nli": NLI_TRAIN_PAIRS, "all_nli_snli_eval": NLI_TRAIN_PAIRS + SNLI_EVAL_PAIRS}
"""Each ``nli_pairs`` setting and its pairs: what plans count an NLI stage's steps by, without reading it
(:mod:`sweep.spec.regime`). 'all_nli_snli_eval' adds SNLI's validation and test pairs, as BERT-flow's
``run_siamese.py`` task allnli does (MNLI train + SNLI train, dev and test)."""

NLIPair = tuple[str, str, int]
"""(premise, hypothesis, label) with label 0 entailment, 1 neutral, 2 contradiction (both datasets' order)."""


def load_nli_pairs(pair_set: str = "all_nli") -> list[NLIPair]:
    """The labelled NLI training pairs of ``pair_set`` (:data:`NLI_PAIR_SETS`; hub only). A set of another size
    than that (the hub's copy changed) is warned of: plans counted its steps by that size."""
    import datasets

    rows = datasets.load_dataset(NLI_DATASET, "pair-class", split="train")
    pairs = list(zip(rows["premise"], rows["hypothesis"], rows["label"]))
    if pair_set == "all_nli_snli_eval":
        for split in ("validation", "test"):
            snli = datasets.load_dataset(SNLI_DATASET, split=split)
            pairs += [pair for pair in zip(snli["premise"], snli["hypothesis"], snli["label"]) if pair[2] != -1]
    if len(pairs) != NLI_PAIR_SETS[pair_set]:
        warnings.warn(f"nli_pairs {pair_set!r} has {len(pairs):,} pairs on the hub where {NLI_PAIR_SETS[pair_set]:,} "
                      "were expected: `sweep plan` counted the NLI stages' steps by the latter", stacklevel=2)
    return pairs


def nli_examples(config: Mapping[str, Any]) -> list[NLIPair]:
    """A stage's examples (:class:`trainers.method.Stage`): the labelled NLI pairs of its ``nli_pairs``."""
    return load_nli_pairs(config["nli_pairs"])


def nli_hub_problems(knob: str, setting: str, instead: str, pair_set: str) -> list[Problem]:
    """The refusal of a ``knob`` ``setting`` that trains on labelled NLI (``pair_set``) where the hub cannot be
    reached; ``instead`` says what runs without it."""
    if hub_reachable():
        return []
    datasets = NLI_DATASET + (f" and {SNLI_DATASET}" if pair_set == "all_nli_snli_eval" else "")
    return [Problem(knob, f"{setting} needs labelled NLI ({datasets}) from the Hugging Face hub, which cannot "
                          f"be reached; no other data is substituted ({instead})")]
