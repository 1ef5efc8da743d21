"""A new evaluation suite is its module and its reference in the registry's list (:data:`trainers.suites.SUITES`).

This file is such a module: ``pair_cosine``, a real (if tiny) suite declared as ``SUITE`` at the top, with
its loader and its ``evaluate``. The test registers it by its reference, as the list registers every suite, and runs it
through the path a spec's ``evaluations: [...]`` takes (validation, the data check at plan time, the
trial's config, :func:`trainers.training.loop.run_trial` on the tiny random BERT), and finds its metric in the
trial's final report under the name its declaration gives. Nothing else in the project names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

from tests.conftest import write_spec
from trainers.data.sources import DataError
from trainers.knobs import Knob, KnobSet
from trainers.suites import SUITES, Encode, Suite

# ---------------------------------------------------------------- the suite: its module (this file)

SUITE = Suite(
    name="pair_cosine", summary="Mean cosine similarity of sentence pairs (a test's suite)",
    module=__name__, env="PAIR_COSINE_DATA_DIR", layout="pairs.tsv, one 'sentence<TAB>sentence' per line",
    options=KnobSet((Knob("scale", float, 100.0, "Multiply the mean cosine by this.", low=0.0),)),
)


def load_local(folder: str | Path) -> list[tuple[str, str]]:
    path = Path(folder) / "pairs.tsv"
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return [tuple(line.split("\t")) for line in path.read_text(encoding="utf-8").splitlines() if line]


def evaluate(encode: Encode, data: list[tuple[str, str]], options: Mapping[str, Any], seed: int) -> dict[str, float]:
    left, right = (encode([pair[side] for pair in data]).double().numpy() for side in (0, 1))
    cosines = (left * right).sum(1) / np.linalg.norm(left, axis=1) / np.linalg.norm(right, axis=1)
    return {SUITE.metric("pairs", "cosine"): options["scale"] * float(cosines.mean())}


# ---------------------------------------------------------------- the test


@pytest.fixture
def registered():
    """The suite registered by its reference, and unregistered after the test."""
    suite = SUITES.add(f"{__name__}:SUITE")
    yield suite
    SUITES.remove(suite.name)


def pair_cosine_spec(folder: Path, tiny_bert: str, evaluations: list) -> Path:
    return write_spec(folder, {"name": "pair_cosine", "method": "none", "base": {"model": tiny_bert, "pooling": "mean"},
                               "evaluations": evaluations})


def test_a_suite_registered_by_one_line_runs_where_a_spec_chooses_it(registered, tmp_path, tiny_bert, use_tiny_sts,
                                                                    monkeypatch, capsys):
    from sweep.commands.cli import main as sweep_main
    from sweep.spec.sweep_spec import load_spec
    from trainers.metrics import Metric
    from trainers.training.loop import run_trial

    declared = registered.metric("pairs", "cosine")  # the name its declaration gives
    assert registered is SUITES["pair_cosine"] and declared == "test_pair_cosine_pairs_cosine"
    path = pair_cosine_spec(tmp_path, tiny_bert, ["sts", {"pair_cosine": {"scale": 1.0}}])
    monkeypatch.delenv("PAIR_COSINE_DATA_DIR", raising=False)
    assert sweep_main(["plan", str(path)]) == 2  # its data is checked at plan time, as every suite's
    assert "evaluations: pair_cosine: needs its data in a local folder: set $PAIR_COSINE_DATA_DIR" in (
        capsys.readouterr().err)

    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / "pairs.tsv").write_text("a cat sat\ta cat sat\nstock prices fell\tstock prices fell\n", encoding="utf-8")
    monkeypatch.setenv("PAIR_COSINE_DATA_DIR", str(folder))
    spec = load_spec(path)
    config = spec.trials[0].config
    assert config["evaluations"] == [{"suite": "sts"}, {"suite": "pair_cosine", "scale": 1.0}]
    final = run_trial(config)
    assert final[declared] == pytest.approx(1.0)  # each pair is one sentence twice, scale 1
    assert Metric.TEST_AVG in final  # STS, the first suite, still selects and reports


def test_an_unknown_suite_stays_unknown_until_registered(tmp_path, tiny_bert, use_tiny_sts, capsys):
    from sweep.commands.cli import main as sweep_main

    assert "pair_cosine" not in SUITES
    assert sweep_main(["plan", str(pair_cosine_spec(tmp_path, tiny_bert, ["sts", "pair_cosine"]))]) == 2
    assert "evaluations[1]: expected a suite name in ['sts', 'senteval', 'nli', 'reranking', 'multilingual_sts']" in (
        capsys.readouterr().err)


def test_a_module_declaring_another_module_is_refused(monkeypatch):
    import dataclasses
    import sys

    monkeypatch.setattr(sys.modules[__name__], "SUITE", dataclasses.replace(SUITE, module="elsewhere"))
    with pytest.raises(ValueError, match="declare it with module=__name__"):
        SUITES.add(f"{__name__}:SUITE")
    assert "pair_cosine" not in SUITES


def test_the_registry_with_every_suite_imports_neither_torch_nor_scikit_learn_nor_scipy():
    """Validating a spec reads every registered suite's declaration: a suite module imports its heavy
    packages where it computes, not at its top."""
    import subprocess
    import sys

    probe = ("import sys, trainers.suites\n"
             "print(sorted(m for m in ('torch', 'transformers', 'ray', 'sklearn', 'scipy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"
