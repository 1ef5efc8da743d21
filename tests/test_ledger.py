"""The settings ledger (sweep/spec/paper_ledger.yaml): every row of every spec that fills a paper's table resolves to
the paper's settings or to a declared deviation; an undeclared difference fails naming the table, the row, the
knob, both values and the source; captions and plans print the declared deviations."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from reports.table_specs import load_table_specs
from sweep.commands.cli import main as sweep_main
from sweep.spec.ledger import KINDS, LEDGER, ledger_mismatches, ledger_problems, load_ledger
from sweep.spec.sweep_spec import SpecError, load_spec
from trainers.registry import METHODS, get_method

ROOT = Path(__file__).resolve().parents[1]
LEDGER_RECORDS = load_ledger()


def tables_by_spec(project: Path = ROOT) -> dict[str, list[str]]:
    """Each spec file that fills a table -> the tables it fills, read from table_specs.yaml itself (not through
    reports.table_specs, whose loading checks the row contracts: the ledger is checked on its own)."""
    raw = yaml.safe_load((project / "reports/table_specs.yaml").read_text())
    found: dict[str, list[str]] = {}
    for table, entry in raw.items():
        others = [row["spec"] for row in entry.get("rows") or [] if isinstance(row, dict) and "spec" in row]
        paths = [entry["spec"], *others]
        for path in dict.fromkeys(paths):
            found.setdefault(path, []).append(table)
    return found


TABLE_SPECS = tables_by_spec()


def ledger_check(path: Path, tables: list[str]) -> list[str]:
    spec = load_spec(path, check_environment=False, check_contracts=False)
    return ledger_problems(spec, LEDGER_RECORDS.get(path.name), tables)


@pytest.mark.parametrize("spec_path", sorted(TABLE_SPECS))
def test_every_row_of_every_table_resolves_to_the_paper_or_a_declared_deviation(spec_path):
    problems = ledger_check(ROOT / spec_path, TABLE_SPECS[spec_path])
    assert not problems, "\n".join(problems)


def test_every_spec_of_a_table_has_a_record_and_every_record_a_spec_of_a_table():
    assert sorted(LEDGER_RECORDS) == sorted(Path(path).name for path in TABLE_SPECS)


def test_every_setting_cites_a_source_and_every_deviation_a_kind_and_a_reason():
    for record in LEDGER_RECORDS.values():
        for row, settings in record.settings.items():
            assert settings or row in record.not_in_paper, f"{record.spec}: row {row!r} has no setting at all"
            assert all(setting.source.strip() for setting in settings.values())
        assert all(d.kind in KINDS and d.reason.strip() for d in record.deviations)


def test_every_knob_the_every_spec_section_names_is_a_knob_of_some_method():
    """every_spec's settings are compared only where a row's method has the knob, and its not_settings excuse a
    knob by name: a misspelt one would hold for no row, silently, so each must be some method's knob."""
    every = next(iter(LEDGER_RECORDS.values()))
    knobs = {knob.name for name in METHODS for knob in get_method(name).all_knobs}
    assert every.shared and every.not_settings
    assert set(every.shared) | set(every.not_settings) <= knobs


def project_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    return tmp_path


def test_a_baseline_whose_corpus_changes_without_a_declaration_fails_naming_everything(tmp_path):
    """DCLR's corpus is declared (forced) as the table's STS texts; moved to STS-B's sentences, nothing declares
    it: the message names the table, the row, the knob, both values and the source."""
    path = project_copy(tmp_path) / "search_spaces/sct_baselines.yaml"
    path.write_text(path.read_text().replace("train_corpus: sts_all_sentences", "train_corpus: stsb_sentences"))
    problems = ledger_check(path, TABLE_SPECS["search_spaces/sct_baselines.yaml"])
    assert problems, "the changed corpus went unnoticed"
    assert problems[0] == (
        "table 'sct-table2': sct_baselines.yaml, row 'DCLR', knob train_corpus: ours 'stsb_sentences', the paper's "
        "'wiki1m' (DCLR Section 4.1: SimCSE's 10^6 Wikipedia sentences): undeclared (the ledger declares ours "
        "'sts_all_sentences'); declare it in sweep/spec/paper_ledger.yaml (forced | budget | open, with its reason) "
        "or set the paper's value")


def test_a_knob_set_beside_the_rows_own_fails(tmp_path):
    """weight_decay, which no spec names, set in SCT Table 4's spec: the ledger (SCT_main.py's 0.01) sees it."""
    path = project_copy(tmp_path) / "search_spaces/sct_ablation.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["base"]["weight_decay"] = 0.5
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    problems = ledger_check(path, ["sct-table4"])
    assert any("row 'SCT (default)', knob weight_decay: ours 0.5, the paper's 0.01" in p for p in problems)


def test_the_every_spec_section_is_every_rows_and_declares_auto_evaluation_once():
    """eval_precision: the authors encode in fp32, ours in 'auto'; the ledger says both once (every_spec), and every
    row of every record has them, a row that names its own method too (SimCSE in SG-BERT Table 11). A spec run at
    fp32 needs no declaration, and the unneeded one is no problem; one at bf16 is undeclared."""
    path = ROOT / "search_spaces/sg_roberta.yaml"
    record = LEDGER_RECORDS[path.name]
    assert {row: settings["eval_precision"].value for row, settings in record.settings.items()} == \
        dict.fromkeys(record.settings, "fp32")
    spec = load_spec(path, check_environment=False)
    found, problems = ledger_mismatches(spec, record)
    precision = [mismatch for mismatch in found if mismatch.knob == "eval_precision"]
    assert not problems and {m.row for m in precision} == {row.name for row in spec.rows}
    assert all(m.ours == "auto" and m.deviation is not None and m.deviation.everywhere for m in precision)
    assert ledger_problems(load_spec(path, {"eval_precision": "fp32"}, check_environment=False), record) == []
    undeclared = ledger_problems(load_spec(path, {"eval_precision": "bf16"}, check_environment=False), record)
    assert any("row 'SimCSE', knob eval_precision: ours 'bf16', the paper's 'fp32'" in line for line in undeclared)


def write_ledger(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load(LEDGER.read_text())
    edit(raw)
    path = tmp_path / "ledger.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_declaration_no_row_needs_is_a_problem(tmp_path):
    path = write_ledger(tmp_path, lambda raw: raw["specs"]["sg_main.yaml"]["deviations"].append(
        {"knob": "epochs", "ours": 3, "kind": "budget", "reason": "stale"}))
    spec = load_spec(ROOT / "search_spaces/sg_main.yaml", check_environment=False)
    problems = ledger_problems(spec, load_ledger(path)["sg_main.yaml"])
    assert problems == ["sg_main.yaml: a deviation in epochs is declared (budget) but no row differs there"]


def test_a_knob_no_setting_names_is_a_problem_until_the_ledger_traces_or_excuses_it(tmp_path):
    """Every knob that can change a row's numbers is in its settings: SG's projection width left out of sg_main's
    record is a problem for each trained row (naming the row, the knob and our value) and for no untuned one; listed
    under every_spec.not_settings, it is excused. Bookkeeping knobs (checkpoint_every) never need a setting."""
    def drop_width(raw):
        raw["specs"]["sg_main.yaml"]["settings"].pop("projection_hidden")
    spec = load_spec(ROOT / "search_spaces/sg_main.yaml", check_environment=False)
    problems = ledger_problems(spec, load_ledger(write_ledger(tmp_path, drop_width))["sg_main.yaml"])
    untraced = [p for p in problems if "is in none of the row's settings" in p]
    assert untraced == problems and [p.split(":")[1] for p in untraced] == [" row 'SG'", " row 'SG-OPT'"]
    assert "knob 'projection_hidden' (ours 4096) is in none of the row's settings in sweep/spec/paper_ledger.yaml" \
        in untraced[0]
    def excuse(raw):
        drop_width(raw)
        raw["every_spec"]["not_settings"]["projection_hidden"] = "a test's excuse"
    assert ledger_problems(spec, load_ledger(write_ledger(tmp_path, excuse))["sg_main.yaml"]) == []
    assert "checkpoint_every" in spec.method_of("SG-OPT").all_knobs.bookkeeping


@pytest.mark.parametrize("edit, expected", [
    (lambda raw: raw["every_spec"].update(not_settings=["device"]),
     r"every_spec.not_settings: expected a mapping of knob -> why it is no paper's setting, got \['device'\]"),
    (lambda raw: raw["specs"]["sg_main.yaml"]["deviations"][0].update(kind="convenient"),
     r"sg_main.yaml.deviations\[0\]: expected \{knob, ours, kind: forced\|budget\|open, reason, rows\?\}"),
    (lambda raw: raw["specs"]["sg_main.yaml"]["settings"].update(epochs=1),
     r"sg_main.yaml.settings.epochs: expected \[value, source\], got 1"),
])
def test_a_bad_ledger_is_refused_naming_the_file_and_the_key(tmp_path, edit, expected):
    with pytest.raises(SpecError, match=expected):
        load_ledger(write_ledger(tmp_path, edit))


def test_a_ledger_row_that_is_no_row_of_the_spec_is_a_problem(tmp_path):
    path = write_ledger(tmp_path, lambda raw: raw["specs"]["sg_main.yaml"]["rows"].update({"SG-OTP": {}}))
    spec = load_spec(ROOT / "search_spaces/sg_main.yaml", check_environment=False)
    assert "sg_main.yaml: the ledger's row 'SG-OTP' is no row of the spec" in \
        ledger_problems(spec, load_ledger(path)["sg_main.yaml"])


@pytest.fixture(scope="module")
def tables():
    """The table specs, loaded here and not at import: the ledger's own tests run where a contract breaks."""
    return load_table_specs()


@pytest.mark.parametrize("name", sorted(yaml.safe_load((ROOT / "reports/table_specs.yaml").read_text())))
def test_each_caption_names_every_declared_deviation_of_its_rows(name, tables):
    """Each declared mismatch of a line the table shows: its knob, our value, the paper's, its kind and reason."""
    table = tables[name]
    caption = table.caption
    for path, sweep in table.search_spaces().items():
        found, _ = ledger_mismatches(sweep, LEDGER_RECORDS[sweep.path.name])
        shown = [line for line in table.rows if table.sweep_of(line)[0] == path] if table.kind == "rows" else None
        for mismatch in found:
            if shown is not None and mismatch.row not in shown:
                continue
            deviation = mismatch.deviation
            assert deviation is not None
            phrase = (f"ours {mismatch.ours!r}", f"paper {mismatch.paper.value!r}",
                      f"({deviation.kind}: {deviation.reason})")
            assert f"{mismatch.knob}" in caption and all(part in caption for part in phrase), (name, mismatch)


def test_sct_table2s_caption_says_what_its_rows_train_on(tables):
    caption = tables["sct-table2"].caption
    for words in ("train_corpus ['SCT']: ours 'sts_all_sentences', paper 'nli_sentences'",
                  "view1 ['SCT']: ours 'shuffle', paper 'bt1'",
                  "ours 'sts_all_sentences', paper 'wiki1m' (forced: Wikipedia-1M is not shipped: trained on the "
                  "table's corpus (SCT's) with its own paper's hyperparameters)",
                  "epochs 1 (SimCSE), 3 (DCLR), 2 (DiffCSE), 10 (SCT)"):
        assert words in caption


def test_plan_prints_the_ledgers_deviations_and_what_a_set_adds(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["plan", str(ROOT / "search_spaces/sct_main.yaml"), "--set", "max_grad_norm=2.0"]) == 0
    out = capsys.readouterr().out
    assert "against the paper (sweep/spec/paper_ledger.yaml; knob: ours, the paper's (kind: reason)):" in out
    assert "  model: ours 'bundled:all-MiniLM-L6-v2', paper 'nreimers/BERT-Small-L-4_H-512_A-8' (forced:" in out
    assert ("  --set: sct_main.yaml, row 'SCT', knob max_grad_norm: ours 2.0, the paper's 1.0 "
            "(SCT_main.py: SentenceTransformer.fit's max_grad_norm 1 (the paper is silent))") in out


@pytest.mark.parametrize("model, hint", [
    ("bert-large-uncased",
     "; the paper's rows on 'bert-large-uncased': consert_large.yaml, consert_supervised_large.yaml"),
    ("roberta-base", ""),  # no ConSERT spec records rows on it
])
def test_a_row_set_to_another_model_names_the_specs_of_the_papers_rows_on_it(model, hint, capsys):
    """`--set model=bert-large-uncased` on a BERT-base spec trains the base rows' settings on BERT-large: plan and
    settings name the specs that hold the paper's BERT-large rows."""
    from sweep.commands.plan import ledger_lines

    spec = load_spec(ROOT / "search_spaces/consert_main.yaml", {"model": model}, check_environment=False)
    (line,) = [line for line in ledger_lines(spec) if "row 'ConSERT-base', knob model" in line]
    assert line.startswith("  --set: consert_main.yaml") and line.endswith(f"(ConSERT Section 4.1: BERT-base){hint}")
    assert sweep_main(["settings", str(ROOT / "search_spaces/consert_main.yaml"), "--row", "ConSERT-base",
                       "--set", f"model={model}"]) == 0
    out = capsys.readouterr().out
    assert f"  ! model: '{model}', the paper's 'bert-base-uncased' (ConSERT Section 4.1: BERT-base): undeclared" \
        f"{hint}\n" in out


def test_the_rendered_table_of_the_report_carries_the_ledgers_deviations(tables):
    """reports.tables and reports.paper render a table under its caption: SCT Table 2's, with no results yet,
    names SimCSE's corpus and SCT's views as the ledger declares them, in Markdown and LaTeX."""
    import warnings

    import pandas as pd

    from reports.paper_tables import MissingResults, build_tables
    from reports.table_specs import PAPER_NUMBERS, load_yaml
    from results.render import to_latex, to_markdown

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        table = build_tables(pd.DataFrame(), ["sct-table2"], tables, load_yaml(PAPER_NUMBERS))[0]
    markdown = to_markdown(table)
    assert "Deviations from the paper (sweep/spec/paper_ledger.yaml)" in markdown
    assert "train_corpus ['SimCSE', 'DCLR', 'DiffCSE']: ours 'sts_all_sentences', paper 'wiki1m'" in markdown
    assert "Deviations from the paper" in to_latex(table)
