"""train_corpus as a grid axis: SG-BERT Figure 4's spec (SG-OPT on STS-B vs NLI sentences)."""

from __future__ import annotations

from pathlib import Path

from sweep.cli import main as sweep_main
from sweep.spec import load_spec

SPEC = Path(__file__).resolve().parent.parent / "search_spaces" / "sg_corpus.yaml"


def test_the_nli_points_are_refused_offline_naming_file_and_key(capsys, monkeypatch):
    monkeypatch.setattr("trainers.data.hub_reachable", lambda: False)
    assert sweep_main(["plan", str(SPEC)]) == 2
    err = capsys.readouterr().err
    assert f"{SPEC}: train_corpus: 'nli_sentences' needs the Hugging Face hub" in err
    assert "Traceback" not in err


def test_with_the_hub_each_corpus_is_a_grid_point_of_sg_opt(capsys, monkeypatch):
    monkeypatch.setattr("trainers.data.hub_reachable", lambda: True)
    assert sweep_main(["plan", str(SPEC)]) == 0
    trials = load_spec(SPEC, check_environment=False).distinct_trials()
    assert sorted(trial.config["train_corpus"] for trial in trials) == ["nli_sentences", "stsb_sentences"]
    assert {(trial.config["method"], trial.config["loss"]) for trial in trials} == {("sg", "opt3")}
