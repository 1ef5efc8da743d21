import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import benchmarks
from benchmarks.results_file import write_section

HELPERS = {"results_file", "timed_calls", "gpu_report"}
"""Modules of the benchmarks package that are not benchmarks."""
BENCHMARKS = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name not in HELPERS)
BENCHMARKS_PAGE = Path(__file__).resolve().parent.parent / "docs/benchmarks.md"


def test_the_benchmarks_page_lists_every_benchmark():
    """Every module of the package is a benchmark docs/benchmarks.md lists, and every one it lists exists."""
    listed = set(re.findall(r"python -m benchmarks\.(\w+)", BENCHMARKS_PAGE.read_text(encoding="utf-8")))
    assert listed == set(BENCHMARKS)
    assert "checkpoint_cost" in BENCHMARKS  # the one this test once left out


@pytest.mark.parametrize("module", BENCHMARKS)
def test_benchmark_modules_import(module):
    assert callable(importlib.import_module(f"benchmarks.{module}").main)


def test_write_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "results.md"
    write_section("A", "first a", path)
    write_section("B", "only b", path)
    write_section("A", "second a", path)
    text = path.read_text(encoding="utf-8")
    assert "second a" in text and "first a" not in text and "only b" in text
    assert text.index("## A") < text.index("## B") and text.count("## A") == 1
