"""train_corpus as a grid axis: SG-BERT Figure 4's specs (SG-OPT and Flow on STS-B vs NLI sentences)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep.commands.cli import main as sweep_main
from sweep.spec.sweep_spec import load_spec

SPACES = Path(__file__).resolve().parent.parent / "search_spaces"
FIGURE_4 = {"sg_corpus.yaml": ("sg", "opt3"), "sg_corpus_flow.yaml": ("flow", None)}


@pytest.mark.parametrize("name", sorted(FIGURE_4))
def test_the_nli_points_are_refused_offline_naming_file_and_key(name, capsys, monkeypatch):
    monkeypatch.setattr("trainers.data.sources.hub_reachable", lambda: False)
    assert sweep_main(["plan", str(SPACES / name)]) == 2
    err = capsys.readouterr().err
    assert f"{SPACES / name}: train_corpus: 'nli_sentences' needs the Hugging Face hub" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", sorted(FIGURE_4))
def test_with_the_hub_each_corpus_is_a_grid_point_of_the_figures_method(name, capsys, monkeypatch):
    monkeypatch.setattr("trainers.data.sources.hub_reachable", lambda: True)
    assert sweep_main(["plan", str(SPACES / name)]) == 0
    trials = load_spec(SPACES / name, check_environment=False).distinct_trials()
    assert sorted(trial.config["train_corpus"] for trial in trials) == ["nli_sentences", "stsb_sentences"]
    assert {(trial.config["method"], trial.config.get("loss")) for trial in trials} == {FIGURE_4[name]}
