"""STS evaluation speed: our evaluator against a plain reference loop, in one run.

    python -m benchmarks.sts_eval

Both encode the seven test sets with the default model and mean pooling. The
reference encodes each set's sentence1 and sentence2 lists as given, batch 32,
no sorting, no deduplication. Ours encodes every distinct sentence of all sets
once, longest first, batch 128. Both must give the same correlations (checked),
and the figures go to benchmarks/results.md.
"""

from __future__ import annotations

import platform
import time

import torch

from benchmarks.results_file import write_section
from trainers.data import TEST_SETS, load_sts
from trainers.encoder import BUNDLED_MODEL, SentenceEncoder
from trainers.evaluation import STSEvaluator, cosine_scores, correlations

MAX_LENGTH = 256


@torch.inference_mode()
def reference_encode(encoder: SentenceEncoder, sentences: list[str], batch_size: int = 32) -> torch.Tensor:
    out = []
    for start in range(0, len(sentences), batch_size):
        features = encoder.tokenize(sentences[start : start + batch_size], MAX_LENGTH)
        out.append(encoder(features))
    return torch.cat(out)


def main() -> None:
    encoder = SentenceEncoder.from_pretrained(BUNDLED_MODEL, pooling="mean").eval()
    sets = load_sts("local", [f"{n}-test" for n in TEST_SETS])
    n_sentences = 2 * sum(len(s) for s in sets.values())
    n_unique = len({x for s in sets.values() for x in (*s.sentence1, *s.sentence2)})

    started = time.perf_counter()
    reference = {}
    for name in TEST_SETS:
        sts = sets[f"{name}-test"]
        left, right = reference_encode(encoder, list(sts.sentence1)), reference_encode(encoder, list(sts.sentence2))
        reference[name] = correlations(cosine_scores(left, right), sts.scores)[0]
    reference_seconds = time.perf_counter() - started

    started = time.perf_counter()
    ours = STSEvaluator(sets).test(lambda s: encoder.encode(s, batch_size=128, max_length=MAX_LENGTH))
    ours_seconds = time.perf_counter() - started

    worst = max(abs(ours[f"{n}_spearman"] - reference[n]) for n in TEST_SETS)
    assert worst < 0.01, f"evaluator and reference disagree by {worst:.4f} Spearman points"
    ratio = reference_seconds / ours_seconds
    body = f"""Command: `python -m benchmarks.sts_eval` (all-MiniLM-L6-v2, mean pooling, seven test sets,
{n_sentences} sentences of which {n_unique} distinct; {torch.get_num_threads()} torch threads on
{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}).

| run | seconds |
| --- | ---: |
| reference loop (as given, batch 32, no sorting, no dedup) | {reference_seconds:.1f} |
| `STSEvaluator.test` (dedup across sets, longest first, batch 128) | {ours_seconds:.1f} |
| **speed-up** | **{ratio:.2f}x** (target >= 2x) |

Largest Spearman difference between the two: {worst:.5f} points.
"""
    write_section("STS evaluation speed", body)
    print(body)


if __name__ == "__main__":
    main()
