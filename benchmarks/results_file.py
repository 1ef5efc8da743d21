"""Write one benchmark's section of ``benchmarks/results.md``, leaving the others alone."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.md"
TITLE = "# Benchmark results\n\nEach section is written by the benchmark named in it; re-run it to refresh.\n"


def machine() -> str:
    """This machine's CPU model, cores and bf16 instructions (timings and the last digit of bf16 scores differ
    between CPUs), from /proc/cpuinfo; the platform's name where there is none."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.platform()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    bf16 = [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags] or ["no AVX-512 bf16 or AMX"]
    return f"{model}, {os.cpu_count()} cores, {', '.join(bf16)}"


def write_section(heading: str, body: str, path: Path = RESULTS, ran_on: str | None = None,
                  commit: str | None = None) -> None:
    """Replace (or append) the section ``## heading`` with ``body``, under the machine and commit it ran on
    (this machine and checkout, unless ``ran_on`` and ``commit`` name those of a measurement made elsewhere)."""
    text = path.read_text(encoding="utf-8") if path.exists() else TITLE
    section = f"## {heading}\n\nMachine: {ran_on or machine()}; commit {commit or commit_of()}.\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def commit_of(checkout: Path | str = Path(__file__).resolve().parent.parent) -> str:
    """The short commit a checkout is at (by default this project's), for the line under a figure."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=checkout).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
