"""A paper report's document: its sections of blocks, written as Markdown, self-contained HTML and LaTeX (and PDF).

:mod:`reports.paper` gathers what a campaign's report says (:class:`Report`: sections of paragraphs,
commands, links, tables and figures); this module only writes it down, the same blocks in each format,
every table through :mod:`results.render`.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from results.names import UsageError
from results.render import latex_escape, to_html, to_latex, to_markdown
from results.table import Table


@dataclass(frozen=True)
class Link:
    """A labelled address: a link in every format."""

    label: str
    url: str


@dataclass(frozen=True)
class Command:
    """A shell command to type: code in every format."""

    text: str


@dataclass
class Section:
    """A heading and what goes under it: paragraphs, commands, links, tables and figures, in order."""

    title: str
    blocks: list[str | Command | Link | Table | Path] = field(default_factory=list)


@dataclass
class Report:
    name: str
    title: str
    sections: list[Section]


def markdown_text(block: str | Command | Link) -> str:
    if isinstance(block, Link):
        return f"- {block.label}: <{block.url}>"
    return f"- `{block.text}`" if isinstance(block, Command) else f"- {block}"


def to_markdown_document(report: Report) -> str:
    out = [f"# {report.title}\n"]
    for section in report.sections:
        out.append(f"## {section.title}\n")
        for block in section.blocks:
            if isinstance(block, Table):
                out.append(to_markdown(block))
            elif isinstance(block, Path):
                out.append(f"![{block.stem}]({block.name})\n")
            else:
                out.append(markdown_text(block))
        if not isinstance(section.blocks[-1], (Table, Path)):
            out.append("")  # a blank line ends the list
    return "\n".join(out)


STYLE = """body{font-family:Georgia,serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}caption{text-align:left;font-weight:bold;padding:.3em 0}
th,td{padding:.2em .6em;border-bottom:1px solid #ccc;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
thead th{border-bottom:2px solid #222}td.best{font-weight:bold}tr.paper td{font-style:italic;color:#555}
ul.notes{font-size:.85em;color:#444}img{max-width:100%}code,.line{font-family:monospace;font-size:.85em}
a{overflow-wrap:anywhere}"""
"""Cells never wrap (a figure and its marks stay on one line); long link addresses may."""


def html_text(block: str | Command | Link) -> str:
    if isinstance(block, Link):
        return f'<li>{escape(block.label)}: <a href="{escape(block.url)}">{escape(block.url)}</a></li>'
    return f"<li><code>{escape(block.text)}</code></li>" if isinstance(block, Command) else f"<li>{escape(block)}</li>"


def to_html_document(report: Report) -> str:
    """One self-contained page: the styles inline and each figure as a data URI."""
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(report.title)}</title>"
           f"<style>{STYLE}</style></head><body><h1>{escape(report.title)}</h1>"]
    for section in report.sections:
        out.append(f"<h2>{escape(section.title)}</h2>")
        texts = []
        for block in section.blocks:
            if not isinstance(block, (Table, Path)):
                texts.append(html_text(block))
                continue
            if texts:
                out.append(f"<ul>{''.join(texts)}</ul>")
                texts = []
            if isinstance(block, Table):
                out.append(to_html(block))
            else:
                data = base64.b64encode(block.read_bytes()).decode()
                out.append(f'<figure><img alt="{escape(block.stem)}" src="data:image/png;base64,{data}"></figure>')
        if texts:
            out.append(f"<ul>{''.join(texts)}</ul>")
    return "\n".join(out + ["</body></html>"]) + "\n"


LATEX_PREAMBLE = (
    "\\documentclass[10pt]{article}", "\\usepackage[margin=1.5cm]{geometry}",
    # Latin Modern in T1: vector fonts with every glyph the escaping uses (no bitmap Type 3 fonts); where it is not
    # installed (Debian's lmodern), the PDF is still written, in T1's bitmap fonts.
    "\\usepackage[T1]{fontenc}", "\\IfFileExists{lmodern.sty}{\\usepackage{lmodern}}{}", "\\usepackage{textcomp}",
    "\\usepackage{booktabs}", "\\usepackage{graphicx}", "\\usepackage{pdflscape}",
    "\\usepackage[hidelinks]{hyperref}",
)


def latex_text(block: str | Command | Link) -> str:
    if isinstance(block, Link):  # hyperref's \url, clickable; it takes the address's # and % as they are
        return f"\\noindent {latex_escape(block.label)}: \\url{{{block.url}}}\\par"
    if isinstance(block, Command):  # "-{}" keeps T1 typewriter type from joining -- into an en dash
        return f"\\noindent\\texttt{{{latex_escape(block.text).replace('-', '-{}')}}}\\par\\smallskip"
    return f"\\noindent {latex_escape(block)}\\par\\smallskip"


def to_latex_document(report: Report) -> str:
    out = [*LATEX_PREAMBLE, f"\\title{{{latex_escape(report.title)}}}", "\\date{}", "\\begin{document}",
           "\\maketitle"]
    for section in report.sections:
        text_only = not any(isinstance(block, (Table, Path)) for block in section.blocks)
        # A section of text lines is short: a minipage keeps it, heading included, on one page (ragged right, so
        # that a long link leaves no stretched gaps).
        out += ["\\noindent\\begin{minipage}{\\linewidth}\\raggedright"] if text_only else []
        out.append(f"\\section*{{{latex_escape(section.title)}}}")
        for block in section.blocks:
            if isinstance(block, Table):
                out.append(to_latex(block).replace("\\begin{table}[ht]", "\\begin{table}[h!]"))
            elif isinstance(block, Path):
                out.append(f"\\begin{{center}}\\includegraphics[width=\\linewidth]{{{block.name}}}\\end{{center}}")
            else:
                out.append(latex_text(block))
        out += ["\\end{minipage}\\par\\bigskip"] if text_only else []
    return "\n".join(out + ["\\end{document}"]) + "\n"


def compile_pdf(tex: Path) -> Path | None:
    """``tex`` through pdflatex (twice is not needed: no references), or None where pdflatex is missing."""
    if shutil.which("pdflatex") is None:
        return None
    with tempfile.TemporaryDirectory() as build:
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-output-directory",
                               build, tex.name], cwd=tex.parent, capture_output=True, text=True)
        pdf = Path(build) / f"{tex.stem}.pdf"
        if done.returncode != 0 or not pdf.exists():
            tail = "\n".join(done.stdout.splitlines()[-15:])
            raise UsageError(f"{tex}: pdflatex failed:\n{tail}")
        return Path(shutil.copy(pdf, tex.with_suffix(".pdf")))
