"""``python -m sweep settings SPEC``: every knob of a row beside its paper's value and source, read from the settings
ledger; a declared deviation marked '~' with its reason, an undeclared one '!'; bad input refused with exit 2."""

from __future__ import annotations

from pathlib import Path

from sweep.commands.cli import main
from sweep.spec.ledger import load_ledger
from sweep.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SCT_MAIN = str(ROOT / "search_spaces/sct_main.yaml")


def run(capsys, *argv):
    code = main(["settings", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_each_knob_of_the_row_is_printed_once_with_the_papers_value_and_its_source(capsys):
    code, lines, _ = run(capsys, SCT_MAIN, "--row", "SCT")
    assert code == 0 and lines[1] == "row 'SCT' (sct):"
    spec = load_spec(SCT_MAIN, check_environment=False)
    method = spec.method_of("SCT")
    printed = [line.split(":")[0][4:] for line in lines[2:]]
    assert sorted(printed) == sorted(set(method.all_knobs.names) - method.all_knobs.bookkeeping)
    source = load_ledger()["sct_main.yaml"].settings["SCT"]["batch_size"].source
    assert f"    batch_size: 128 ({source})" in lines
    assert any(line.startswith("  ~ train_corpus: 'sts_all_sentences', the paper's 'nli_sentences' (")
               and "; forced: NLI texts need the hub" in line for line in lines)
    assert any(line.startswith("    device: 'auto' (no paper's setting: ") for line in lines)


def test_an_undeclared_difference_is_marked_and_every_row_printed_without_row(capsys):
    code, lines, _ = run(capsys, SCT_MAIN, "--set", "max_grad_norm=0.5")
    assert code == 0
    assert [line for line in lines if line.startswith("row ")] == [
        "row 'No tuning (Mean)' (none):", "row 'SCT' (sct):", "row 'SimCSE' (simcse):"]
    marked = [line for line in lines if line.startswith("  ! ")]
    assert [line.split(",")[0] for line in marked] == ["  ! max_grad_norm: 0.5"] * 2  # SCT's and SimCSE's rows
    assert all(line.endswith(": undeclared") for line in marked)


def test_a_spec_of_no_table_and_an_unknown_row_are_refused(capsys):
    code, _, err = run(capsys, str(ROOT / "search_spaces/smoke.yaml"))
    assert code == 2 and "smoke.yaml: no record in sweep/spec/paper_ledger.yaml" in err
    code, _, err = run(capsys, SCT_MAIN, "--row", "SCT-OPT")
    assert code == 2 and "--row 'SCT-OPT' is no row of the spec; its rows: ['No tuning (Mean)', 'SCT', 'SimCSE']" in err
