"""The real table specs against the papers' numbers and the search spaces; formatting; LaTeX."""

from __future__ import annotations

import math
import shutil
import subprocess
import warnings

import pandas as pd
import pytest

from reports.paper_tables import MissingResults, build_tables, paper_rows
from reports.table_specs import PAPER_NUMBERS, TableSpecError, load_table_specs, load_yaml, parse_table_spec
from results.render import cell_text, latex_escape, paper_text, to_latex, to_markdown
from results.table import COLUMNS, DELTA, Cell, Column

SPECS = load_table_specs()
NUMBERS = load_yaml(PAPER_NUMBERS)


def test_every_table_of_the_issue_has_a_spec():
    assert set(SPECS) >= {
        "sg-bert-figure1", "sg-bert-figure4", "sg-bert-table1", "sg-bert-table7", "sg-bert-table5", "sg-bert-table6",
        "consert-table2", "consert-table3", "consert-table4", "consert-figure4", "consert-figure5", "consert-figure6",
        "consert-figure6-supervised", "consert-figure7",
        "sct-table2", "sct-table4", "sct-figure4", "sct-table6", "sct-table7", "sg-bert-table2", "sg-bert-table3",
        "sct-table2-distillation", "sct-figure2", "sct-figure2-offline",
    }


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_paper_figure_a_spec_looks_up_exists(name):
    """A typo in a row or column name would silently drop the paper's figure: none may."""
    spec = SPECS[name]
    if spec.paper is None:
        assert "the paper gives no figures" in spec.title, f"{name}: no paper numbers, and its title does not say why"
        pytest.skip(f"{name}: the paper gives no figures for this table, so there is nothing to look up")
    rows = paper_rows(NUMBERS, spec.paper, spec.paper.model)
    assert rows, f"{name}: no rows of {spec.paper.model} in {spec.paper.paper} {spec.paper.table}"
    paper_columns = set(NUMBERS[spec.paper.paper][spec.paper.table]["columns"])
    for key, paper_row in spec.paper.rows.items():
        # A grid may stop short of the paper's point (layers 0-6 of the bundled model); a row may not.
        assert spec.kind == "grid" or key in spec.line_keys(), f"{name}: {key!r} is not a line of the table"
        assert paper_row is None or paper_row in rows, f"{name}: no paper row {paper_row!r}"
    if spec.kind == "rows":
        for row in spec.rows:  # every named row maps to a paper row, or says explicitly that there is none
            assert spec.paper.rows.get(row, row) in set(rows) | {None}, f"{name}: row {row!r} has no paper row"
    for key, paper_column in spec.paper.columns.items():
        assert paper_column in paper_columns, f"{name}: {key!r} -> {paper_column!r}"
    shown = set(spec.paper.columns.values()) if spec.across else set(spec.columns)
    assert shown & paper_columns, f"{name}: no column in common with the paper's"


def test_the_papers_figures_land_in_the_right_cells():
    """Spot checks against paper_numbers.yaml, through the spec mappings (no results at all)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        built = {t.name: t for t in build_tables(pd.DataFrame(), None, SPECS, NUMBERS)}

    def paper(table: str, line: str) -> dict[str, float]:
        return next(x.paper for x in built[table].lines if x.label == line)

    assert paper("sg-bert-table1", "SG-OPT")["Avg"] == 74.62
    assert paper("sg-bert-table5", "without projection head") == {"Avg": 72.78, DELTA: -1.84}
    assert paper("sg-bert-table6", "SG-OPT") == {"Training": 455.02, "Inference": 10.51}
    assert paper("sg-bert-figure1-bert-base", "10") == {"cls": 16.71}
    assert paper("sg-bert-figure1", "2") == {"max": 63.19}
    assert paper("consert-table4", "192") == {"Avg": 72.86, "Steps": 930}
    assert paper("consert-figure5", "none") == {"none": 63.84}
    assert paper("consert-figure4", "0") == {"Avg": 53.86} and paper("consert-figure4", "34") == {"Avg": 61.66}
    assert paper("consert-figure4", "10") == {}  # only in the figure
    assert paper("sg-bert-figure4", "nli_sentences") == {DELTA: -1.63}
    assert paper("sg-bert-table7", "Contrastive (BT)")["Avg"] == 62.63
    assert paper("sg-bert-table2", "Contrastive (BT)") == {"STS14 es": 78.04}  # MBERT
    assert paper("sg-bert-table3", "Contrastive (BT)")["STS17 en-en"] == 73.89
    assert paper("consert-table3", "ConSERT-base joint")["Avg"] == 77.12
    assert paper("consert-table3", "SBERT-base-NLI (re-impl.)")["STS-B"] == 76.75
    assert paper("consert-table3", "ConSERT-base joint-unsup")["SICK-R"] == 76.77
    assert paper("consert-table3", "ConSERT-base joint, FGV adversarial view") == {}  # ours only
    assert paper("sct-table2", "SCT")["Avg"] == 72.56  # BERT-Small
    assert paper("sct-table2", "SimCSE")["Avg"] == 69.13
    assert paper("sct-table2-distillation", "L_CKD")["STS-B"] == 75.89  # BERT-Tiny, the paper's "CKD"
    assert paper("sct-table2-distillation", "L_ConGen")["Avg"] == 75.89  # the paper's "ConGen"
    assert paper("sct-table2-distillation", "SCT-distillation")["SICK-R"] == 68.92
    assert paper("sct-table4", "No queue update") == {DELTA: -3.85}  # BERT-Tiny
    assert paper("sct-table6", "KL -> CE") == {DELTA: -3.43}
    assert paper("sg-bert-table2", "Contrastive (SG-OPT)") == {"STS14 es": 82.74}  # MBERT, Pearson
    assert paper("sg-bert-table3", "Mean pooling") == {"STS17 ar-ar": 51.09, "STS17 es-es": 54.56, "STS17 en-en": 54.86}
    assert paper("sct-table2", "No tuning (Mean)") == {}
    assert all(cell.n == 0 for t in built.values() for line in t.lines for cell in line.cells.values())
    assert paper("sct-table7", "SCT-distillation") == {"Avg": 76.43}  # the paper's "L_CD + L_SCT"
    assert built["sct-table7"].missing == ["no finished trial of sweep 'sct_distillation' "
                                           "(python -m sweep run search_spaces/sct_distillation.yaml)"]


def test_the_papers_model_follows_ours_when_the_paper_has_it():
    """Trials of bert-large-uncased are compared with the paper's BERT-large rows."""
    spec = SPECS["sg-bert-table1"]
    frame = pd.DataFrame({
        "experiment": "sg_main", "status": "FINISHED", "row": "SG", "seed": [1, 2], "model": "bert-large-uncased",
        "budget": "none", "run_id": ["a", "b"], "start_time": pd.Timestamp(0, tz="UTC"),
        "test_avg_spearman": [70.0, 72.0], "trial_id": ["t1", "t2"],
    })
    with pytest.warns(MissingResults, match=r"row 'SG': 6 of 8 seeds missing: \[3, 4, 1234, 2345, 3456, 7890\]"):
        table = build_tables(frame, ["sg-bert-table1"], {"sg-bert-table1": spec}, NUMBERS)[0]
    line = next(x for x in table.lines if x.label == "SG")
    assert table.paper_model == "bert-large" and line.paper["Avg"] == 72.81
    assert line.cells["Avg"].values == (70.0, 72.0)
    assert table.notes[0] == "ours: bert-large-uncased; budget none; paper: sg-bert table1, bert-large"


def test_the_latest_run_of_a_trial_counts_and_a_mix_of_budgets_is_flagged():
    spec = SPECS["consert-table2"]
    flows = list(dict.fromkeys(spec.parts["BERT-base-flow"].values()))
    frame = pd.DataFrame({
        "experiment": "consert_main", "status": ["FINISHED", "FINISHED", "FAILED", "FINISHED"] + ["FINISHED"] * 7,
        "row": ["ConSERT-base"] * 3 + ["BERT-base"] + flows, "seed": 42, "model": "m",
        "budget": ["smoke", "none", "none"] + ["smoke"] * 8, "run_id": list("abcdefghijk"),
        "start_time": pd.to_datetime(range(1, 12), unit="s", utc=True),
        "test_avg_spearman": [10.0, 20.0, 99.0, 5.0] + [7.0] * 7, "trial_id": [f"t{n}" for n in range(11)],
    })
    table = build_tables(frame, ["consert-table2"], {"consert-table2": spec}, NUMBERS)[0]
    line = next(x for x in table.lines if x.label == "ConSERT-base")
    assert line.cells["Avg"].values == (20.0,)  # the later FINISHED run, never the FAILED one
    assert table.missing == []
    assert "row 'ConSERT-base': left out 1 FAILED trial(s)" in table.notes
    assert any("mix several values of budget (none, smoke)" in note for note in table.notes)


def test_sg_bert_table6_shows_the_timings_the_paper_measures():
    """Training: the steps plus BERT_F's table pass; Inference: STS-B test alone at batch 16 (not the seven
    test sets' test_seconds, not the steps alone)."""
    frame = pd.DataFrame({
        "experiment": "sg_main", "status": "FINISHED", "row": ["No tuning (Mean)", "SG-OPT", "SG-OPT"],
        "seed": [1, 1, 2], "model": "m", "budget": "none", "run_id": ["a", "b", "c"], "trial_id": ["t1", "t2", "t3"],
        "start_time": pd.to_datetime([1, 2, 3], unit="s", utc=True), "test_seconds": 99.0,
        "train_seconds": [None, 10.0, 20.0], "train_seconds_with_frozen_outputs": [None, 13.0, 23.0],
        "stsb_test_seconds_b16": [4.0, 2.0, 3.0],
    })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        table = build_tables(frame, ["sg-bert-table6"], SPECS, NUMBERS)[0]
    lines = {line.label: line.cells for line in table.lines if line.cells}
    assert lines["SG-OPT"]["Training"].values == (13.0, 23.0) and lines["SG-OPT"]["Inference"].values == (2.0, 3.0)
    assert lines["No tuning (Mean)"]["Inference"].values == (4.0,) and not lines["No tuning (Mean)"]["Training"].n
    assert all(words in table.title for words in ("BERT_F's forward over each batch", "STS-B test alone",
                                                  "batch size 16"))


def test_a_model_cut_to_its_first_layers_is_named_in_the_notes():
    spec = SPECS["consert-table2"]
    frame = pd.DataFrame({
        "experiment": "consert_main", "status": "FINISHED", "row": ["ConSERT-base", "BERT-base"], "seed": 42,
        "model": "m", "model_layers": pd.array([2, 2], dtype="Int64"), "budget": "none", "run_id": ["a", "b"],
        "start_time": pd.Timestamp(0, tz="UTC"), "test_avg_spearman": [60.0, 59.0], "trial_id": ["t1", "t2"],
    })
    table = build_tables(frame, ["consert-table2"], {"consert-table2": spec}, NUMBERS)[0]
    assert table.notes[0].startswith("ours: m (first 2 layers); budget none; paper: consert table2")


def test_a_grid_over_the_model_is_no_mix_of_models():
    """SCT Figure 2 grids the model (its layers, offline): that the trials differ there is the table's point."""
    spec = SPECS["sct-figure2-offline"]
    frame = pd.DataFrame({
        "experiment": "sct_model_size_offline", "status": "FINISHED", "row": "SimCSE", "seed": 42, "model": "m",
        "model_layers": pd.array([1, 2, 4, 6], dtype="Int64"), "budget": ["none", "none", "none", "smoke"],
        "run_id": list("abcd"), "start_time": pd.Timestamp(0, tz="UTC"), "test_avg_spearman": [50.0, 55.0, 60.0, 62.0],
        "test_seconds": [1.0, 2.0, 3.0, 4.0], "trial_id": ["t1", "t2", "t3", "t4"],
    })
    table = build_tables(frame, ["sct-figure2-offline"], {"sct-figure2-offline": spec}, NUMBERS)[0]
    assert not any("mix several values of model_layers" in note for note in table.notes)
    assert any("mix several values of budget (none, smoke)" in note for note in table.notes)
    assert [line.cells["Inference (STS)"].values for line in table.lines] == [(1.0,), (2.0,), (3.0,), (4.0,)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "unknown keys"),
        ({"columns": ["Avg", "Spearman"]}, "unknown column 'Spearman'"),
        ({"rows": ["SG", "SG-OOPT"]}, r"rows \['SG-OOPT'\] are not rows"),
        ({"columns": ["Avg", DELTA]}, "needs delta"),
        ({"columns": ["Avg", DELTA], "delta": {"of": "Avg", "from": "nope"}}, "delta.from 'nope'"),
        ({"spec": "search_spaces/absent.yaml"}, "not found"),
        ({"kind": "grid", "index": "pooling_layer"}, "grid knobs"),
    ],
)
def test_a_bad_table_spec_is_refused(change, message):
    raw = {"title": "t", "kind": "rows", "spec": "search_spaces/sg_main.yaml", "columns": ["Avg"], "rows": ["SG"]}
    with pytest.raises(TableSpecError, match=message):
        parse_table_spec("t", {**raw, **change})


def test_cell_and_paper_texts():
    column = COLUMNS["Avg"]
    assert cell_text(Cell(()), column) == "–"
    assert cell_text(Cell((71.0,)), column) == "71.00 (1)"  # one seed: no std
    cell = Cell((70.0, 71.0, 75.0))
    assert math.isclose(cell.std, math.sqrt(((70 - 72) ** 2 + (71 - 72) ** 2 + (75 - 72) ** 2) / 2))
    assert cell_text(cell, column) == f"72.00 ± {cell.std:.2f} (3)"
    assert paper_text(74.62, cell, column) == "74.62 (-2.62)"
    assert paper_text(74.62, Cell(()), column) == "74.62"
    assert paper_text(930, Cell((900.0,)), COLUMNS["Steps"]) == "930 (-30)"
    assert cell_text(Cell((-1.5, -0.5)), Column(DELTA)) == "-1.00 ± 0.71 (2)"


def test_latex_escape():
    assert latex_escape("f_ref -> a 50% & #1 {x}") == r"f\_ref $\rightarrow$ a 50\% \& \#1 \{x\}"
    assert latex_escape("70.00 ± 1.00 – paper (ours − paper)") == r"70.00 $\pm$ 1.00 -- paper (ours $-$ paper)"
    assert latex_escape("a \\ b") == r"a \textbackslash{} b"


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_every_real_table_compiles_with_pdflatex(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        rendered = [to_latex(t) for t in build_tables(pd.DataFrame(), None, SPECS, NUMBERS)]
    document = ("\\documentclass{article}\\usepackage{booktabs,graphicx}\\begin{document}"
                + "\\clearpage".join(rendered) + "\\end{document}")
    (tmp_path / "tables.tex").write_text(document, encoding="utf-8")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "tables.tex"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_markdown_lists_what_is_missing():
    with pytest.warns(MissingResults):
        table = build_tables(pd.DataFrame(), ["sg-bert-table5"], SPECS, NUMBERS)[0]
    text = to_markdown(table)
    run = "python -m sweep run search_spaces/sg_opt_ablation.yaml"
    assert f"- missing: no finished trial of sweep 'sg_opt_ablation' ({run})" in text
    assert "| paper (ours − paper) | – | – | – | – | – | – | – | – | 73.14 | -1.48 |" in text


def test_sct_table4_draws_its_rows_from_three_sweeps():
    """The augmentation rows live in sct_text_views.yaml and sct_augmentations.yaml; their cells and
    Delta (against sct_ablation's default row) come from those sweeps' trials."""
    scores = {("sct_ablation", "SCT (default)"): [60.0, 61.0],
              ("sct_text_views", "Masked language model"): [58.0, 58.5],
              ("sct_augmentations", "Same BT (T = T)"): [55.0, 56.0],
              ("sct_ablation", "Masked language model"): [99.0, 99.0]}  # a same-named row elsewhere must not count
    records = [
        {"experiment": experiment, "row": row, "seed": seed, "status": "FINISHED", "run_id": f"{experiment}{row}{seed}",
         "start_time": pd.Timestamp(0, tz="UTC"), "test_avg_spearman": value, "best_dev_spearman": value,
         "model": "m", "budget": "none"}
        for (experiment, row), values in scores.items() for seed, value in zip((1, 2), values)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        table = build_tables(pd.DataFrame.from_records(records), ["sct-table4"], SPECS, NUMBERS)[0]
    lines = {line.label: line for line in table.lines}
    assert list(lines)[-7:] == ["Masked language model", "Synonym replacement",
                                "Masked language model (rewritten every step)",
                                "Synonym replacement (rewritten every step)",
                                "Dropout mask", "Same BT (T = T)", "Back-translation (default)"]
    assert lines["Masked language model"].cells["Avg"].values == (58.0, 58.5)
    assert lines["Masked language model"].cells[DELTA].mean == pytest.approx(58.25 - 60.5)
    assert lines["Same BT (T = T)"].paper == {DELTA: -5.66}
    assert lines["Back-translation (default)"].paper == {"Avg": 69.73}
    assert not any("no finished trial of sweep" in m for m in table.missing)  # every sweep has results
    assert any(m.startswith("row 'Synonym replacement': 3 of 3 seeds missing") for m in table.missing)
    assert table.p_reference == "SCT (default)" and "Masked language model" in table.p_values


def test_a_line_drawn_from_a_row_per_column_takes_each_column_from_its_row_and_averages_each_seed():
    """ConSERT Table 2's BERT-base-flow: each test set's column from the flow fit on that set (every flow row
    logs all seven sets, so a column read from the wrong row shows), Dev from the STS-B target's; Avg is each
    seed's mean of the seven columns, for the seeds every part has; a part's missing seed is said once."""
    spec = SPECS["consert-table2"]
    parts = spec.parts["BERT-base-flow"]
    tests = ["STS-B", "SICK-R", "STS12", "STS13", "STS14", "STS15", "STS16"]
    rows, seeds, figures = [], [], {column: [] for column in ["Dev", *tests]}
    for number, column in enumerate(tests):
        for seed in (42, 43) if column != "STS-B" else (43,):
            rows.append(parts[column])
            seeds.append(seed)
            for other in ["Dev", *tests]:  # its own set's figure 60 + number + seed/100, the others 0
                own = other == column or (other == "Dev" and column == "STS-B")
                figures[other].append(60.0 + number + seed / 100 if own else 0.0)
    frame = pd.DataFrame({
        "experiment": "consert_main", "status": "FINISHED", "row": rows, "seed": seeds, "model": "m",
        "budget": "none", "run_id": [f"r{n}" for n in range(len(rows))],
        "trial_id": [f"t{n}" for n in range(len(rows))],
        "start_time": pd.to_datetime(range(len(rows)), unit="s", utc=True), "test_avg_spearman": 0.0,
        **{COLUMNS[column].metric: values for column, values in figures.items()},
    })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        table = build_tables(frame, ["consert-table2"], {"consert-table2": spec}, NUMBERS)[0]
    cells = next(line for line in table.lines if line.label == "BERT-base-flow").cells
    assert cells["STS12"].values == (62.42, 62.43) and cells["STS13"].values == (63.42, 63.43)
    assert cells["Dev"].values == cells["STS-B"].values == (60.43,)
    assert cells["Avg"].values == pytest.approx((sum(60.0 + n + 0.43 for n in range(7)) / 7,))  # seed 43's
    missing = [note for note in table.missing if "BERT-base-flow" in note]
    assert missing == ["row 'BERT-base-flow, STS-B target': 1 of 1 seeds missing: [42]"]  # once, for Dev and STS-B
    paper = next(line for line in table.lines if line.label == "BERT-base-flow").paper
    assert paper["STS12"] == 63.48 and paper["Avg"] == 69.57
    assert "Line 'BERT-base-flow' draws its columns from 7 rows (Dev and STS-B: 'BERT-base-flow, STS-B target'; " \
        "SICK-R: 'BERT-base-flow, SICK-R target';" in spec.caption
    # the regimes name the line once, with each of its rows' corpora, and what its rows share as one value
    assert "training data one per column ('stsb_target', 'sickr_target', 'sts12_target'" in spec.regimes
    assert "epochs 1 (BERT-base-flow), 10 (ConSERT-base)" in spec.regimes


def test_a_line_drawn_from_rows_must_name_a_row_for_every_column():
    raw = {"kind": "rows", "spec": "search_spaces/consert_main.yaml", "columns": ["Dev", "STS-B", "Avg"],
           "rows": ["ConSERT-base", {"line": "flow", "columns": {"STS-B": "BERT-base-flow, STS-B target"}}]}
    with pytest.raises(TableSpecError, match=r"line 'flow' draws each column from a row: its columns must be "
                                             r"\['Dev', 'STS-B'\]"):
        parse_table_spec("t", raw)
    raw["rows"][1]["columns"] = {"Dev": "BERT-base-flow, STS-B target", "STS-B": "BERT-base-flow, STS-B target"}
    with pytest.raises(TableSpecError, match="line 'flow' shows Avg, the mean of"):
        parse_table_spec("t", raw)
    raw["columns"], raw["rows"][1]["columns"] = ["STS-B"], {"STS-B": "no such row"}
    with pytest.raises(TableSpecError, match=r"rows \['no such row'\] are not rows of"):
        parse_table_spec("t", raw)
