import importlib

import pytest

from benchmarks.results_file import write_section


@pytest.mark.parametrize(
    "module", ["benchmarks.sts_eval", "benchmarks.step_time", "benchmarks.engine_overhead", "benchmarks.sweep_cost"]
)
def test_benchmark_modules_import(module):
    assert callable(importlib.import_module(module).main)


def test_write_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "results.md"
    write_section("A", "first a", path)
    write_section("B", "only b", path)
    write_section("A", "second a", path)
    text = path.read_text(encoding="utf-8")
    assert "second a" in text and "first a" not in text and "only b" in text
    assert text.index("## A") < text.index("## B") and text.count("## A") == 1
