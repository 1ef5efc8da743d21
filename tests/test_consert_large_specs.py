"""ConSERT Tables 2 and 3's BERT-large rows (consert_large.yaml, consert_supervised_large.yaml): each is its
BERT-base row on bert-large-uncased, differing in nothing but what the authors' large scripts change and the
ledger records; refused offline, and planned with a local model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pytest
import yaml

import trainers.data.nli_examples as nli
from reports.table_specs import load_table_specs
from sweep.commands.cli import main as sweep_main
from tests.conftest import differing_knobs, row_configs

SPECS = Path(__file__).resolve().parent.parent / "search_spaces"
LARGE = "bert-large-uncased"
TABLE2_LARGE = {"epochs": 25, "aug1": "none", "aug2": "shuffle"}  # scripts/unsup-consert-large.sh
TRANSFER_EPOCHS = {"epochs": 10}  # scripts/sup-consert-sup-unsup-large.sh, sup-consert-joint-unsup-large.sh


def rows(spec_file: str) -> dict[str, Mapping[str, Any]]:
    return row_configs(SPECS / spec_file)


@pytest.mark.parametrize("large_file, base_file, changed", [
    ("consert_large.yaml", "consert_main.yaml",
     {"BERT-large": {}, "ConSERT-large": TABLE2_LARGE, **{f"BERT-large-flow, {s} target": {}
                                                        for s in ("STS-B", "SICK-R", "STS12", "STS16")}}),
    ("consert_supervised_large.yaml", "consert_supervised.yaml",
     {"SBERT-large-NLI (re-impl.)": {}, "ConSERT-large joint": {}, "ConSERT-large sup-unsup": TRANSFER_EPOCHS,
      "ConSERT-large joint-unsup": TRANSFER_EPOCHS, "BERT-large-flow, STS13 target": {}}),
])
def test_each_large_row_is_its_base_row_on_bert_large_but_for_the_large_scripts_settings(large_file, base_file,
                                                                                         changed):
    large, base = rows(large_file), rows(base_file)
    assert {config["model"] for config in large.values()} == {LARGE}
    for row, expected in changed.items():
        base_row = row.replace("large", "base")
        assert differing_knobs(large[row], base[base_row]) == {"model": LARGE, **expected}, row
    assert len(large) == len({row.replace("large", "base") for row in large} & set(base))  # every row has its base


def test_consert_large_keeps_the_papers_dropout_evaluations_and_token_limit_over_the_scripts():
    """Section 4.1 states them for both sizes; the large scripts differ (docs/methods.md)."""
    table2, table3 = rows("consert_large.yaml"), rows("consert_supervised_large.yaml")
    consert_large = table2["ConSERT-large"]
    assert (consert_large["remove_bert_dropout"], consert_large["eval_every"]) == (True, 200)
    assert {config["max_seq_length"] for row, config in table3.items() if row.startswith("ConSERT")} == {64}


def test_the_large_specs_are_refused_offline_naming_the_model_and_the_nli(capsys):
    assert sweep_main(["plan", str(SPECS / "consert_large.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"every row: model: '{LARGE}' is not a local folder, not in the Hugging Face cache" in err
    assert "Traceback" not in err
    assert sweep_main(["plan", str(SPECS / "consert_supervised_large.yaml")]) == 2
    assert "needs labelled NLI" in capsys.readouterr().err


@pytest.mark.parametrize("spec_file", ["consert_large.yaml", "consert_supervised_large.yaml"])
def test_with_a_local_model_every_row_plans(spec_file, tiny_bert, use_tiny_sts, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(nli, "hub_reachable", lambda: True)  # the NLI rows are checked, not read
    spec = yaml.safe_load((SPECS / spec_file).read_text())
    spec["base"]["model"] = tiny_bert
    path = tmp_path / spec_file
    path.write_text(yaml.safe_dump(spec))
    assert sweep_main(["plan", str(path)]) == 0, capsys.readouterr().err


def test_the_tables_hold_the_papers_bert_large_rows():
    tables = load_table_specs()
    assert list(tables["consert-table2-large"].rows) == ["BERT-large", "BERT-large-flow", "ConSERT-large"]
    assert list(tables["consert-table3-large"].rows) == ["SBERT-large-NLI (re-impl.)", "ConSERT-large joint",
                                                         "ConSERT-large sup-unsup", "ConSERT-large joint-unsup",
                                                         "BERT-large-flow"]
    assert {tables[name].paper.model for name in ("consert-table2-large", "consert-table3-large")} == {"bert-large"}
