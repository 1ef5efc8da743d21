"""Sentence vectors and STS scores computed the slow, obvious way, to check the project's against.

Each sentence goes through a Hugging Face model alone (so no padding to mask), and its vector is pooled
from the hidden states as the README defines each pooling; an STS score is Spearman x 100 of the cosine
similarities of the first ``pairs`` pairs of a TSV file.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import torch
from scipy.stats import spearmanr
from torch import Tensor
from transformers import AutoModel, AutoTokenizer, PreTrainedModel


def pooled(states: Sequence[Tensor], pooling: str, layer: int, model: PreTrainedModel) -> Tensor:
    """One sentence's vector from its hidden states ``[tokens, d]`` (index 0: the embedding layer, L: the last);
    ``pooler`` is BERT's: tanh of the model pooler's dense layer over [CLS]."""
    last = len(states) - 1
    if pooling == "pooler":
        return torch.tanh(model.pooler.dense(states[layer][0]))
    if pooling == "first_last_avg":
        return ((states[1] + states[last]) / 2).mean(0)
    if pooling == "last2avg":
        return ((states[last - 1] + states[last]) / 2).mean(0)
    chosen = states[layer]
    return {"cls": lambda: chosen[0], "mean": lambda: chosen.mean(0), "max": lambda: chosen.max(0).values}[pooling]()


@torch.no_grad()
def reference_vectors(model_folder: str | Path, pooling: str, layer: int, sentences: Sequence[str],
                      max_length: int = 256) -> Tensor:
    """``[len(sentences), d]`` vectors of the model in ``model_folder``, one sentence at a time, in float32."""
    model, tokenizer = AutoModel.from_pretrained(model_folder).eval(), AutoTokenizer.from_pretrained(model_folder)
    vectors = []
    for sentence in sentences:
        ids = tokenizer([sentence], truncation=True, max_length=max_length, return_tensors="pt")
        states = [state[0] for state in model(**ids, output_hidden_states=True).hidden_states]
        vectors.append(pooled(states, pooling, layer, model))
    return torch.stack(vectors)


def sts_pairs(path: Path, pairs: int) -> tuple[list[str], list[str], list[float]]:
    """The first ``pairs`` (sentence1, sentence2, score) rows of an STS TSV."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[:pairs]
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [float(r["score"]) for r in rows]


def reference_cosines(model_folder: str | Path, pooling: str, layer: int, path: Path,
                      pairs: int) -> tuple[list[float], list[float]]:
    """The cosine similarities of the first ``pairs`` pairs of an STS TSV, and their gold scores; each
    distinct sentence is encoded once."""
    first, second, gold = sts_pairs(path, pairs)
    unique = sorted(set(first) | set(second))
    vectors = dict(zip(unique, reference_vectors(model_folder, pooling, layer, unique)))
    cosines = [torch.nn.functional.cosine_similarity(vectors[a].double(), vectors[b].double(), dim=0).item()
               for a, b in zip(first, second)]
    return cosines, gold


def spearman_x100(cosines: Sequence[float], gold: Sequence[float]) -> float:
    """Spearman x 100 between cosine similarities and gold scores, as the STS evaluations report it."""
    return 100 * float(spearmanr(cosines, gold).statistic)
