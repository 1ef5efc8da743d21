"""SG-BERT Table 7's spec: its BT row is SimCSE with a back-translated positive, refused without the file."""

from __future__ import annotations

from pathlib import Path

from sweep.cli import main as sweep_main
from sweep.spec import load_spec

SPEC = Path(__file__).resolve().parent.parent / "search_spaces" / "sg_bt.yaml"


def test_the_bt_row_is_refused_without_its_file(capsys):
    assert sweep_main(["plan", str(SPEC)]) == 2
    err = capsys.readouterr().err
    assert f"{SPEC}: rows['Contrastive (BT)']: bt_file: positive 'bt1' needs a TSV" in err and "Traceback" not in err


def test_the_rows_are_simcse_with_bt_positives_and_sg_opt():
    trials = {t.point.row: t.config for t in load_spec(SPEC, check_environment=False).distinct_trials()}
    bt, sg = trials["Contrastive (BT)"], trials["Contrastive (SG-OPT)"]
    assert (bt["method"], bt["positive"], bt["bt_file"], bt["pooling"]) == ("simcse", "bt1", "data/bt_stsb.tsv", "cls")
    assert (bt["temperature"], bt["batch_size"], bt["learning_rate"]) == (sg["temperature"], sg["batch_size"],
                                                                          sg["learning_rate"])
    assert (sg["method"], sg["loss"]) == ("sg", "opt3")
