"""STS evaluation speed: our evaluator in fp32 and bf16 against a plain loop and sentence-transformers, in one run.

    python -m benchmarks.sts_eval

All encode the seven test sets with the default model and mean pooling. The
reference encodes each set's sentence1 and sentence2 lists as given, batch 32,
no sorting, no deduplication. sentence-transformers' own ``encode`` (the peer
users would otherwise pick; float32, its defaults, batch 128) encodes the same
lists. Ours encodes every distinct sentence of all sets once, longest first,
batch 128, in float32 and under bf16 autocast (``eval_precision``). The fp32
sides must give the same correlations (checked); the bf16 scores are shown
beside them. The sides run in interleaved repeats and each figure is the
median of its repeats (the machine may be shared). Ours tokenises each
sentence list once per process (:mod:`trainers.models.encoder`): its first pass
tokenises, the later ones find the token ids in memory, as a worker's second
evaluation and next trial do. Figures go to benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Callable

import torch

from benchmarks.results_file import write_section
from trainers.data.sources import TEST_SETS, STSSet, load_sts
from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path
from trainers.suites.sts import STSEvaluator, correlations, cosine_scores
from trainers.training.precision import autocast, cpu_runs_bf16_fast

MAX_LENGTH = 256


@torch.inference_mode()
def reference_encode(encoder: SentenceEncoder, sentences: list[str], batch_size: int = 32) -> torch.Tensor:
    out = []
    for start in range(0, len(sentences), batch_size):
        features = encoder.tokenize(sentences[start : start + batch_size], MAX_LENGTH)
        out.append(encoder(features))
    return torch.cat(out)


def per_set(sets: dict[str, STSSet], encode: Callable[[list[str]], torch.Tensor]) -> dict[str, float]:
    """Spearman x 100 of each test set, its two sides encoded as given."""
    scores = {}
    for name in TEST_SETS:
        sts = sets[f"{name}-test"]
        left, right = encode(list(sts.sentence1)), encode(list(sts.sentence2))
        scores[name] = correlations(cosine_scores(left.float(), right.float()), sts.scores)[0]
    return scores


def timed(run: Callable[[], dict[str, float]]) -> tuple[float, dict[str, float]]:
    started = time.perf_counter()
    scores = run()
    return time.perf_counter() - started, scores


def interleaved(sides: dict[str, Callable[[], dict[str, float]]],
                repeats: int) -> dict[str, tuple[float, dict[str, float]]]:
    """Each side's median seconds over ``repeats`` rounds of all sides in turn, and its scores."""
    seconds: dict[str, list[float]] = {label: [] for label in sides}
    scores: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for label, run in sides.items():
            elapsed, scores[label] = timed(run)
            seconds[label].append(elapsed)
    return {label: (statistics.median(seconds[label]), scores[label]) for label in sides}


def main(argv: list[str] | None = None) -> None:
    from sentence_transformers import SentenceTransformer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.sts_eval")
    parser.add_argument("--repeats", type=int, default=3, help="Interleaved rounds of all sides; medians count.")
    parser.add_argument("--without-reference", action="store_true",
                        help="Leave out the plain reference loop (the slowest side) to measure the others sooner.")
    args = parser.parse_args(argv)

    encoder = SentenceEncoder.from_pretrained(BUNDLED_MODEL, pooling="mean").eval()
    peer = SentenceTransformer(resolve_model_path(BUNDLED_MODEL), device="cpu")
    peer.max_seq_length = MAX_LENGTH
    sets = load_sts("local", [f"{n}-test" for n in TEST_SETS])
    n_sentences = 2 * sum(len(s) for s in sets.values())
    n_unique = len({x for s in sets.values() for x in (*s.sentence1, *s.sentence2)})

    def ours(precision: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            with autocast(precision, encoder.device):
                metrics = STSEvaluator(sets).test(lambda s: encoder.encode(s, batch_size=128, max_length=MAX_LENGTH))
            return {n: metrics[f"{n}_spearman"] for n in TEST_SETS}
        return run

    reference_label = "reference loop (as given, batch 32, no sorting, no dedup), fp32"
    peer_label = "sentence-transformers `encode` (its defaults, batch 128), fp32"
    ours_label = "`STSEvaluator.test` (dedup across sets, longest first, batch 128), fp32"
    bf16_label = "`STSEvaluator.test`, bf16 autocast (`eval_precision: bf16`)"
    sides = {
        peer_label: lambda: per_set(sets, lambda s: peer.encode(s, batch_size=128, convert_to_tensor=True)),
        ours_label: ours("fp32"),
    }
    if not args.without_reference:
        sides[reference_label] = lambda: per_set(sets, lambda s: reference_encode(encoder, s))
    # Without AMX or AVX-512 bf16 the CPU emulates bf16 (several times slower than fp32, and `auto`
    # never picks it there): such a side would measure the emulation, not the evaluator.
    bf16_native = cpu_runs_bf16_fast()
    if bf16_native:
        sides[bf16_label] = ours("bf16")
    results = interleaved(sides, args.repeats)
    base_seconds, base_scores = results[ours_label]
    for label in results.keys() - {ours_label, bf16_label}:
        worst = max(abs(results[label][1][n] - base_scores[n]) for n in TEST_SETS)
        assert worst < 0.01, f"{label} and our evaluator disagree by {worst:.4f} Spearman points"

    def avg(scores: dict[str, float]) -> float:
        return sum(scores.values()) / len(scores)

    rows = [f"| {label} | {seconds:.1f} | {seconds / base_seconds:.2f} | {avg(scores):.2f} | "
            f"{max(abs(scores[n] - base_scores[n]) for n in TEST_SETS):.3f} |"
            for label, (seconds, scores) in results.items()]
    peer_seconds = results[peer_label][0]
    if bf16_native:
        bf16_seconds = results[bf16_label][0]
        bf16_line = (f"ours in bf16 against sentence-transformers: **{peer_seconds / bf16_seconds:.2f}x**; "
                     "bf16 against fp32:\n"
                     f"**{base_seconds / bf16_seconds:.2f}x**")
    else:
        bf16_line = "bf16 not measured: this CPU emulates it (no AMX, no AVX-512 bf16)"
    body = f"""Command: `python -m benchmarks.sts_eval --repeats \
{args.repeats}{' --without-reference' if args.without_reference else ''}` (all-MiniLM-L6-v2, mean pooling, \
seven test sets,
{n_sentences} sentences of which {n_unique} distinct; {torch.get_num_threads()} torch threads on
{platform.processor() or platform.machine()} ({torch.backends.cpu.get_cpu_capability()}), AMX / AVX-512 bf16: \
{'yes' if cpu_runs_bf16_fast() else 'no'};
{time.strftime('%Y-%m-%d')}; median of {args.repeats} interleaved passes each, in one process; load average \
{os.getloadavg()[0]:.1f} at the end on
{os.cpu_count()} cores).

| run | seconds | time / ours fp32 | seven-set avg Spearman | largest set difference to ours fp32 |
| --- | ---: | ---: | ---: | ---: |
{chr(10).join(rows)}

Ours in fp32 against sentence-transformers: **{peer_seconds / base_seconds:.2f}x** faster at equal scores;
{bf16_line} (targets against sentence-transformers: >= 2.5x in fp32, >= 4x in bf16 on a CPU
with AMX or AVX-512 bf16; without them bf16 is emulated and `auto` picks fp32).
"""
    write_section("STS evaluation speed", body)
    print(body)


if __name__ == "__main__":
    main()
