"""ConSERT Table 3's BERT-flow target rows with their NLI stage shared (``share_stages``) and trained in every
trial, measured in one run.

    python -m benchmarks.shared_stages

The first ``--rows`` of the seven rows of ``consert_supervised.yaml`` (seed 1, the bundled model), both stages
cut to ``--max-steps`` and each evaluation to ``--eval-pairs`` pairs of a set, run one after another as one
node's trials: shared, in a folder of their own that starts empty (the first trial trains the NLI stage, the
others read it), and unshared; the two sides take turns, ``--repeats`` times. The hub's labelled NLI cannot be
read here, so the NLI stage trains on a timing substitute named in the section: STS-B train's pairs, labelled
by their gold score. It reports each side's wall seconds for the rows, the trials that read the stage, the
largest difference of a test score between the sides (0: bit for bit), and what keying the paper's NLI costs
each trial: the digest of as many pairs of the substitute's texts as the flow rows' ``nli_pairs`` set holds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import trainers.data.nli_examples as nli
from benchmarks.results_file import commit_of, write_section
from sweep.spec.sweep_spec import load_spec
from trainers.data.sources import load_sts
from trainers.method import TrialConfig
from trainers.metrics import Metric
from trainers.training.loop import run_trial
from trainers.training.shared_stages import examples_digest

SPEC = Path(__file__).resolve().parent.parent / "search_spaces" / "consert_supervised.yaml"
FLOW_STEPS = 1_753
"""The seven flow rows' own stages at the paper's scale (their corpora at batch 32 of pairs, one epoch)."""


def substitute_nli(pairs: int) -> list[tuple[str, str, int]]:
    """STS-B train's first ``pairs`` pairs, labelled by gold score: >= 4 entailment, <= 1.5 contradiction, else
    neutral. For timing only: it trains as many steps as labelled NLI of that size."""
    train = load_sts(names=["stsb-train"])["stsb-train"]
    labels = [0 if score >= 4 else 2 if score <= 1.5 else 1 for score in train.scores]
    rows = list(zip(train.sentence1, train.sentence2, labels))
    return (rows * (pairs // len(rows) + 1))[:pairs]


def flow_rows(rows: int, overrides: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = load_spec(SPEC, overrides=overrides, seeds=[1], check_environment=False)
    found = [(t.point.row, dict(t.config)) for t in spec.trials if t.point.row.startswith("BERT-base-flow")]
    return found[:rows]


def run_side(configs: list[tuple[str, dict[str, Any]]], share: bool, folder: str) -> tuple[float, list[dict]]:
    """The rows' trials one after another; their wall seconds and final figures."""
    finals = []
    started = time.perf_counter()
    for _, config in configs:
        finals.append(run_trial(TrialConfig({**config, "share_stages": share, "shared_stages_dir": folder})))
    return time.perf_counter() - started, finals


def measure(rows: int, max_steps: int, eval_pairs: int, repeats: int, nli_pairs: int,
            model: str | None = None) -> dict[str, Any]:
    """Both sides, ``repeats`` times, taking turns (shared first in even repeats)."""
    overrides = {"max_steps": max_steps, "eval_max_pairs": eval_pairs, **({"model": model} if model else {})}
    configs = flow_rows(rows, overrides)
    pairs = substitute_nli(nli_pairs)
    load = nli.load_nli_pairs
    nli.load_nli_pairs = lambda pair_set: list(pairs)
    seconds: dict[str, list[float]] = {"shared": [], "unshared": []}
    finals: dict[str, list[dict]] = {}
    try:
        for repeat in range(repeats):
            for share in ((True, False) if repeat % 2 == 0 else (False, True)):
                with tempfile.TemporaryDirectory() as folder:
                    side = "shared" if share else "unshared"
                    took, finals[side] = run_side(configs, share, folder)
                    seconds[side].append(took)
    finally:
        nli.load_nli_pairs = load
    paper_pairs = nli.NLI_PAIR_SETS[configs[0][1]["nli_pairs"]]  # the flow rows' NLI (BERT-flow's allnli)
    paper_scale = (pairs * (paper_pairs // len(pairs) + 1))[:paper_pairs]
    started = time.perf_counter()
    examples_digest(paper_scale)
    return {
        "rows": [row for row, _ in configs], "max_steps": max_steps, "eval_pairs": eval_pairs,
        "nli_pairs": nli_pairs, "paper_pairs": paper_pairs, "repeats": repeats, "seconds": seconds,
        "read": [f.get(Metric.STAGES_REUSED, 0.0) for f in finals["shared"]],
        "largest_difference": max(abs(a[k] - b[k]) for a, b in zip(finals["shared"], finals["unshared"])
                                  for k in a if k.startswith(Metric.TEST_PREFIX) and k != Metric.TEST_SECONDS),
        "digest_seconds": time.perf_counter() - started,
    }


def render(measured: dict[str, Any]) -> str:
    shared, unshared = (statistics.median(measured["seconds"][side]) for side in ("shared", "unshared"))
    rows = measured["rows"]
    read = sum(1 for r in measured["read"] if r)
    nli_steps = measured["paper_pairs"] // 16  # one epoch at the NLI stage's batch of 16, the short batch dropped
    return "\n".join([
        f"Command: `python -m benchmarks.shared_stages --rows {len(rows)} --max-steps {measured['max_steps']} "
        f"--eval-pairs {measured['eval_pairs']} --repeats {measured['repeats']} --nli-pairs {measured['nli_pairs']}` "
        f"(commit {commit_of()}, {time.strftime('%Y-%m-%d')}, {torch.get_num_threads()} torch threads, CPU; the "
        "sides take turns). `consert_supervised.yaml`'s rows " + ", ".join(f"'{r}'" for r in rows) + ", seed 1, "
        f"the bundled model, each stage cut to {measured['max_steps']} steps and each evaluated set to "
        f"{measured['eval_pairs']} pairs. **The NLI stage trains on a substitute**: STS-B train's pairs labelled "
        "by gold score (the hub's NLI cannot be read here), as many steps as NLI of that size.",
        "",
        "| NLI stage | wall seconds, the rows one after another (median of the repeats) | trials that read it |",
        "| --- | ---: | ---: |",
        f"| shared (`share_stages: true`, the default) | {shared:.1f} | {read} of {len(rows)} |",
        f"| trained in every trial (`share_stages: false`) | {unshared:.1f} | 0 of {len(rows)} |",
        "",
        f"Shared: **{unshared / shared:.2f}x** faster here, where each trial's NLI stage is "
        f"{measured['max_steps']} steps; at the paper's NLI ({nli_steps:,} steps a trial, {FLOW_STEPS:,} for the "
        f"seven flows) the seven rows train {nli_steps + FLOW_STEPS:,} steps shared against "
        f"{7 * nli_steps + FLOW_STEPS:,}. Largest difference of a test score between "
        f"the sides: {measured['largest_difference']:.1e} Spearman points (0: the same bits). Keying a trial's "
        f"NLI stage reads its pairs: at the paper's {measured['paper_pairs']:,} pairs the digest takes "
        f"{measured['digest_seconds']:.1f} s here, paid by every trial, the one that trains the stage too.",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--eval-pairs", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--nli-pairs", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    body = render(measure(args.rows, args.max_steps, args.eval_pairs, args.repeats, args.nli_pairs))
    write_section("Shared stages: ConSERT Table 3's flow rows", body)
    print(body)


if __name__ == "__main__":
    main()
