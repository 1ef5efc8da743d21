"""SCT at the paper's views and sizes: with a back-translation file, SCT Tables 2-4 plan every row (rows whose
views do not read it accept it), the reference row is the paper's SCT itself, and each Delta is against its
matching reference; --set model= takes that size's Table 1 settings or refuses naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.paper_tables import _add_delta
from reports.table_specs import load_table_specs
from results.table import DELTA, Cell, Line, Table
from sweep.commands.cli import main as sweep_main
from sweep.commands.plan import model_settings_lines
from sweep.spec.sweep_spec import SpecError, load_spec
from tests.conftest import write_spec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bt_file(tmp_path: Path) -> Path:
    path = tmp_path / "bt.tsv"
    path.write_text("sentence\tbt1\tbt2\n" + "".join(
        f"Sentence number {i}.\tThe sentence number {i}.\tSentence no. {i}.\n" for i in range(6)))
    return path


def paper_views(bt_file: Path) -> dict:
    return {"view1": "bt1", "view2": "bt2", "bt_file": str(bt_file)}


def test_table4_plans_every_row_at_the_papers_views(bt_file, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv = ["plan", str(ROOT / "search_spaces/sct_ablation.yaml"),
            *(arg for knob, value in paper_views(bt_file).items() for arg in ("--set", f"{knob}={value}"))]
    assert sweep_main(argv) == 0
    out = capsys.readouterr().out
    assert "11 rows x 3 seeds" in out and "33 trials in the grid, 33 trials to run" in out  # three seeds (Section 4.3)
    assert "against the reference row 'SCT (default)' (knob: reference -> row):" in out  # no longer standing in
    assert "Dropout mask                  view1: 'bt1' -> 'dropout_mask'; view2: 'bt2' -> 'dropout_mask'" in out
    assert "bt_file: rows 'Dropout mask': its sentences are their corpus; their views are their own" in out


def test_rows_whose_views_do_not_read_the_file_train_on_its_sentences(bt_file):
    from trainers.methods.sct import sct_examples

    spec = load_spec(ROOT / "search_spaces/sct_ablation.yaml", paper_views(bt_file), check_environment=False)
    dropout = spec.row_config("Dropout mask")
    assert dropout["bt_file"] == str(bt_file) and dropout["view1"] == "dropout_mask"
    assert sct_examples(dropout) == [f"Sentence number {i}." for i in range(6)]
    assert sct_examples(spec.row_config("SCT (default)"))[0] == ("Sentence number 0.", "The sentence number 0.",
                                                                 "Sentence no. 0.")


def test_same_bt_keeps_its_contract_against_the_papers_sct(bt_file):
    """With the paper's views, 'Back-translation (default)' is the reference itself and 'Same BT' differs in
    view2 alone: the --set knobs may bring the reference to a row's value without breaking its contract."""
    spec = load_spec(ROOT / "search_spaces/sct_augmentations.yaml", paper_views(bt_file), check_environment=False)
    assert spec.reference_differences == {"Back-translation (default)": {},
                                          "Same BT (T = T)": {"view2": ("bt2", "bt1")}}
    assert spec.reference.stands_in_for is None


def test_simcse_accepts_the_file_and_ignores_it_but_not_a_missing_one(bt_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load_spec(ROOT / "search_spaces/sct_main.yaml", paper_views(bt_file), check_environment=False)
    assert spec.row_config("SimCSE")["positive"] == "dropout"
    assert sweep_main(["plan", str(ROOT / "search_spaces/sct_main.yaml"), "--set", "bt_file=missing.tsv"]) == 2
    assert "--set bt_file=missing.tsv: 'missing.tsv' does not exist" in capsys.readouterr().err


def test_a_missing_file_no_view_reads_is_still_refused():
    with pytest.raises(SpecError, match="--set bt_file=nope.tsv: 'nope.tsv' does not exist"):
        load_spec(ROOT / "search_spaces/sct_ablation.yaml", {"bt_file": "nope.tsv"})


def test_each_delta_is_against_its_matching_reference():
    """SCT Table 4: 'Same BT (T = T)' against the two back-translations (the paper's -5.66), the others against
    'SCT (default)'."""
    spec = load_table_specs()["sct-table4"]
    assert spec.delta_from == {"Same BT (T = T)": "Back-translation (default)"}
    assert "Delta of 'Same BT (T = T)' is against 'Back-translation (default)'" in spec.caption
    means = {"SCT (default)": 60.0, "Back-translation (default)": 70.0, "Same BT (T = T)": 64.0, "No MLPs": 58.0}
    table = Table("t", "t", "row", ["Avg", DELTA], {}, [Line(label, {"Avg": Cell((value,))})
                                                       for label, value in means.items()])
    _add_delta(table, spec)
    deltas = {line.label: line.cells[DELTA].values[0] for line in table.lines}
    assert deltas == {"SCT (default)": 0.0, "Back-translation (default)": 10.0, "Same BT (T = T)": -6.0,
                      "No MLPs": -2.0}


TABLE1_KNOBS = ("learning_rate", "queue_size", "tau_ref", "tau_theta")


def tuned(config) -> tuple:
    return tuple(config[knob] for knob in TABLE1_KNOBS)


@pytest.mark.parametrize("model, expected, simcse", [
    ("google/bert_uncased_L-2_H-128_A-2", (5e-4, 131072, 0.03, 0.04), (3e-5, 64)),  # SCT Table 1, BERT-Tiny
    ("google/bert_uncased_L-4_H-256_A-4", (3e-4, 131072, 0.01, 0.03), (3e-5, 64)),  # BERT-Mini
    ("bert-base-uncased", (5e-4, 65536, 0.04, 0.05), (3e-5, 64)),  # BERT-Base
    ("bert-large-uncased", (5e-4, 16384, 0.04, 0.05), (1e-5, 64)),  # BERT-Large: SimCSE Table A.1's 1e-5
])
def test_another_model_size_takes_its_table1_settings(model, expected, simcse):
    """sct_main's SCT row keeps BERT-Small's values by default; --set model= takes that size's, and the SimCSE row
    SimCSE Table A.1's for that model where it has one (its BERT-base values elsewhere); so does the BERT-Tiny-based
    ablation."""
    main = load_spec(ROOT / "search_spaces/sct_main.yaml", {"model": model}, check_environment=False)
    assert tuned(main.row_config("SCT")) == expected
    assert (main.row_config("SimCSE")["learning_rate"], main.row_config("SimCSE")["batch_size"]) == simcse
    ablation = load_spec(ROOT / "search_spaces/sct_ablation.yaml", {"model": model}, check_environment=False)
    assert {tuned(ablation.row_config(row.name)) for row in ablation.rows} == {expected}


def test_what_set_a_row_or_an_axis_sets_stays_theirs():
    spec = load_spec(ROOT / "search_spaces/sct_ablation.yaml", {"model": "bert-base-uncased", "tau_ref": 0.1},
                     check_environment=False)
    assert tuned(spec.row_config("SCT (default)")) == (5e-4, 65536, 0.1, 0.05)
    grid = load_spec(ROOT / "search_spaces/sct_queue_size.yaml", {"model": "bert-base-uncased"},
                     check_environment=False)
    sizes = [128, 1024, 16384, 65536, 131072, 262144]
    assert sorted(trial.config["queue_size"] for trial in grid.trials) == sorted(sizes * 3)  # three seeds each
    assert {trial.config["learning_rate"] for trial in grid.trials} == {5e-4}


@pytest.mark.parametrize("model, expected", [
    (None, (5e-4, 131072, 0.03, 0.04)),  # offline: the README's BERT-Tiny row, Tables 6 and 7's first column
    ("google/bert_uncased_L-2_H-128_A-2", (5e-4, 131072, 0.03, 0.04)),  # the README's distillation BERT-Tiny
    ("google/bert_uncased_L-4_H-256_A-4", (1e-4, 65536, 0.04, 0.05)),  # BERT-Mini: not Table 1's 3e-4, 0.01, 0.03
    ("nreimers/BERT-Small-L-4_H-512_A-8", (1e-4, 131072, 0.04, 0.05)),  # BERT-Small, Running_distillation_script.sh
    ("bert-base-uncased", (1e-4, 65536, 0.04, 0.05)),  # BERT-Base: not Table 1's 5e-4
])
def test_a_distillation_row_takes_the_authors_distillation_settings_for_its_student(model, expected):
    """The paper gives no distillation settings; the authors' README tunes them per student, apart from Table 1."""
    overrides = {"model": model} if model else {}
    spec = load_spec(ROOT / "search_spaces/sct_distillation.yaml", overrides, check_environment=False)
    assert {tuned(spec.row_config(row.name)) for row in spec.rows} == {expected}


def test_a_student_without_distillation_settings_is_refused_naming_the_distillation_table(capsys, monkeypatch,
                                                                                         tmp_path):
    monkeypatch.chdir(tmp_path)
    path = str(ROOT / "search_spaces/sct_distillation.yaml")
    assert sweep_main(["plan", path, "--set", "model=bert-large-uncased"]) == 2  # Table 1 has it; the teacher's size
    err = capsys.readouterr().err
    assert ("'bert-large-uncased' has no tuned settings for sct here: --set learning_rate, queue_size, tau_ref, "
            "tau_theta too (the SCT authors' README tunes distillation per student: BERT-Tiny") in err
    assert "BERT-Large" not in err.split("README tunes distillation per student")[1]


def test_a_model_without_table1_settings_is_refused_naming_them(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["plan", str(ROOT / "search_spaces/sct_ablation.yaml"), "--set", "model=roberta-base"]) == 2
    err = capsys.readouterr().err
    assert ("--set model=roberta-base: 'roberta-base' has no tuned settings for sct here: --set learning_rate, "
            "queue_size, tau_ref, tau_theta too (SCT Table 1 tunes them per model: BERT-Tiny "
            "(google/bert_uncased_L-2_H-128_A-2): learning_rate 0.0005, queue_size 131072, tau_ref 0.03, tau_theta "
            "0.04; BERT-Mini") in err
    chosen = {"model": "roberta-base", "learning_rate": 1e-4, "queue_size": 4096, "tau_ref": 0.05, "tau_theta": 0.07}
    spec = load_spec(ROOT / "search_spaces/sct_ablation.yaml", chosen, check_environment=False)
    assert tuned(spec.row_config("SCT (default)")) == (1e-4, 4096, 0.05, 0.07)


def test_plan_says_which_rows_took_the_models_settings(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    sweep_main(["plan", str(ROOT / "search_spaces/sct_main.yaml"), "--set", "model=google/bert_uncased_L-4_H-256_A-4"])
    assert ("--set model: rows 'SCT' take sct's settings for google/bert_uncased_L-4_H-256_A-4: learning_rate "
            "0.0003, queue_size 131072, tau_ref 0.01, tau_theta 0.03") in capsys.readouterr().out


def test_simcse_rows_take_table_a1_for_their_model_where_nothing_sets_those_knobs(tmp_path):
    """SimCSE Table A.1 tunes the learning rate and batch per model: a grid point over the model (SCT Figure 2) and
    a spec whose base names the model (SG-BERT Table 11's SimCSE row, RoBERTa-base) take them; a model without a
    column keeps BERT-base's defaults; what --set, a row, an axis or (without --set model) the base sets stays."""
    grid = load_spec(ROOT / "search_spaces/sct_model_size.yaml", check_environment=False)
    by_model = {t.config["model"]: (t.config["learning_rate"], t.config["batch_size"]) for t in grid.trials}
    assert by_model == {"google/bert_uncased_L-2_H-128_A-2": (3e-5, 64), "google/bert_uncased_L-4_H-256_A-4": (3e-5,
                        64), "google/bert_uncased_L-4_H-512_A-8": (3e-5, 64), "bert-base-uncased": (3e-5, 64),
                        "bert-large-uncased": (1e-5, 64)}
    assert ["tuned per model: rows 'SimCSE' take simcse's settings for bert-large-uncased: learning_rate 1e-05, "
            "batch_size 64 (those --set, a row or an axis sets stay theirs)"] == [
        line for line in model_settings_lines(grid) if "bert-large" in line]
    chosen = load_spec(ROOT / "search_spaces/sct_model_size.yaml", {"learning_rate": 2e-5}, check_environment=False)
    assert {t.config["learning_rate"] for t in chosen.trials} == {2e-5}

    roberta = load_spec(ROOT / "search_spaces/sg_roberta.yaml", check_environment=False)
    simcse = roberta.row_config("SimCSE")
    assert (simcse["learning_rate"], simcse["batch_size"]) == (1e-5, 512)
    assert roberta.row_config("Contrastive (SG-OPT)")["learning_rate"] == 5e-5  # SG has no per-model table

    path = write_spec(tmp_path, {"name": "own", "method": "simcse", "rows": [{"name": "SimCSE", "set": {}}],
                                 "base": {"model": "bert-large-uncased", "learning_rate": 2e-5}})
    own = load_spec(path, check_environment=False).row_config("SimCSE")
    assert (own["learning_rate"], own["batch_size"]) == (2e-5, 64)  # the base's own, Table A.1's batch
    replaced = load_spec(path, {"model": "roberta-large"}, check_environment=False).row_config("SimCSE")
    assert (replaced["learning_rate"], replaced["batch_size"]) == (3e-5, 512)  # --set model: the base's was for another
