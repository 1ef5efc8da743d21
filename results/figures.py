"""PNG figures drawn from lines: heatmaps of two-knob grids, any sweep's grid plot, dev-score curves.

The end-of-sweep summary logs a sweep's dev curves and grid plot on its parent
run; ``reports.plots`` draws the same for any collected sweep, and the paper
tables' heatmaps. All of them are drawn from :class:`results.table.Table` lines,
so a mirror cell of symmetric axes is filled and marked "(mirror)" and a
seed-free cell "(seed-free)" in every heatmap, as in the tables.

A row keeps one colour in every figure of a report: :func:`row_colours` gives
each row (and each line of a grid) its own colour of matplotlib's colour cycle,
once over all the report's trials. Score plots show at least :data:`MIN_SPAN`
points on their y-axis, so that a tenth of a point looks as small as it is, and
every seed's score; their legends sit below the axes, inside the figure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from results.importance import SEED_NOISE, Importance  # noqa: E402
from results.lines import LINE, is_seed_free, label_lines, line_label  # noqa: E402
from results.reader import read_client  # noqa: E402
from results.record import Metric  # noqa: E402  # noqa: E402
from results.schema import FINISHED  # noqa: E402
from results.significance import is_significant, p_text  # noqa: E402
from results.table import DASH, Cell, Line, Table  # noqa: E402
from trainers.methods.baseline import METHOD as UNTUNED  # noqa: E402

PAPER_COLOUR = "tab:red"
DEV_CURVES = "{}_dev_curves.png"
GRID_PLOT = "{}_grid.png"
"""File names of a sweep's figures (``{}``: the sweep, or NAME-HASH of one variant)."""
DPI = 120
LEGEND_FONTSIZE = 8
MIN_SPAN = 5.0
"""The least y-range of a score plot, in points of Spearman x 100."""


def save(figure: Figure, path: Path) -> Path:
    if figure.get_layout_engine() is None:  # a figure made without one (reports.analyses) is laid out here
        figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


# ---------------------------------------------------------------- what every score plot shares


def row_colours(labels: Iterable[str]) -> dict[str, str]:
    """One colour per label, never two labels alike: matplotlib's colour cycle in the labels' order, or as
    many evenly spaced colours of ``turbo`` where there are more labels than the cycle holds."""
    unique = list(dict.fromkeys(labels))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    palette = cycle if len(unique) <= len(cycle) else colormaps["turbo"](np.linspace(0, 1, len(unique)))
    return {label: to_hex(colour) for label, colour in zip(unique, palette)}


def trial_labels(trials: pd.DataFrame) -> list[str]:
    """The labels that take a colour: each trial's row, and its line where that differs (a grid point);
    sweeps in the order they started, each in its plan's (trial id) order."""
    started = trials.groupby("experiment")["start_time"].transform("min").rename("experiment_start")
    ordered = label_lines(trials.join(started).sort_values(["experiment_start", "experiment", "trial_id"]))
    return [label for row, line in zip(ordered["row"], ordered[LINE]) for label in (line_label(str(row), ""), line)]


def table_labels(table: Table) -> list[str]:
    """:func:`trial_labels` of a sweep table: each line's row, then the line, in the plan's order."""
    return [label for line in table.lines for label in (line_label(line.row, ""), line.label)]


def show_span(axes: Axes, values: Sequence[float]) -> None:
    """A y-range that holds every value and spans at least :data:`MIN_SPAN` points around them."""
    finite = [value for value in values if math.isfinite(value)]
    if finite and max(finite) - min(finite) < MIN_SPAN:
        middle = (max(finite) + min(finite)) / 2
        axes.set_ylim(middle - MIN_SPAN / 2, middle + MIN_SPAN / 2)


def legend_below(figure: Figure, entries: int) -> None:
    """The figure's legend under its axes, inside the figure (its layout must be constrained): in as many
    columns (3 at most) as its width allows, the figure made taller by its rows."""
    if not entries:
        return
    for columns in range(min(entries, 3), 0, -1):
        legend = figure.legend(loc="outside lower center", ncols=columns, fontsize=LEGEND_FONTSIZE)
        if columns == 1 or legend.get_window_extent(figure.canvas.get_renderer()).width <= figure.bbox.width:
            break
        legend.remove()
    figure.set_figheight(figure.get_figheight() + math.ceil(entries / columns) * LEGEND_FONTSIZE * 1.5 / 72)


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
    figure, axes = plt.subplots(figsize=(1.3 * len(table.columns) + 2.5, 0.5 * len(table.lines) + 1.8),
                                layout="constrained")
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
    axes.set_title(title(table), fontsize=8, wrap=True)
    return save(figure, path)


def seeds_text(runs: pd.DataFrame) -> str:
    """"seed 1", "seeds 1, 2, 3" or "seed-free", with the runs that did not finish (", 1 FAILED")."""
    seeds = sorted(set(runs["seed"]))
    unfinished = runs.loc[runs["status"] != FINISHED, "status"].value_counts()
    which = "seed-free" if is_seed_free(runs) else f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    return which + "".join(f", {count} {status}" for status, count in unfinished.items())


def seed_histories(client: MlflowClient, runs: pd.DataFrame) -> pd.DataFrame:
    """Step x run: the STS-B dev score of each run over its steps (a reused run's from the run that
    trained it, its own run holding the final report only); empty where none logged any."""
    histories = {}
    for _, run in runs.iterrows():
        trained_by = run.get("reused_from") or run["run_id"]
        history = client.get_metric_history(trained_by, Metric.DEV)
        if history:
            histories[run["run_id"]] = pd.Series({m.step: m.value for m in history}, dtype=float)
    return pd.DataFrame(histories).sort_index()


def draw_trained(axes: Axes, histories: pd.DataFrame, label: str, colour: str) -> list[float]:
    """A line's mean over its seeds at each step, the seeds' min-max shaded; every seed's scores."""
    mean = histories.mean(axis=1)
    axes.plot(mean.index, mean.to_numpy(), marker=".", color=colour, label=label)
    if histories.shape[1] > 1:
        axes.fill_between(histories.index, histories.min(axis=1), histories.max(axis=1), color=colour, alpha=0.2,
                          linewidth=0)
    return histories.stack().tolist()


def draw_untuned(axes: Axes, runs: pd.DataFrame, label: str, colour: str) -> list[float]:
    """An untuned row, which has no steps, as a dashed reference line at its dev score (mean over its
    seeds, their min-max shaded); every seed's score."""
    scores = runs[Metric.BEST_DEV].dropna().astype(float)
    if scores.empty:
        return []
    axes.axhline(scores.mean(), color=colour, linestyle="--", label=f"{label}: {scores.mean():.2f}")
    if scores.max() > scores.min():
        axes.axhspan(scores.min(), scores.max(), color=colour, alpha=0.15, linewidth=0)
    return scores.tolist()


def dev_curves(trials: pd.DataFrame, tracking_uri: str, experiment: str, path: Path,
               colours: Mapping[str, str] | None = None) -> Path:
    """STS-B dev Spearman over the steps of every line (row and grid point) of ``experiment``, from
    MLflow's history: the mean over its seeds, their min-max shaded; untuned rows (method ``none``) as
    dashed reference lines at their score. ``colours`` (label -> colour) is shared by every figure of a
    report; by default :func:`row_colours` of all of ``trials``, so that figures drawn from one frame agree."""
    colours = colours or row_colours(trial_labels(trials))
    client = read_client(tracking_uri)
    runs = label_lines(trials[trials["experiment"] == experiment].sort_values(["trial_id", "run_id"]))  # plan order
    figure, axes = plt.subplots(figsize=(9, 5.4), layout="constrained")
    scores: list[float] = []
    for label, line in runs.groupby(LINE, sort=False):
        text = f"{label} ({seeds_text(line)})"
        if (line["method"] == UNTUNED.name).all():
            scores += draw_untuned(axes, line, text, colours[label])
        elif not (histories := seed_histories(client, line)).empty:
            scores += draw_trained(axes, histories, text, colours[label])
    show_span(axes, scores)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("step")
    axes.set_ylabel("STS-B dev Spearman x 100")
    axes.set_title(f"{experiment}: STS-B dev score per line\n(solid: mean over seeds, shaded: their min-max; "
                   "dashed: untuned, no training)", fontsize=9, wrap=True)
    legend_below(figure, len(axes.get_legend_handles_labels()[1]))
    return save(figure, path)


# ---------------------------------------------------------------- importance


NOISE_COLOUR, ABOVE_COLOUR, BELOW_COLOUR = "tab:grey", "tab:blue", "tab:orange"


def importance_bars(result: Importance, heading: str, path: Path) -> Path:
    """One horizontal bar per effect, its share of the metric's variance; the seed noise in grey, effects
    above it (F test significant) in blue, the others in orange, each with its F and p."""
    effects = list(reversed(result.effects))  # the first effect on top
    figure, axes = plt.subplots(figsize=(7, 0.45 * len(effects) + 1.6), layout="constrained")
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
    axes.set_title(f"{heading}\n{result.method}", fontsize=8, wrap=True)
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


def row_curves(table: Table, path: Path, column: str = "Avg", colours: Mapping[str, str] | None = None) -> Path:
    """A one-knob sweep's grid: a curve per row, mean ± std over seeds at each value of the knob, in the
    row's colour (``colours``, shared by the report's figures; by default :func:`row_colours` of the table)."""
    colours = colours or row_colours(table_labels(table))
    knob = grid_knobs(table)[0]
    rows = grid_cells(table, column)
    values = list(dict.fromkeys(point for points in rows.values() for point in points))
    figure, plot = plt.subplots(figsize=(6.5, 4.5), layout="constrained")
    scores: list[float] = []
    for row, points in rows.items():
        cells = [points.get(value, Cell(())) for value in values]
        seed_free = any(cell.n for cell in cells) and all(cell.seed_free for cell in cells if cell.n)
        plot.errorbar(range(len(values)), [cell.mean for cell in cells],
                      yerr=[0.0 if math.isnan(cell.std) else cell.std for cell in cells], marker="o", capsize=3,
                      color=colours[line_label(row, "")],
                      label=line_label(row, "") + (" (seed-free)" if seed_free else ""))
        scores += [value for cell in cells for value in cell.values]
    show_span(plot, scores)
    plot.set_xticks(range(len(values)), [value[0] for value in values], rotation=45)
    plot.set_xlabel(knob)
    plot.set_ylabel(f"{table.formats[column].metric} (mean ± std over seeds)")
    plot.set_title(f"{table.name}: {table.formats[column].metric} over its grid", fontsize=9, wrap=True)
    legend_below(figure, len(rows))
    return save(figure, path)


def sweep_grid_plot(table: Table, path: Path, column: str = "Avg",
                    colours: Mapping[str, str] | None = None) -> Path | None:
    """Any sweep's grid (from its table's lines): over one grid knob a curve per row (in its ``colours``),
    over two a heatmap of the first row, mirror cells filled and marked; None without a grid (or with
    more than two knobs)."""
    if not any(line.cells[column].n for line in table.lines):
        return None
    knobs = grid_knobs(table)
    if len(knobs) == 1:
        return row_curves(table, path, column, colours)
    pivot = grid_table(table, column)
    return heatmap(pivot, path) if pivot is not None else None
