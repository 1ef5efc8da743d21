"""How many of the shipped specs' trials are the same trial: the trials a campaign of a paper's specs, or
specs run one after another on one store, trains once (sweep.run.reuse).

    python -m benchmarks.shared_trials

Each trial of each shipped spec (no budget, sampled and PBT specs left out: their trials are drawn as they
run) is keyed by :func:`sweep.spec.trial_key.trial_key` on this machine; a spec's paper is its ``tags.paper``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.results_file import write_section
from sweep.spec.sweep_spec import load_spec
from sweep.spec.trial_key import trial_key

SPECS = Path(__file__).resolve().parent.parent / "search_spaces"


def shared_trials() -> str:
    keys: dict[str, list[str]] = defaultdict(list)
    specs: Counter = Counter()
    for path in sorted(SPECS.glob("*.yaml")):
        spec = load_spec(path, check_environment=False)
        if spec.glue is not None or not spec.trials_known:
            continue
        paper = spec.tags.get("paper", "(none)")
        specs[paper] += 1
        keys[paper] += [trial_key(trial.config).key for trial in spec.trials]
    lines = ["| paper | specs | trials run one spec at a time | distinct trials | trained once, reused after |",
             "|---|---:|---:|---:|---:|"]
    every = [key for found in keys.values() for key in found]
    for paper, count, found in [*((p, specs[p], keys[p]) for p in sorted(keys)), ("all", sum(specs.values()), every)]:
        distinct = len(set(found))
        lines.append(f"| {paper} | {count} | {len(found)} | {distinct} | {len(found) - distinct} |")
    return "\n".join(lines)


def main() -> None:
    text = ("Command: `python -m benchmarks.shared_trials` (keys only; nothing trains). Trials of the shipped specs "
            "that another spec also runs with the same key are trained once and reused after (`sweep paper NAME`, "
            "or `sweep run` of the specs on one store, docs/campaigns.md); GLUE, sampled and PBT specs are left "
            "out.\n\n" + shared_trials())
    write_section("Trials shared between specs", text)
    print(text)


if __name__ == "__main__":
    main()
