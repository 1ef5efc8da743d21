"""How a trial's evaluations encode sentences: its pooling, batch size, length limit and ``eval_precision``; the
dev evaluations that select with their own pooling (``selection_pooling``) and batches (``selection_batches``)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from trainers.common_knobs import eval_batch_size, selection_pooling
from trainers.models.encoder import SentenceEncoder
from trainers.suites import Encode
from trainers.suites.sts import INFERENCE_BATCH_SIZE, STSEvaluator, dev_batch_pairs
from trainers.training import precision


def encode_fn(encoder: SentenceEncoder, config: Mapping[str, Any], batch_size: int | None = None,
              cached_tokens: bool = True, pooling: str | None = None, attend_to_padding: bool = False) -> Encode:
    """Sentences -> the trial's sentence vectors, as every evaluation encodes them (its pooling, batch size,
    length and ``eval_precision``): STS, the other suites, and ``sweep evaluate`` of a kept encoder.
    ``batch_size`` replaces ``eval_batch_size``, ``cached_tokens`` False tokenises every call afresh, for
    a timed inference (:func:`inference_seconds`), ``pooling`` replaces the encoder's (the dev
    evaluations' ``selection_pooling``), and ``attend_to_padding`` gives each batch to the transformer without a
    mask."""
    used = precision.resolve(config["eval_precision"], encoder.device)
    batch_size = batch_size or eval_batch_size(config["eval_batch_size"], encoder.device.type)

    def encode(sentences: Sequence[str]) -> torch.Tensor:
        with precision.autocast(used, encoder.device), encoder.pooling_as(pooling or encoder.pooling):
            return encoder.encode(sentences, batch_size=batch_size, max_length=config["eval_max_length"],
                                  cached_tokens=cached_tokens, attend_to_padding=attend_to_padding)

    return encode


def dev_encode_fn(encoder: SentenceEncoder, config: Mapping[str, Any]) -> Encode:
    """The encoding of the dev evaluations that select: ``selection_pooling``; with ``selection_batches``
    'senteval' (DCLR), each call one batch (the evaluator hands it SentEval's, :class:`STSEvaluator`), read
    without a mask where the trial trains so (``attend_to_padding``), as the DCLR authors' dev evaluations read
    theirs."""
    pooling = selection_pooling(config)
    if not (batch_pairs := dev_batch_pairs(config)):
        return encode_fn(encoder, config, pooling=pooling)
    return encode_fn(encoder, config, batch_size=batch_pairs, pooling=pooling,
                     attend_to_padding=config["attend_to_padding"])


def inference_seconds(encoder: SentenceEncoder, config: Mapping[str, Any], evaluator: STSEvaluator) -> float:
    """SG-BERT Table 6's inference time: STS-B test alone, tokenised afresh, encoded at batch size 16 (the
    paper's, whatever ``eval_batch_size`` is) and scored, by ``encoder`` as it stands (the trial's final state)."""
    encode = encode_fn(encoder, config, batch_size=INFERENCE_BATCH_SIZE, cached_tokens=False)
    return evaluator.stsb_test_seconds(encode)
