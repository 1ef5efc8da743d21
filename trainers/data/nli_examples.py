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
the AllNLI file the authors' code of ConSERT and BERT-flow reads, as published on the hub."""

NLI_TRAIN_PAIRS = 942_069
"""The pairs of that split: what plans count its steps by, without reading it (:mod:`sweep.spec.regime`)."""

NLIPair = tuple[str, str, int]
"""(premise, hypothesis, label) with label 0 entailment, 1 neutral, 2 contradiction."""


def load_nli_pairs() -> list[NLIPair]:
    """The labelled NLI training pairs (hub only). A split of another size than :data:`NLI_TRAIN_PAIRS` (the
    hub's copy changed) is warned of: plans counted its steps by that size."""
    import datasets

    rows = datasets.load_dataset(NLI_DATASET, "pair-class", split="train")
    if len(rows) != NLI_TRAIN_PAIRS:
        warnings.warn(f"{NLI_DATASET} (pair-class, train) has {len(rows):,} pairs where {NLI_TRAIN_PAIRS:,} were "
                      "expected: `sweep plan` counted the NLI stages' steps by the latter", stacklevel=2)
    return list(zip(rows["premise"], rows["hypothesis"], rows["label"]))


def nli_examples(config: Mapping[str, Any]) -> list[NLIPair]:
    """A stage's examples (:class:`trainers.method.Stage`): the labelled NLI pairs, whatever the config."""
    return load_nli_pairs()


def nli_hub_problems(knob: str, setting: str, instead: str) -> list[Problem]:
    """The refusal of a ``knob`` ``setting`` that trains on labelled NLI where the hub cannot be reached;
    ``instead`` says what runs without it."""
    if hub_reachable():
        return []
    return [Problem(knob, f"{setting} needs labelled NLI ({NLI_DATASET}) from the Hugging Face hub, which cannot "
                          f"be reached; no other data is substituted ({instead})")]
