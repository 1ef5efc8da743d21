"""The seven STS test sets encoded and scored by ours and by sentence-transformers, on the same device."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from benchmarks.gpu.common import PRECISIONS, synchronize
from trainers.data.sources import TEST_SETS
from trainers.metrics import Metric
from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import resolve_model_path
from trainers.registry import get_method


def evaluation_setup(model: str, device: torch.device, max_pairs: int) -> tuple[dict[str, Any], Any, SentenceEncoder]:
    """The untuned trial's config (mean pooling), its STS evaluator and its encoder on ``device``."""
    from trainers.suites.sts import STSEvaluator

    config = get_method("none").resolve({"model": model, "pooling": "mean", "eval_max_pairs": max_pairs})
    return config, STSEvaluator.of_trial(config), SentenceEncoder.from_config(config).to(device)


def evaluation(model: str, device: torch.device, repeats: int, max_pairs: int) -> list[dict[str, Any]]:
    """The seven STS test sets encoded and scored: ours in each precision at the device's ``eval_batch_size``
    (token ids kept; and tokenised afresh), at the other size measured for its default (128 or 512), and
    sentence-transformers' ``encode`` of their distinct sentences in fp32 and fp16."""
    from trainers.common_knobs import eval_batch_size  # not at import: the legacy steps' trainers lack it
    from trainers.training.encoding import encode_fn

    config, evaluator, encoder = evaluation_setup(model, device, max_pairs)
    other_size = 128 if eval_batch_size(0, device.type) == 512 else 512
    sentences = list(dict.fromkeys(s for name in TEST_SETS for sts in [evaluator._subset(f"{name}-test")]
                                   for s in (*sts.sentence1, *sts.sentence2)))
    rows = []
    variants = [("ours", precision, {}, True) for precision in PRECISIONS]
    variants += [("ours, tokenised afresh", "fp32", {}, False),
                 (f"ours, eval_batch_size {other_size}", "tf32", {"eval_batch_size": other_size}, True)]
    # Last: the transformer stays compiled (its warm-up pass compiles, one graph for every padded length; with
    # reduce-overhead, on a GPU, it also records each length's CUDA graph).
    variants += [("ours, torch_compile", "tf32", {"torch_compile": True}, True)]
    if device.type == "cuda":  # a CPU records no CUDA graphs: the row above again
        variants += [("ours, torch_compile reduce-overhead", "tf32",
                      {"torch_compile": True, "torch_compile_mode": "reduce-overhead"}, True)]
    for what, precision, knobs, cached in variants:
        if knobs.get("torch_compile"):
            encoder.compile_transformer(knobs.get("torch_compile_mode", "default"))
        encode = encode_fn(encoder, {**config, **knobs, "eval_precision": precision}, cached_tokens=cached)
        seconds, score = timed_test(evaluator, encode, device, repeats)
        rows.append({"what": what, "precision": precision, "seconds": seconds, "test_avg": score,
                     "sentences": len(sentences)})
    rows += sentence_transformers_encode(model, sentences, device, repeats)
    return rows


def timed_test(evaluator: Any, encode: Callable, device: torch.device, repeats: int) -> tuple[float, float]:
    """(median seconds, test average) of the seven test sets, after a warm-up pass."""
    evaluator.test(encode)  # warm: token ids kept, kernels chosen
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        scores = evaluator.test(encode)
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), scores[Metric.sts(Metric.STS_AVG)]


def sentence_transformers_encode(model: str, sentences: list[str], device: torch.device,
                                 repeats: int) -> list[dict[str, Any]]:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return []
    rows = []
    for precision in ("fp32", "fp16"):
        peer = SentenceTransformer(resolve_model_path(model), device=str(device))
        if precision == "fp16":
            peer = peer.half()
        peer.encode(sentences[:256], batch_size=128)
        seconds = []
        for _ in range(repeats):
            synchronize(device)
            started = time.perf_counter()
            peer.encode(sentences, batch_size=128, convert_to_tensor=True)
            synchronize(device)
            seconds.append(time.perf_counter() - started)
        rows.append({"what": "sentence-transformers encode", "precision": precision,
                     "seconds": statistics.median(seconds), "test_avg": None, "sentences": len(sentences)})
    return rows
