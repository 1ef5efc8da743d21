"""A table too wide for a page, as the report's PDF sets it: turned to landscape and split into parts, never shrunk;
every figure printed inside the page at 8 pt or more (read back from the PDF with poppler)."""

from __future__ import annotations

import re
import subprocess
from html import unescape
from pathlib import Path

import pytest

from reports.paper_documents import LATEX_PREAMBLE
from results.render import to_latex
from results.table import COLUMNS, Cell, Line, Table
from tests.test_report_rendering import MIN_TABLE_POINTS, pdf_tools

MARGIN_POINTS = 1.5 / 2.54 * 72
"""The report's page margin (``LATEX_PREAMBLE``'s geometry)."""

pytestmark = pytest.mark.skipif(not pdf_tools(), reason="needs pdflatex, Latin Modern and poppler-utils")

WIDE = ("Dev", "STS-B", "SICK-R", "STS12", "STS13", "STS14", "STS15", "STS16", "Avg", "MR", "CR", "SUBJ", "MPQA",
        "SST", "TREC", "MRPC", "SentEval Avg", "AskU", "SciDocs", "Re-ranking Avg")


def wide_table() -> Table:
    """Twenty columns of mean ± std cells over different seed counts (so each cell shows its (n))."""
    columns = [c for c in WIDE if c in COLUMNS]
    lines = [Line(f"row {i}", {c: Cell(tuple(50.0 + i + j + s / 10 for s in range(2 + i))) for j, c in
                               enumerate(columns)}) for i in range(3)]
    return Table("wide", "A wide table", "row", columns, {c: COLUMNS[c] for c in columns}, lines)


def test_a_wide_table_turns_and_splits_and_every_figure_is_on_the_page_at_8_points(tmp_path: Path):
    latex = to_latex(wide_table())
    assert "\\begin{landscape}" in latex and "(part 1 of " in latex and "resizebox" not in latex
    document = "\n".join([*LATEX_PREAMBLE, "\\begin{document}", latex, "\\end{document}"])
    (tmp_path / "wide.tex").write_text(document, encoding="utf-8")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "wide.tex"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    pdf = tmp_path / "wide.pdf"
    boxes = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    # A landscape page is rotated: its words run along the page's long side. The text ends at the 1.5 cm margin.
    extent = max(float(v) for v in re.search(r'<page width="([\d.]+)" height="([\d.]+)"', boxes).groups())
    width = extent - MARGIN_POINTS + 1
    words = [(float(x_max), word) for x_max, word in re.findall(r'xMax="([\d.]+)"[^>]*>([^<]+)</word>', boxes)]
    figures = [(x_max, word) for x_max, word in words if re.fullmatch(r"\d+\.\d\d", word)]
    assert len(figures) >= 3 * len(wide_table().columns)  # every mean (and std) printed
    assert all(x_max <= width for x_max, _ in figures), [f for f in figures if f[0] > width][:5]
    xml = subprocess.run(["pdftohtml", "-xml", "-i", "-zoom", "1", "-stdout", str(pdf)], capture_output=True,
                         text=True, check=True).stdout
    sizes = {font: int(size) for font, size in re.findall(r'<fontspec id="(\d+)" size="(\d+)"', xml)}
    figure_sizes = [sizes[font] for font, text in re.findall(r'<text [^>]*font="(\d+)"[^>]*>(.*?)</text>', xml)
                    if re.search(r"\d+\.\d\d", unescape(text))]
    assert figure_sizes and min(figure_sizes) >= MIN_TABLE_POINTS
