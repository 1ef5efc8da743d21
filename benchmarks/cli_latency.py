"""How long a person waits for each command, and which heavy libraries it imports.

    python -m benchmarks.cli_latency [--repeats 5]

Each command runs in a fresh process, interleaved with ``python -c pass`` (the
floor), ``--repeats`` times; the table gives medians and their ratio to the
floor. A second fresh process imports each command's module and lists which
of torch, transformers, ray and mlflow it pulled in (:func:`heavy_imports`,
also what ``tests/test_light_imports.py`` asserts). Commands that need a store
or a results file get a tiny one made here, so the figures do not depend on
what the working folder holds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.results_file import write_section

HEAVY = ("torch", "transformers", "ray", "mlflow")
PROJECT = Path(__file__).resolve().parent.parent


def heavy_imports(module: str) -> list[str]:
    """The heavy libraries that importing ``module`` loads, in a fresh interpreter."""
    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PROJECT)
    return out.stdout.split()


def commands(folder: Path) -> dict[str, tuple[list[str], str]]:
    """Label -> (argv after ``python``, the module it imports first)."""
    spec = str(PROJECT / "search_spaces/sg_opt_ablation.yaml")
    results = str(folder / "results.parquet")
    return {
        "python -c pass": (["-c", "pass"], "sys"),
        "sweep --help": (["-m", "sweep", "--help"], "sweep.cli"),
        "sweep knobs sg": (["-m", "sweep", "knobs", "sg"], "sweep.cli"),
        "sweep plan sg_opt_ablation.yaml": (["-m", "sweep", "plan", spec], "sweep.plan"),
        "sweep status NAME": (["-m", "sweep", "status", "none", "--tracking-uri", f"sqlite:///{folder}/none.db"],
                              "sweep.status"),
        "reports.tables --results FILE": (["-m", "reports.tables", "--results", results], "reports.tables"),
    }


def _write_empty_results(path: Path) -> None:
    import pandas as pd

    pd.DataFrame({"experiment": pd.Series(dtype="string")}).to_parquet(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_latency")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        _write_empty_results(folder / "results.parquet")
        table = commands(folder)
        times: dict[str, list[float]] = {label: [] for label in table}
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        for _ in range(args.repeats):  # interleaved: each repeat runs every command once
            for label, (argv_tail, _) in table.items():
                started = time.perf_counter()
                subprocess.run([sys.executable, *argv_tail], capture_output=True, cwd=PROJECT, env=env)
                times[label].append(time.perf_counter() - started)
    floor = statistics.median(times["python -c pass"])
    lines = ["| command | median s | x `python -c pass` | heavy imports |", "|---|---|---|---|"]
    for label, (_, module) in table.items():
        median = statistics.median(times[label])
        heavy = ", ".join(heavy_imports(module)) or "none"
        lines.append(f"| `{label}` | {median:.2f} | {median / floor:.1f} | {heavy} |")
    body = (f"Fresh process per command, median of {args.repeats} interleaved repeats on this machine "
            f"(`python -m benchmarks.cli_latency`).\n\n" + "\n".join(lines))
    print(body)
    write_section("Command latency (cli_latency)", body)


if __name__ == "__main__":
    main()
