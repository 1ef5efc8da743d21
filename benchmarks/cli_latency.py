"""How long a person waits for each command, and which heavy libraries it imports.

    python -m benchmarks.cli_latency --project DIR [--before CHECKOUT] [--repeats 5]

``DIR`` is a folder where the smoke sweep ran and was collected (``python -m sweep
run search_spaces/smoke.yaml && python -m reports.collect`` there): ``sweep status
smoke`` reads its ``mlflow.db`` and ``reports.tables --sweep smoke`` its
``results.parquet``, as a person does after the five-minute tour. Each command
runs in a fresh process, interleaved with ``python -c pass`` (the floor),
``--repeats`` times; the table gives medians and their ratio to the floor.
``--before CHECKOUT`` times another checkout of the project (a ``git worktree``
of an older commit) in the same rounds, command by command, so that both see
the same load. The heavy libraries a command imports are read from a separate,
untimed run of it under ``python -X importtime``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.results_file import commit_of, write_section

HEAVY = ("torch", "transformers", "ray", "mlflow")
PROJECT = Path(__file__).resolve().parent.parent
TARGETS_S = {"sweep --help": 1.5, "sweep knobs sg": 1.5, "reports.tables --sweep smoke": 1.5,
             "sweep plan sg_opt_ablation.yaml": 3.0, "sweep status smoke": 3.0}
"""Targets for a 2-core CPU machine."""


def commands(project: Path) -> dict[str, list[str]]:
    """Label -> argv after ``python``, run in the checkout's root (the spec path is the checkout's own)."""
    return {
        "python -c pass": ["-c", "pass"],
        "sweep --help": ["-m", "sweep", "--help"],
        "sweep knobs sg": ["-m", "sweep", "knobs", "sg"],
        "sweep plan sg_opt_ablation.yaml": ["-m", "sweep", "plan", "search_spaces/sg_opt_ablation.yaml"],
        "sweep status smoke": ["-m", "sweep", "status", "smoke", "--tracking-uri", f"sqlite:///{project}/mlflow.db"],
        "reports.tables --sweep smoke": ["-m", "reports.tables", "--sweep", "smoke",
                                         "--results", str(project / "results.parquet")],
    }


def environment(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def timed(argv_tail: list[str], checkout: Path) -> float:
    """Seconds of one fresh run; a command that fails is an error (its figures would mean nothing)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv_tail], capture_output=True, text=True, cwd=checkout,
                          env=environment(checkout))
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: python {' '.join(argv_tail)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def heavy_imports(argv_tail: list[str], checkout: Path) -> list[str]:
    """The heavy libraries the command imported (top-level packages in ``-X importtime``'s report)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv_tail], capture_output=True, text=True,
                          cwd=checkout, env=environment(checkout))
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    return [name for name in HEAVY if name in imported]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True,
                        help="A folder where the smoke sweep ran and `python -m reports.collect` wrote results.")
    parser.add_argument("--before", type=Path, help="Another checkout to time in the same rounds.")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    project = args.project.resolve()
    missing = [name for name in ("mlflow.db", "results.parquet") if not (project / name).is_file()]
    if missing:
        print(f"{project}: no {' or '.join(missing)}; run `python -m sweep run search_spaces/smoke.yaml && "
              "python -m reports.collect` there first", file=sys.stderr)
        return 2
    checkouts = {"after": PROJECT, **({"before": args.before.resolve()} if args.before else {})}
    table = commands(project)
    load_at_start = os.getloadavg()[0]
    times = {(label, which): [] for label in table for which in checkouts}
    for _ in range(args.repeats):  # interleaved: each round runs every command of every checkout once
        for label, argv_tail in table.items():
            for which, checkout in checkouts.items():
                times[label, which].append(timed(argv_tail, checkout))
    floor = statistics.median(times["python -c pass", "after"] + times.get(("python -c pass", "before"), []))
    order = [w for w in ("before", "after") if w in checkouts]
    header = " | ".join(f"{w}: median s | {w}: x floor | {w}: heavy imports" for w in order)
    lines = [f"| command | target s | {header} |", "|---|---|" + "---|---|---|" * len(order)]
    for label, argv_tail in table.items():
        cells = []
        for which in order:
            median = statistics.median(times[label, which])
            heavy = ", ".join(heavy_imports(argv_tail, checkouts[which])) or "none"
            cells.append(f"{median:.2f} | {median / floor:.0f} | {heavy}")
        target = f"< {TARGETS_S[label]}" if label in TARGETS_S else "–"
        lines.append(f"| `{label}` | {target} | {' | '.join(cells)} |")
    commit = commit_of(PROJECT)
    before = ""
    if args.before:
        before_commit = commit_of(args.before)
        before = f" Before: commit {before_commit}; after: commit {commit}."
    load = (f"{os.cpu_count()} CPUs, load average {load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at "
            f"the end, {time.strftime('%Y-%m-%d')}")
    body = (f"Fresh process per command ({load}), median of {args.repeats} interleaved rounds; "
            "`x floor` is the ratio to "
            f"`python -c pass` ({floor:.2f} s here). Heavy imports from `python -X importtime`.{before} "
            f"Written by `python -m benchmarks.cli_latency --project DIR"
            f"{' --before CHECKOUT' if args.before else ''}` (DIR: a collected smoke sweep).\n\n" + "\n".join(lines))
    print(body)
    write_section("Command latency (cli_latency)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
