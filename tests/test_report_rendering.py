"""The report of a campaign as a reader gets it: the PDF's own text and fonts, the HTML's links and legends.

A campaign of two tiny BERT specs runs under ``--budget smoke`` with an evaluation subset of 20 pairs;
``reports.paper`` renders it. What the tests check comes from the PDF itself (poppler's ``pdftotext``,
``pdffonts`` and ``pdftohtml``), the HTML and the runs' own records in MLflow, read independently of the report.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest
import yaml

from reports.paper import main as report_main
from results.render import MARKS, SEED_FREE_MARK
from sweep.commands.cli import main
from sweep.spec.budget import BUDGETS
from tests.conftest import child_runs, fresh_ray, spec_file


def pdf_tools() -> bool:
    """pdflatex with Latin Modern (the report's vector fonts), and poppler's tools to read the PDF back."""
    if any(shutil.which(tool) is None for tool in ("pdflatex", "kpsewhich", "pdftotext", "pdffonts", "pdftohtml")):
        return False
    return bool(subprocess.run(["kpsewhich", "lmodern.sty"], capture_output=True, text=True).stdout.strip())


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not pdf_tools(), reason="needs pdflatex, Latin Modern and "
                                                   "poppler-utils (apt-get install texlive-latex-recommended "
                                                   "lmodern poppler-utils)")]

EVAL_PAIRS = 20
"""The specs' evaluation subset: fewer pairs than the tiny STS sets hold."""
SCORES = ("test_avg_spearman", "best_dev_spearman", "test_stsb_spearman", "test_sickr_spearman")
MIN_TABLE_POINTS = 8


@pytest.fixture(scope="module")
def report(tmp_path_factory, tiny_bert, tiny_sts_dir) -> tuple[Path, str]:
    """The rendered report's folder and the store its campaign ran on."""

    folder = tmp_path_factory.mktemp("rendering")
    base = {"model": tiny_bert, "batch_size": 8, "train_limit": 48, "max_steps": 4, "eval_every": 2,
            "eval_max_pairs": EVAL_PAIRS}
    spec_file(folder, tiny_bert, "first", base=base, seeds=[1])
    spec_file(folder, tiny_bert, "second", base={**base, "temperature": 0.1}, seeds=[1])
    path = folder / "pair.yaml"
    path.write_text(yaml.safe_dump({"description": "two specs", "specs": ["first.yaml", "second.yaml"]}))
    uri = f"sqlite:///{folder}/mlflow.db"
    patch = pytest.MonkeyPatch()
    patch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
    try:
        with fresh_ray():
            assert main(["paper", str(path), "--budget", "smoke", "--tracking-uri", uri,
                         "--storage", str(folder / "ray")]) == 0
    finally:
        patch.undo()
    out = folder / "report"
    assert report_main([str(path), "--tracking-uri", uri, "--out", str(out)]) == 0
    return out, uri


def pdf_text(pdf: Path) -> str:
    """The PDF's text as ``pdftotext`` extracts it, its runs of white space as one space."""
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return " ".join(text.split())


def trial_scores(uri: str) -> list[str]:
    """Every score of every finished trial of the two sweeps, as a table prints it (two decimals)."""
    runs = [run for name in ("first", "second") for run in child_runs(uri, name) if run.info.status == "FINISHED"]
    assert runs
    return [f"{run.data.metrics[name]:.2f}" for run in runs for name in SCORES]


def test_the_pdf_holds_every_score_the_evaluation_subset_and_the_budget(report):
    out, uri = report
    text = pdf_text(out / "pair.pdf")
    missing = sorted({score for score in trial_scores(uri) if score not in text})
    assert not missing, f"scores absent from the PDF's text: {missing}"
    (run, *_) = child_runs(uri, "first")
    pairs = int(run.data.params["eval_max_pairs"])  # as the trial recorded it, capped by nothing here
    assert pairs == EVAL_PAIRS
    assert f"evaluation subset: the first {pairs} pairs of each STS set" in text
    assert f"budget: smoke (caps {BUDGETS['smoke'].caps()})" in text
    caveats = text.split("Regime caveats", 1)[1].split("Environment", 1)[0]
    assert f"first {pairs} pairs" in caveats and "none" not in caveats.split()[:1]
    # The MLflow section: the command as typed (two hyphens, no en dash), no empty link, no doubled colon.
    assert "mlflow ui --backend-store-uri sqlite:///" in text and "then::" not in text
    assert "\\url{}" not in (out / "pair.tex").read_text()


def test_the_pdf_tables_are_at_least_8_points_in_vector_fonts(report):
    out, uri = report
    fonts = subprocess.run(["pdffonts", str(out / "pair.pdf")], capture_output=True, text=True, check=True).stdout
    kinds = [line[37:55].strip() for line in fonts.splitlines()[2:]]
    assert kinds and "Type 3" not in kinds, fonts
    # pdftohtml at zoom 1 gives each text piece's font size in points.
    xml = subprocess.run(["pdftohtml", "-xml", "-i", "-zoom", "1", "-stdout", str(out / "pair.pdf")],
                         capture_output=True, text=True, check=True).stdout
    sizes = {font: int(size) for font, size in re.findall(r'<fontspec id="(\d+)" size="(\d+)"', xml)}
    pieces = [(unescape(re.sub("<[^>]+>", "", text)), sizes[font])
              for font, text in re.findall(r'<text [^>]*font="(\d+)"[^>]*>(.*?)</text>', xml)]
    scores = set(trial_scores(uri))
    in_tables = [(text, size) for text, size in pieces if any(score in text for score in scores)]
    assert in_tables
    small = [(text, size) for text, size in in_tables if size < MIN_TABLE_POINTS]
    assert not small, f"table text below {MIN_TABLE_POINTS} pt: {small[:5]}"


def test_the_html_links_its_runs_and_explains_every_mark(report):
    out, uri = report
    html = (out / "pair.html").read_text()
    links = re.findall(r'<a href="(http[^"]+)"', html)
    assert len(links) == 3, links  # the two sweeps and the campaign's own
    cells = re.findall(r"<td[^>]*>(.*?)</td>", html)
    assert not [cell for cell in cells if "(seed-free" in cell or cell.endswith("(1)")]  # said once, in the legend
    notes = re.findall(r"<li>(.*?)</li>", html)
    for mark, meaning in MARKS.items():
        if any(mark in cell for cell in cells):
            assert f"{mark} {meaning}" in notes, mark
    assert any(SEED_FREE_MARK in cell for cell in cells)  # the untuned rows are seed-free
    if "<td class=\"best\">" in html:
        assert any(note.startswith("bold: ") for note in notes)
    assert any(note.startswith("cells: each cell of ours is one seed") for note in notes)
    assert "white-space:nowrap" in html
