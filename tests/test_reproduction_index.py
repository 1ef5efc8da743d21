"""The reproduction index lists every table and figure of the three papers, is generated from the table specs,
and the committed docs page is what the generator writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from reports import tables
from reports.index import PAPER_INDEX, load_index, markdown
from reports.table_specs import load_table_specs

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT.parent / "shared" / "papers"
TEXTS = {"sg-bert": "sg-bert-second-extraction.txt", "consert": "consert.txt", "sct": "sct.txt"}
TABLES = load_table_specs()


def test_the_docs_page_is_what_the_generator_writes():
    assert (ROOT / "docs/reproduction.md").read_text(encoding="utf-8") == markdown(load_index(TABLES))


@pytest.mark.parametrize("paper", sorted(TEXTS))
def test_the_catalogue_holds_every_table_and_figure_the_paper_captions(paper):
    text = PAPERS / TEXTS[paper]
    if not text.is_file():
        pytest.skip(f"{text} is not on this machine")
    captioned = {f"{kind.lower()}{number}" for kind, number in
                 re.findall(r"^(Table|Figure) (\d+):", text.read_text(encoding="utf-8"), flags=re.M)}
    assert captioned and set(yaml.safe_load(PAPER_INDEX.read_text())[paper]) == captioned


def test_every_table_spec_fills_one_item_and_every_results_item_has_one():
    items = load_index(TABLES)
    filled = [table.name for item in items for table in item.tables]
    assert sorted(filled) == sorted(TABLES)  # each table spec once
    assert all(item.tables for item in items if item.kind == "results")
    kinds = {(item.paper, item.key): item.kind for item in items}
    assert kinds[("sg-bert", "table8")] == "hyperparameters" and kinds[("consert", "table1")] == "data"


def test_a_table_spec_that_fills_nothing_and_an_unfilled_item_are_refused(tmp_path):
    stray = dict(TABLES)
    stray["sg-bert-table12"] = TABLES["sg-bert-table1"]
    with pytest.raises(ValueError, match=r"table specs \['sg-bert-table12'\] fill no table or figure"):
        load_index(stray)
    without = {name: table for name, table in TABLES.items() if not name.startswith("sg-bert-table5")}
    with pytest.raises(ValueError, match="sg-bert.table5: a results item that no table spec fills"):
        load_index(without)


def test_the_listing_says_what_runs_on_this_machine(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SENTEVAL_DATA_DIR", raising=False)
    assert tables.main(["--index"]) == 0
    lines = {line.split(" | ")[2]: line for line in capsys.readouterr().out.splitlines() if line.count(" | ") > 4}
    assert lines["`sg-bert-table5`"].endswith("| yes |")
    assert re.search(r"\| no: sg_senteval.yaml: .*(hub|SENTEVAL_DATA_DIR).* \|$", lines["`sg-bert-table4`"])
    assert "Reference row 'SCT (default)' stands in for" in lines["`sct-table4`"]
