"""DCLR's settings per model (RUCAIBox/DCLR run.sh): a DCLR row on BERT-large or RoBERTa trains at the authors'
settings for that model, as SimCSE's rows take Table A.1's, unless --set, the row or an axis sets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweep.commands.cli import main as sweep_main
from sweep.commands.plan import model_settings_lines
from sweep.spec.sweep_spec import load_spec
from trainers.methods.dclr import RUN_SH_KNOBS

SPECS = Path(__file__).resolve().parent.parent / "search_spaces"
BERT_BASE = (3e-5, 128, 3, 0.9, 1.0, True, "princeton-nlp/unsup-simcse-bert-base-uncased")
"""run.sh's BERT-base line, written out here: DCLR's defaults."""


def run_sh(config) -> tuple:
    return tuple(config[knob] for knob in RUN_SH_KNOBS)


def test_the_figure_2_grid_trains_its_bert_large_point_at_run_sh_s_bert_large_settings():
    grid = load_spec(SPECS / "sct_model_size_dclr.yaml", check_environment=False)
    by_model = {trial.config["model"]: run_sh(trial.config) for trial in grid.trials}
    assert by_model.pop("bert-large-uncased") == (3e-5, 256, 1, 0.9, 3.0, False,
                                                  "princeton-nlp/unsup-simcse-bert-base-uncased")
    assert set(by_model.values()) == {BERT_BASE}  # BERT-base's line, and the smaller BERTs, which run.sh lacks
    assert [line for line in model_settings_lines(grid) if "bert-large" in line] == [
        "tuned per model: rows 'DCLR' take dclr's settings for bert-large-uncased: learning_rate 3e-05, batch_size "
        "256, epochs 1, phi 0.9, noise_times 3, mlp_during_training False, complementary_model "
        "'princeton-nlp/unsup-simcse-bert-base-uncased' (those --set, a row or an axis sets stay theirs)"]


@pytest.mark.parametrize("model, expected", [
    ("bert-large-uncased", (3e-5, 256, 1, 0.9, 3.0, False, "princeton-nlp/unsup-simcse-bert-base-uncased")),
    ("bert-base-uncased", BERT_BASE),
])
def test_set_model_gives_sct_table_2s_dclr_row_run_sh_s_line_for_that_model(model, expected):
    """SCT Table 2's DCLR row on another model (before, every size trained at BERT-base's script); DiffCSE, which
    has no table per model, keeps its own."""
    spec = load_spec(SPECS / "sct_baselines.yaml", {"model": model}, check_environment=False)
    assert run_sh(spec.row_config("DCLR")) == expected
    assert spec.row_config("DiffCSE")["batch_size"] == 64


@pytest.mark.parametrize("model, expected", [
    ("roberta-base", (3e-5, 128, 3, 0.85, 2.5, True, "princeton-nlp/unsup-simcse-roberta-base")),
    ("FacebookAI/roberta-large", (1e-5, 256, 1, 0.85, 5.0, False, "princeton-nlp/unsup-simcse-roberta-base")),
    # run.sh starts the large models from SimCSE's checkpoint of their size: on it, the same line
    ("princeton-nlp/unsup-simcse-roberta-large", (1e-5, 256, 1, 0.85, 5.0, False,
                                                  "princeton-nlp/unsup-simcse-roberta-base")),
    ("princeton-nlp/unsup-simcse-bert-large-uncased", (3e-5, 256, 1, 0.9, 3.0, False,
                                                       "princeton-nlp/unsup-simcse-bert-base-uncased")),
])
def test_every_row_of_a_dclr_spec_takes_run_sh_s_line_for_its_model(model, expected):
    spec = load_spec(SPECS / "dclr_variants.yaml", {"model": model}, check_environment=False)
    assert {run_sh(spec.row_config(row.name)) for row in spec.rows} == {expected}


def test_what_set_or_a_row_sets_stays_its_own():
    spec = load_spec(SPECS / "dclr_variants.yaml", {"model": "bert-large-uncased", "noise_times": 1.5},
                     check_environment=False)
    config = spec.row_config("DCLR (authors' code)")
    assert (config["noise_times"], config["batch_size"], config["mlp_during_training"]) == (1.5, 256, False)


def test_plan_shows_the_batch_it_follows_only_where_it_differs_from_the_reference(capsys, monkeypatch, tmp_path):
    """On BERT-Small DCLR's batch is SCT's 128; on BERT-large run.sh's 256 (the plans are refused offline for the
    hub models, after the lines)."""
    monkeypatch.chdir(tmp_path)
    path = str(SPECS / "sct_baselines.yaml")
    assert sweep_main(["plan", path]) == 2
    out = capsys.readouterr().out
    assert "follows dclr: epochs: 10 -> 3" in out and "follows dclr: batch_size" not in out
    assert sweep_main(["plan", path, "--set", "model=bert-large-uncased"]) == 2
    out, err = capsys.readouterr()
    assert "follows dclr: batch_size: 128 -> 256" in out and "Traceback" not in err
