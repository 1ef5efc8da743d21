"""Token ids kept per text, and batches padded from them on the host without the tokenizer.

A small model's training step spends much of its host time tokenising its batch: every epoch tokenises the
same corpus again. :class:`TokenCache` keeps each text's token ids (per length limit) for the next time the
text comes, and :func:`pad` pads a batch of kept rows with numpy, several times faster than the tokenizer's
own ``pad``. Both give exactly what ``tokenizer(texts, padding=True, truncation=True, max_length=...)``
gives (``tests/test_tokens.py`` compares them): tokenising a text alone or in a batch gives the same ids, and
padding follows the tokenizer's side and pad values.
"""

from __future__ import annotations

from itertools import chain
from typing import Mapping, Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

Row = Mapping[str, Sequence[int]]
"""One text's unpadded encoding: ``input_ids``, and ``attention_mask`` / ``token_type_ids`` where the
tokenizer gives them."""

CACHE_TEXTS = 2**18
"""Texts a process keeps token ids for (about 100 MB at most): a corpus of that size is tokenised once in all
its epochs and trials; texts past it (a larger corpus, views rewritten at random) are tokenised each time."""


def pad_values(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """What each key is padded with, as the tokenizer pads it."""
    return {"input_ids": tokenizer.pad_token_id, "attention_mask": 0,
            "token_type_ids": tokenizer.pad_token_type_id, "special_tokens_mask": 1}


def pad(tokenizer: PreTrainedTokenizerBase, rows: Sequence[Row], length: int | None = None) -> dict[str, torch.Tensor]:
    """``rows`` padded to the longest (or to ``length``, no shorter than the longest) on the tokenizer's padding
    side, as int64 tensors (what ``tokenizer.pad(rows, return_tensors="pt")`` gives, with ``padding="max_length",
    max_length=length`` for a length, and with an attention mask where the rows have none)."""
    lengths = np.fromiter((len(row["input_ids"]) for row in rows), dtype=np.int64, count=len(rows))
    width, total = max(int(lengths.max(initial=0)), length or 0), int(lengths.sum())
    positions = np.arange(width)[None, :]
    left = tokenizer.padding_side == "left"
    real = positions >= (width - lengths)[:, None] if left else positions < lengths[:, None]
    values = pad_values(tokenizer)
    features = {}
    for key in rows[0] if rows else ("input_ids",):
        padded = np.full((len(rows), width), values[key], dtype=np.int64)
        padded[real] = np.fromiter(chain.from_iterable(row[key] for row in rows), dtype=np.int64, count=total)
        features[key] = torch.from_numpy(padded)
    if "attention_mask" not in features:
        features["attention_mask"] = torch.from_numpy(real.astype(np.int64))
    return features


class TokenCache:
    """Each text's token ids under each length limit, for at most ``limit`` texts, of one tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, limit: int = CACHE_TEXTS):
        self.tokenizer = tokenizer
        self.limit = limit
        self._rows: dict[tuple[str, int], dict[str, list[int]]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self, texts: Sequence[str], max_length: int) -> list[Row]:
        """The unpadded encoding of each text, tokenising in one call those not kept yet."""
        new = [text for text in dict.fromkeys(texts) if (text, max_length) not in self._rows]
        fresh: dict[str, dict[str, list[int]]] = {}
        if new:
            encoded = self.tokenizer(new, truncation=True, max_length=max_length)
            fresh = {text: {key: encoded[key][i] for key in encoded.keys()} for i, text in enumerate(new)}
            room = max(0, self.limit - len(self._rows))
            self._rows.update({(text, max_length): row for text, row in list(fresh.items())[:room]})
        return [self._rows.get((text, max_length)) or fresh[text] for text in texts]

    def features(self, texts: Sequence[str], max_length: int, to_max_length: bool = False) -> dict[str, torch.Tensor]:
        """``texts`` tokenised, cut at ``max_length`` and padded: ``tokenizer(texts, padding=True,
        truncation=True, max_length=max_length, return_tensors="pt")``, from the kept ids; with
        ``to_max_length``, ``padding="max_length"`` (every batch one shape)."""
        return pad(self.tokenizer, self.rows(texts, max_length), max_length if to_max_length else None)
