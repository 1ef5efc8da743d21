"""Write one benchmark's section of ``benchmarks/results.md``, leaving the others alone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.md"
TITLE = "# Benchmark results\n\nEach section is written by the benchmark named in it; re-run it to refresh.\n"


def write_section(heading: str, body: str, path: Path = RESULTS) -> None:
    """Replace (or append) the section ``## heading`` with ``body``."""
    text = path.read_text(encoding="utf-8") if path.exists() else TITLE
    section = f"## {heading}\n\n{body.strip()}\n"
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
