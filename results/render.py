"""The one renderer of a :class:`results.table.Table`: Markdown, LaTeX, HTML and CSV.

:func:`layout` turns a table into its text cells once (mean ± std, the seed
count where it is not the table's, the seed-free and mirror marks, the paper's
line under ours, the p column, the bold best) and :func:`legend` says what each
mark it used means; the three formats only lay that text out, the legend under
the table. What every cell would repeat (the seed count shared by the whole
table, "seed-free") is said once in the legend, so the cells stay short enough
to print. LaTeX is pandas' ``Styler.to_latex`` (booktabs rules, bold and
italic) at ``\footnotesize`` (8 pt in a 10 pt document), never shrunk: a table
wider than the page turns to landscape, and one wider than that is split into
parts of whole columns, each repeating the line labels. CSV is
``DataFrame.to_csv``. Markdown is written here: pandas' ``to_markdown`` pads
every cell to its column's width and needs ``tabulate``, which would change
every line of the output.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from results.significance import is_significant, p_text
from results.table import DASH, DELTA, P_COLUMN, Cell, Column, Table

PAPER_LABEL = "paper (ours − paper)"
REFERENCE = "ref"


def marks(cell: Cell) -> str:
    """What a cell stands for beyond its runs: ``seed-free``, ``mirror``, both, or nothing."""
    return ", ".join([mark for mark, on in (("seed-free", cell.seed_free), ("mirror", cell.mirror)) if on])


SEED_FREE_MARK = "†"
MIRROR_MARK = "‡"
MARKS = {
    SEED_FREE_MARK: "seed-free: one run stands for every seed (a configuration that cannot depend on it: "
                    "no training)",
    MIRROR_MARK: "mirror: filled from the mirror point of the symmetric grid axes, which ran instead",
}
"""The marks a cell may carry after its figure, and what each means (the legend under every table that uses one)."""


def cell_text(cell: Cell, column: Column, common_seeds: int | None = None) -> str:
    """``mean ± std``, then the marks (``†`` seed-free, ``‡`` mirror), then ``(n)``, the seeds it is over, unless
    it is ``common_seeds`` (the table's legend says it once) or the cell is seed-free."""
    if cell.n == 0:
        return DASH
    mean = f"{cell.mean:+.{column.digits}f}" if column.metric == DELTA else f"{cell.mean:.{column.digits}f}"
    spread = f" ± {cell.std:.{column.digits}f}" if cell.n > 1 and not cell.seed_free else ""
    marks = (SEED_FREE_MARK if cell.seed_free else "") + (MIRROR_MARK if cell.mirror else "")
    count = f" ({cell.n})" if not cell.seed_free and cell.n != common_seeds else ""
    return f"{mean}{spread}{marks}{count}"


def common_seeds(table: Table) -> int | None:
    """The number of seeds every cell of ours that is not seed-free is over, where they all agree."""
    counts = {cell.n for line in table.lines for cell in line.cells.values() if cell.n and not cell.seed_free}
    return counts.pop() if len(counts) == 1 else None


def legend(table: Table) -> list[str]:
    """What each mark the table's cells use means, one line each (only the marks it uses)."""
    cells = [cell for line in table.lines for cell in line.cells.values() if cell.n]
    seeds = common_seeds(table)
    if seeds == 1:
        counted = "each cell of ours is one seed's score (no std: it needs 2 seeds)"
    elif seeds:
        counted = f"each cell of ours is the mean ± sample std over {seeds} seeds"
    else:
        counted = "each cell of ours is the mean ± sample std over the (n) seeds it shows"
    lines = [f"cells: {counted}"] if any(not cell.seed_free for cell in cells) else []
    lines += [f"{mark} {meaning}" for mark, meaning in MARKS.items()
              if any(getattr(cell, "seed_free" if mark == SEED_FREE_MARK else "mirror") for cell in cells)]
    if any(table.best_line(column) is not None for column in table.columns):
        lines.append("bold: the best of our lines in each column (the lowest for times)")
    if any(line.paper for line in table.lines):
        lines.append(f"{PAPER_LABEL}: the paper's figure, in italics, and our difference from it")
    if table.p_values:
        lines.append(f"{REFERENCE}: the reference line the p column tests the others against")
    if any(cell.n == 0 for line in table.lines for cell in line.cells.values()):
        lines.append(f"{DASH}: no result")
    return lines


def table_notes(table: Table) -> list[str]:
    """What is under a table: what is missing, its notes, then the legend of its marks."""
    return [f"missing: {m}" for m in table.missing] + list(table.notes) + legend(table)


def paper_text(value: float | None, ours: Cell, column: Column) -> str:
    if value is None:
        return DASH
    figure = f"{value:+.{column.digits}f}" if column.metric == DELTA else f"{value:.{column.digits}f}"
    if ours.n == 0:
        return figure
    return f"{figure} ({ours.mean - value:+.{column.digits}f})"


def layout(table: Table) -> tuple[list[str], list[list[str]], set[tuple[int, int]]]:
    """Header, text lines and the (line, column) positions to set in bold.

    Each of our lines is followed by the paper's line where the paper reports
    any of its cells.
    """
    formats = table.formats
    seeds = common_seeds(table)
    first = 1 + len(table.lead)
    best_columns: dict[int, list[int]] = {}
    for j, column in enumerate(table.columns, start=first):
        best_columns.setdefault(table.best_line(column), []).append(j)
    text, bold = [], set()
    significance = [table.header(P_COLUMN)] if table.p_values else []
    for i, line in enumerate(table.lines):
        bold.update((len(text), j) for j in best_columns.get(i, []))
        p = [REFERENCE if line.label == table.p_reference else p_text(table.p_values.get(line.label, math.nan))]
        lead = [str(line.lead[name]) for name in table.lead]
        cells = [cell_text(line.cells[c], formats[c], seeds) for c in table.columns]
        text.append([line.label] + lead + cells + p[: len(significance)])
        if line.paper:
            paper = [paper_text(line.paper.get(c), line.cells[c], formats[c]) for c in table.columns]
            text.append([PAPER_LABEL] + [""] * len(table.lead) + paper + [""] * len(significance))
    corner = f"{table.corner} \\ {table.across}" if table.across else table.corner
    return [corner] + table.lead + [table.header(c) for c in table.columns] + significance, text, bold


def markdown_table(table: Table) -> str:
    """The table's lines as a Markdown pipe table, the best in bold."""
    header, lines, bold = layout(table)

    def cell(i: int, j: int, text: str) -> str:
        return f"**{text}**" if (i, j) in bold else text

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(i, j, t) for j, t in enumerate(line)) + " |" for i, line in enumerate(lines)]
    return "\n".join(out) + "\n"


def note_lines(table: Table) -> str:
    """What is missing, the notes and the legend (:func:`table_notes`), one Markdown list item each."""
    return "".join(f"- {note}\n" for note in table_notes(table))


def to_markdown(table: Table) -> str:
    return f"### {table.title}\n\n{markdown_table(table)}\n{note_lines(table)}"


def to_csv(table: Table) -> str:
    """One line per line of ours: its lead columns, then mean, std, n, what the cell stands for
    (``seed-free``, ``mirror``) and the paper's figure of each column, and the p-value (with whether it
    is significant at 5%) against the reference line."""
    records = []
    for line in table.lines:
        record: dict[str, Any] = {table.corner: line.label, **{name: line.lead[name] for name in table.lead}}
        for column in table.columns:
            cell = line.cells[column]
            record.update({f"{column} mean": cell.mean, f"{column} std": cell.std, f"{column} n": cell.n,
                           f"{column} marks": marks(cell), f"{column} paper": line.paper.get(column, math.nan)})
        p_value = table.p_values.get(line.label, math.nan)
        record.update({"p_value": p_value, "significant": is_significant(p_value),
                       "p_reference": table.p_reference or ""})
        records.append(record)
    return pd.DataFrame.from_records(records).to_csv(index=False)


LATEX_REPLACEMENTS = (
    ("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"),
    ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}"),
    ("->", r"$\rightarrow$"), ("<", r"\textless{}"), (">", r"\textgreater{}"),
    ("±", r"$\pm$"), ("−", "$-$"), ("–", "--"), ("†", r"\textdagger{}"), ("‡", r"\textdaggerdbl{}"),
)
"""pandas' own LaTeX escaping (``escape="latex"``) leaves ±, −, – and -> as they are, which pdflatex
cannot set in its default fonts."""


def latex_escape(text: str) -> str:
    """Plain text as LaTeX source (one pass, so replacements are never re-escaped)."""
    out, i = [], 0
    while i < len(text):
        for old, new in LATEX_REPLACEMENTS:
            if text.startswith(old, i):
                out.append(new)
                i += len(old)
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def latex_tabular(header: Sequence[str], lines: Sequence[Sequence[str]], bold: set[tuple[int, int]]) -> str:
    """A booktabs tabular by pandas' Styler: ours in bold where best, the paper's lines in italics."""
    frame = pd.DataFrame([list(line) for line in lines], columns=range(len(header)))

    def styles(_: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame([["textbf:--rwrap;" if (i, j) in bold else "textit:--rwrap;" if line[0] == PAPER_LABEL
                              else "" for j in range(len(line))] for i, line in enumerate(lines)],
                            index=frame.index, columns=frame.columns)

    styler = (frame.style.hide(axis="index").format(latex_escape)
              .relabel_index([latex_escape(h) for h in header], axis=1))
    return styler.apply(styles, axis=None).to_latex(hrules=True, column_format="l" + "r" * (len(header) - 1))


PORTRAIT_CHARACTERS = 110
LANDSCAPE_CHARACTERS = 160
"""About how many characters of \\footnotesize table text fit the width of a portrait and of a landscape page with
1.5 cm margins (measured: a column of ``52.15 ± 0.13 (4)`` in bold, 16 characters and its padding, is about 75 pt),
counting a column's padding as three characters."""


def latex_width(header: Sequence[str], lines: Sequence[Sequence[str]], columns: Sequence[int]) -> int:
    """The width of ``columns`` of the table's text, in characters (:data:`PORTRAIT_CHARACTERS`)."""
    return sum(3 + max(len(row[j]) for row in [header, *lines]) for j in columns)


def latex_parts(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[list[int]]:
    """The table's columns split into parts that each fit a landscape page, each part with the label column."""
    parts: list[list[int]] = [[0]]
    for j in range(1, len(header)):
        if len(parts[-1]) > 1 and latex_width(header, lines, [*parts[-1], j]) > LANDSCAPE_CHARACTERS:
            parts.append([0])
        parts[-1].append(j)
    return parts


def to_latex(table: Table) -> str:
    """A booktabs table float at \\footnotesize, its notes and legend under it (needs booktabs, and pdflscape
    where it turns). Never shrunk: wider than a portrait page, it turns to landscape; wider than a landscape
    page, it is split into parts of whole columns (each repeating the line labels)."""
    header, lines, bold = layout(table)
    parts = latex_parts(header, lines)
    landscape = len(parts) > 1 or latex_width(header, lines, range(len(header))) > PORTRAIT_CHARACTERS
    floats = []
    for number, part in enumerate(parts, start=1):
        caption = table.title if len(parts) == 1 else f"{table.title} (part {number} of {len(parts)})"
        tabular = latex_tabular([header[j] for j in part], [[line[j] for j in part] for line in lines],
                                {(i, part.index(j)) for i, j in bold if j in part})
        floats += ["\\begin{table}[ht]", "\\centering", "\\footnotesize", f"\\caption{{{latex_escape(caption)}}}",
                   f"\\label{{tab:{table.name}{'' if len(parts) == 1 else f'-{number}'}}}", tabular.rstrip("\n"),
                   "\\end{table}"]
    notes = table_notes(table)
    items = "".join(f"\\item {latex_escape(note)}" for note in notes)
    under = [f"\\begin{{itemize}}\\footnotesize\\setlength{{\\itemsep}}{{0pt}}{items}\\end{{itemize}}"] if notes else []
    body = floats + under
    if landscape:  # turned where the document loads pdflscape; elsewhere it still compiles, in parts
        body = ["\\ifdefined\\landscape\\begin{landscape}\\fi", *body, "\\ifdefined\\landscape\\end{landscape}\\fi"]
    return "\n".join(["% needs \\usepackage{booktabs} (and \\usepackage{pdflscape} to turn wide tables)", *body]) + "\n"


def to_html(table: Table) -> str:
    """The table as an HTML ``<table>`` with its caption and notes: ours in bold where best, the paper's lines
    in italics (classes ``paper`` and ``best``)."""
    header, lines, bold = layout(table)

    def cell(i: int, j: int, text: str) -> str:
        return f'<td class="best">{escape(text)}</td>' if (i, j) in bold else f"<td>{escape(text)}</td>"

    rows = [('<tr class="paper">' if line[0] == PAPER_LABEL else "<tr>")
            + "".join(cell(i, j, text) for j, text in enumerate(line)) + "</tr>" for i, line in enumerate(lines)]
    notes = [f"<li>{escape(note)}</li>" for note in table_notes(table)]
    return "\n".join([
        f'<table id="{escape(table.name)}"><caption>{escape(table.title)}</caption>',
        "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr></thead>",
        "<tbody>", *rows, "</tbody></table>",
        *([f'<ul class="notes">{"".join(notes)}</ul>'] if notes else []),
    ]) + "\n"


def write_table(frame: pd.DataFrame, caption: str, stem: Path, notes: Sequence[str] = ()) -> list[Path]:
    """A table of text cells that is not a :class:`Table` (an analysis, an importance table) as ``stem.md``
    (a caption, a pipe table, then its notes as a list) and ``stem.tex`` (a booktabs table, the notes
    under it)."""
    lines = [[str(v) for v in row] for row in frame.itertuples(index=False)]
    header = [str(c) for c in frame.columns]
    markdown = "\n".join([f"### {caption}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                         + ["| " + " | ".join(line) + " |" for line in lines]) + "\n"
    markdown += "".join(["\n"] + [f"- {note}\n" for note in notes]) if notes else ""
    latex = "\n".join(["% needs \\usepackage{booktabs}", "\\begin{table}[ht]", "\\centering", "\\small",
                       f"\\caption{{{latex_escape(caption)}}}", latex_tabular(header, lines, set()).rstrip("\n"),
                       *[f"\\par\\footnotesize {latex_escape(note)}" for note in notes], "\\end{table}"]) + "\n"
    paths = [stem.with_suffix(".md"), stem.with_suffix(".tex")]
    for path, text in zip(paths, (markdown, latex)):
        path.write_text(text, encoding="utf-8")
    return paths


RENDERERS = {"markdown": (to_markdown, ".md"), "latex": (to_latex, ".tex"), "html": (to_html, ".html"),
             "csv": (to_csv, ".csv")}
