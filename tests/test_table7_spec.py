"""SG-BERT Table 7's spec: its BT row is Contrastive (SG) with the back-translation as the positive (`sg`, loss
'bt', Appendix A.2), its BT + SG-OPT row SG-OPT with the back-translation joined; both are refused without the
file, and plan with one (only the SG-OPT rows tabling BERT_F's views)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sweep.commands.cli import main as sweep_main
from tests.conftest import row_configs
from trainers.data.backtranslate import write_file

SPEC = Path(__file__).resolve().parent.parent / "search_spaces" / "sg_bt.yaml"


def without_bt(config: dict) -> dict:
    return {k: v for k, v in config.items() if not k.startswith("bt_")}


def test_the_bt_rows_are_refused_without_their_file(capsys):
    assert sweep_main(["plan", str(SPEC)]) == 2
    err = capsys.readouterr().err
    assert (f"{SPEC}: rows['Contrastive (BT)', 'Contrastive (BT + SG-OPT)']: bt_file: bt_view 'bt1' needs a TSV"
            in err and "Traceback" not in err)


def test_the_rows_are_contrastive_bt_sg_opt_and_both():
    trials = row_configs(SPEC)
    bt, sg, both = trials["Contrastive (BT)"], trials["Contrastive (SG-OPT)"], trials["Contrastive (BT + SG-OPT)"]
    assert (bt["method"], bt["loss"], bt["bt_view"], bt["bt_file"]) == ("sg", "bt", "bt1", "data/bt_stsb.tsv")
    # Contrastive (SG)'s settings (Table 8: tau, lambda, head f, betas, ...), the back-translation the positive.
    assert without_bt({**bt, "loss": "opt3"}) == without_bt(sg)
    assert (sg["method"], sg["loss"], sg["bt_view"]) == ("sg", "opt3", "none")
    assert (both["method"], both["loss"], both["bt_view"], both["bt_into"], both["bt_file"]) == (
        "sg", "opt3", "bt1", "fixed", "data/bt_stsb.tsv")
    assert without_bt(both) == without_bt(sg)  # SG-OPT's settings, the back-translation joined


def test_with_a_bt_file_every_row_plans(tmp_path, capsys):
    rows = [("A man plays a guitar.", "A man is playing guitar.", "A guy plays the guitar.")] * 40
    bt_file = write_file(rows, tmp_path / "bt.tsv")
    spec = yaml.safe_load(SPEC.read_text())
    for row in spec["rows"]:
        if "bt_file" in row["set"]:
            row["set"]["bt_file"] = str(bt_file)
    path = tmp_path / "sg_bt.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert sweep_main(["plan", str(path), "--set", "bert_f_dropout=false"]) == 0, capsys.readouterr().err
    tables = [line for line in capsys.readouterr().out.splitlines() if "BERT_F's views" in line]
    # BERT_F's views of the STS-B sentences (SG-OPT), and of the back-translations (BT + SG-OPT); none for BT.
    assert len(tables) == 2 and not any("'Contrastive (BT)'" in line for line in tables)
    assert any("'Contrastive (SG-OPT)'" in line for line in tables)
    assert any("'Contrastive (BT + SG-OPT)'" in line for line in tables)
