"""SG-BERT Table 11's spec: RoBERTa with each method; roberta-base is refused offline, a local RoBERTa plans."""

from __future__ import annotations

from pathlib import Path

import yaml

from reports.table_specs import load_table_specs
from sweep.commands.cli import main as sweep_main
from tests.conftest import row_configs
from trainers.data.backtranslate import write_file

SPEC = Path(__file__).resolve().parent.parent / "search_spaces" / "sg_roberta.yaml"


def test_roberta_base_and_the_bt_file_are_refused_offline(capsys):
    assert sweep_main(["plan", str(SPEC)]) == 2
    err = capsys.readouterr().err
    assert f"{SPEC}: every row: model: 'roberta-base' is not a local folder, not in the Hugging Face cache" in err
    assert f"{SPEC}: rows['Contrastive (BT)']: bt_file: bt_view 'bt1' needs a TSV" in err
    assert "Traceback" not in err


def test_every_row_is_a_method_on_roberta_base_at_its_settings():
    trials = row_configs(SPEC)
    assert {config["model"] for config in trials.values()} == {"roberta-base"}
    methods = {row: (config["method"], config["pooling"]) for row, config in trials.items()}
    assert methods == {"No tuning (CLS)": ("none", "cls"), "No tuning (Mean)": ("none", "mean"),
                       "No tuning (WK)": ("none", "wk"),
                       "Contrastive (BT)": ("sg", "cls"), "Contrastive (SG)": ("sg", "cls"),
                       "Contrastive (SG-OPT)": ("sg", "cls"), "SimCSE": ("simcse", "cls"),
                       "ConSERT": ("consert", "last2avg"), "SCT": ("sct", "mean")}
    assert (trials["Contrastive (SG)"]["loss"], trials["Contrastive (SG-OPT)"]["loss"]) == ("sg", "opt3")
    bt = trials["Contrastive (BT)"]
    assert (bt["loss"], bt["bt_view"], bt["bt_file"]) == ("bt", "bt1", "data/bt_stsb.tsv")
    assert {**bt, "loss": "sg", "bt_view": "none", "bt_file": ""} == trials["Contrastive (SG)"]  # Table 8's settings
    table = load_table_specs()["sg-bert-table11"]
    assert table.title.startswith("SG-BERT Table 11: ") and list(table.rows) == list(trials)


def test_with_a_local_roberta_and_a_bt_file_every_row_plans(tiny_roberta, tmp_path, capsys):
    rows = [("A man plays a guitar.", "A man is playing guitar.", "A guy plays the guitar.")] * 40
    spec = yaml.safe_load(SPEC.read_text())
    spec["base"]["model"] = tiny_roberta
    spec["base"]["wk_layer_start"] = 0  # the 2-layer model's three hidden states, all of which WK pooling needs
    for row in spec["rows"]:
        if "bt_file" in row["set"]:
            row["set"]["bt_file"] = str(write_file(rows, tmp_path / "bt.tsv"))
    path = tmp_path / "sg_roberta.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert sweep_main(["plan", str(path)]) == 0, capsys.readouterr().err
