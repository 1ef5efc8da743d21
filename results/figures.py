"""PNG figures drawn from lines: heatmaps of two-knob grids, any sweep's grid plot, dev-score curves.

The end-of-sweep summary logs a sweep's dev curves and grid plot on its parent
run; ``reports.plots`` draws the same for any collected sweep, and the paper
tables' heatmaps. All of them are drawn from :class:`results.table.Table` lines,
so a mirror cell of symmetric axes is filled and marked "(mirror)" and a
seed-free cell "(seed-free)" in every heatmap, as in the tables.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from results.importance import SEED_NOISE, Importance  # noqa: E402
from results.lines import LINE, label_lines  # noqa: E402
from results.reader import read_client  # noqa: E402
from results.significance import is_significant, p_text  # noqa: E402
from results.table import DASH, Cell, Line, Table  # noqa: E402
from trainers.run_schema import Metric  # noqa: E402

PAPER_COLOUR = "tab:red"
DEV_CURVES = "{}_dev_curves.png"
GRID_PLOT = "{}_grid.png"
"""File names of a sweep's figures (``{}``: the sweep, or NAME-HASH of one variant)."""


def save(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def title(table: Table) -> str:
    return f"{table.title}\n{table.notes[0]}" if table.notes else table.title


def heatmap_texts(table: Table) -> list[list[str]]:
    """The text of each cell of a two-knob table: our mean, what it stands for, the paper's figure."""
    texts = []
    for line in table.lines:
        row = []
        for column in table.columns:
            cell = line.cells[column]
            text = f"{cell.mean:.1f}" if math.isfinite(cell.mean) else DASH
            text += "\n(seed-free)" if cell.seed_free else ""
            text += "\n(mirror)" if cell.mirror else ""
            text += f"\npaper {line.paper[column]:.1f}" if column in line.paper else ""
            row.append(text)
        texts.append(row)
    return texts


def heatmap(table: Table, path: Path) -> Path:
    """Our mean per cell of a two-knob grid; the paper's cells outlined, its figure beneath ours; cells
    filled from their mirror (symmetric axes) marked "(mirror)" with a dotted outline."""
    means = np.array([[line.cells[c].mean for c in table.columns] for line in table.lines], dtype=float)
    figure, axes = plt.subplots(figsize=(1.3 * len(table.columns) + 2.5, 0.5 * len(table.lines) + 1.8))
    image = axes.imshow(np.ma.masked_invalid(means), cmap="viridis", aspect="auto")
    axes.set_xticks(range(len(table.columns)), table.columns)
    axes.set_yticks(range(len(table.lines)), [line.label for line in table.lines])
    axes.set_xlabel(table.across)
    axes.set_ylabel(table.corner)
    finite = means[np.isfinite(means)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i, (line, texts) in enumerate(zip(table.lines, heatmap_texts(table))):
        for j, (column, text) in enumerate(zip(table.columns, texts)):
            if line.cells[column].mirror:  # symmetric axes: this cell shows its mirror's run
                axes.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="grey", linestyle=":"))
            if column in line.paper:
                axes.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=PAPER_COLOUR, linewidth=2))
            dark = math.isfinite(means[i, j]) and means[i, j] < middle
            axes.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    figure.colorbar(image, ax=axes, label="Spearman x 100 (ours)")
    axes.set_title(title(table), fontsize=8)
    return save(figure, path)


def dev_curves(trials: pd.DataFrame, tracking_uri: str, experiment: str, path: Path) -> Path:
    """STS-B dev Spearman over the steps of every trial of ``experiment`` (from MLflow's history; a reused
    trial's from the run that trained it, its own run holding the final report only): one colour per line
    (row and grid point), one line style per seed."""
    client = read_client(tracking_uri)
    runs = label_lines(trials[trials["experiment"] == experiment].sort_values(["row", "axes", "seed", "run_id"]))
    labels = list(dict.fromkeys(runs[LINE]))
    seeds = sorted(set(runs["seed"]))
    colours = plt.get_cmap("tab20" if len(labels) > 10 else "tab10")
    styles = ["-", "--", ":", "-."]
    figure, axes = plt.subplots(figsize=(9, 4.8))
    for _, run in runs.iterrows():
        trained_by = run.get("reused_from") or run["run_id"]
        history = sorted(client.get_metric_history(trained_by, Metric.DEV), key=lambda m: m.step)
        if history:
            status = "" if run["status"] == "FINISHED" else f", {run['status']}"
            axes.plot([m.step for m in history], [m.value for m in history], marker=".",
                      color=colours(labels.index(run[LINE]) % colours.N),
                      linestyle=styles[seeds.index(run["seed"]) % len(styles)],
                      label=f"{run[LINE]} (seed {run['seed']}{status})")
    axes.set_xlabel("step")
    axes.set_ylabel("STS-B dev Spearman x 100")
    axes.set_title(f"{experiment}: dev score per trial", fontsize=9)
    if axes.lines:
        axes.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 if len(axes.lines) <= 24 else 2)
    return save(figure, path)


# ---------------------------------------------------------------- importance


NOISE_COLOUR, ABOVE_COLOUR, BELOW_COLOUR = "tab:grey", "tab:blue", "tab:orange"


def importance_bars(result: Importance, heading: str, path: Path) -> Path:
    """One horizontal bar per effect, its share of the metric's variance; the seed noise in grey, effects
    above it (F test significant) in blue, the others in orange, each with its F and p."""
    effects = list(reversed(result.effects))  # the first effect on top
    figure, axes = plt.subplots(figsize=(7, 0.45 * len(effects) + 1.6))
    colours = [NOISE_COLOUR if e.name == SEED_NOISE else ABOVE_COLOUR if is_significant(e.p) else BELOW_COLOUR
               for e in effects]
    shares = [0.0 if math.isnan(e.share) else 100 * e.share for e in effects]
    axes.barh(range(len(effects)), shares, color=colours)
    for i, effect in enumerate(effects):
        if not math.isnan(effect.f):
            axes.text(shares[i], i, f"  F = {effect.f:.2f}, p = {p_text(effect.p)}", va="center", fontsize=7)
    axes.set_yticks(range(len(effects)), [e.name for e in effects], fontsize=8)
    axes.set_xlabel(f"share of the variance of {result.metric} (%)")
    axes.set_xlim(0, max(shares + [1.0]) * 1.45)
    axes.set_title(f"{heading}\n{result.method}", fontsize=8)
    return save(figure, path)


# ---------------------------------------------------------------- any sweep's grid


def grid_cells(table: Table, column: str) -> dict[str, dict[tuple[str, ...], Cell]]:
    """Row -> grid point (its values in the lines' knob order) -> cell of ``column``, from a sweep table's
    lines; the lines of sampled trials at one grid point are pooled into one cell."""
    cells: dict[str, dict[tuple[str, ...], Cell]] = {}
    for line in table.lines:
        point = tuple(line.point.values())
        cell, found = line.cells[column], cells.setdefault(line.row, {}).get(point)
        cells[line.row][point] = cell if found is None else Cell(
            found.values + cell.values, found.seed_free and cell.seed_free, found.mirror and cell.mirror)
    return cells


def grid_knobs(table: Table) -> list[str]:
    return list(dict.fromkeys(knob for line in table.lines for knob in line.point))


def grid_table(table: Table, column: str = "Avg") -> Table | None:
    """A two-knob sweep's grid as a table of its first row (lines: the first knob, columns: the second),
    mirror cells included; None for another number of knobs."""
    knobs = grid_knobs(table)
    if len(knobs) != 2 or not table.lines:
        return None
    cells = grid_cells(table, column)[table.lines[0].row]
    lines = list(dict.fromkeys(point[0] for point in cells))
    columns = list(dict.fromkeys(point[1] for point in cells))
    return Table(table.name, f"{table.name}: {table.formats[column].metric} over its grid", knobs[0], columns,
                 {c: table.formats[column] for c in columns},
                 [Line(value, {c: cells.get((value, c), Cell(())) for c in columns}) for value in lines],
                 across=knobs[1])


def row_curves(table: Table, path: Path, column: str = "Avg") -> Path:
    """A one-knob sweep's grid: a curve per row, mean ± std over seeds at each value of the knob."""
    knob = grid_knobs(table)[0]
    rows = grid_cells(table, column)
    values = list(dict.fromkeys(point for points in rows.values() for point in points))
    figure, plot = plt.subplots(figsize=(6.5, 4))
    for row, points in rows.items():
        cells = [points.get(value, Cell(())) for value in values]
        seed_free = any(cell.n for cell in cells) and all(cell.seed_free for cell in cells if cell.n)
        plot.errorbar(range(len(values)), [cell.mean for cell in cells],
                      yerr=[0.0 if math.isnan(cell.std) else cell.std for cell in cells], marker="o", capsize=3,
                      label=(row or "all trials") + (" (seed-free)" if seed_free else ""))
    plot.set_xticks(range(len(values)), [value[0] for value in values], rotation=45)
    plot.set_xlabel(knob)
    plot.set_ylabel(f"{table.formats[column].metric} (mean ± std over seeds)")
    plot.legend(fontsize=7)
    plot.set_title(f"{table.name}: {table.formats[column].metric} over its grid", fontsize=9)
    return save(figure, path)


def sweep_grid_plot(table: Table, path: Path, column: str = "Avg") -> Path | None:
    """Any sweep's grid (from its table's lines): over one grid knob a curve per row, over two a heatmap
    of the first row, mirror cells filled and marked; None without a grid (or with more than two knobs)."""
    if not any(line.cells[column].n for line in table.lines):
        return None
    knobs = grid_knobs(table)
    if len(knobs) == 1:
        return row_curves(table, path, column)
    pivot = grid_table(table, column)
    return heatmap(pivot, path) if pivot is not None else None
