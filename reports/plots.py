"""PNG figures: heatmaps and curves of the grid tables, per-trial dev-score curves.

    python -m reports.plots [--results results.parquet] [--tracking-uri URI] [--out reports/out]
                            [--table NAME ... | --sweep NAME]

The ``kind: grid`` tables of ``table_specs.yaml`` become heatmaps over two
knobs (SG-BERT Figure 1's layer x pooling, ConSERT Figure 5's augmentation
pairs) or curves over one (temperature, batch size, few-shot size, queue
size), with the paper's figures marked where it reports them. The STS-B dev
Spearman of every trial over its steps comes from MLflow's metric history.
``--sweep NAME`` draws any collected sweep: its dev curves, and a curve (one
grid knob) or a heatmap (two) of its test average over its grid.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from reports.collect import DEFAULT_OUT  # noqa: E402
from reports.tables import DASH, NotCollected, Table, build_tables_for_cli, load_table_specs, sweep_variants  # noqa: E402
from sweep.engine import absolute_tracking_uri  # noqa: E402
from trainers.record import DEFAULT_TRACKING_URI  # noqa: E402

PAPER_COLOUR = "tab:red"


def _save(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


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
    for i, line in enumerate(table.lines):
        for j, column in enumerate(table.columns):
            text = f"{means[i, j]:.1f}" if math.isfinite(means[i, j]) else DASH
            if line.cells[column].mirror:  # symmetric axes: this cell shows its mirror's run
                text += "\n(mirror)"
                axes.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="grey", linestyle=":"))
            if column in line.paper:
                text += f"\npaper {line.paper[column]:.1f}"
                axes.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=PAPER_COLOUR, linewidth=2))
            dark = math.isfinite(means[i, j]) and means[i, j] < middle
            axes.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    figure.colorbar(image, ax=axes, label="Spearman x 100 (ours)")
    axes.set_title(_title(table), fontsize=8)
    return _save(figure, path)


def curve(table: Table, path: Path) -> Path:
    """Our first column over a one-knob grid (mean ± std), with the paper's figures where it gives them."""
    column = table.columns[0]
    positions = range(len(table.lines))
    cells = [line.cells[column] for line in table.lines]
    figure, axes = plt.subplots(figsize=(6.5, 4))
    axes.errorbar(positions, [c.mean for c in cells], yerr=[0.0 if math.isnan(c.std) else c.std for c in cells],
                  marker="o", capsize=3, label="ours (mean ± std over seeds)")
    paper = [(i, line.paper[column]) for i, line in enumerate(table.lines) if column in line.paper]
    if paper:
        axes.plot([i for i, _ in paper], [v for _, v in paper], marker="s", linestyle="--", color=PAPER_COLOUR,
                  label=f"paper ({table.paper_model})")
    axes.set_xticks(list(positions), [line.label for line in table.lines], rotation=45)
    axes.set_xlabel(table.corner)
    axes.set_ylabel(f"{column} Spearman x 100")
    axes.legend(fontsize=7)
    axes.set_title(_title(table), fontsize=8)
    return _save(figure, path)


def _title(table: Table) -> str:
    return f"{table.title}\n{table.notes[0]}" if table.notes else table.title


def dev_curves(results: pd.DataFrame, tracking_uri: str, experiment: str, path: Path) -> Path:
    """STS-B dev Spearman over the steps of every trial of ``experiment`` (from MLflow's history):
    one colour per row or grid point, one line style per seed."""
    client = MlflowClient(absolute_tracking_uri(tracking_uri))
    runs = results[results["experiment"] == experiment].sort_values(["row", "axes", "seed", "run_id"])
    runs = runs.assign(label=[r or a or t for r, a, t in zip(runs["row"], runs["axes"], runs["trial_id"])])
    labels = list(dict.fromkeys(runs["label"]))
    seeds = sorted(set(runs["seed"]))
    colours = plt.get_cmap("tab20" if len(labels) > 10 else "tab10")
    styles = ["-", "--", ":", "-."]
    figure, axes = plt.subplots(figsize=(9, 4.8))
    for _, run in runs.iterrows():
        history = sorted(client.get_metric_history(run["run_id"], "dev_spearman"), key=lambda m: m.step)
        if history:
            status = "" if run["status"] == "FINISHED" else f", {run['status']}"
            axes.plot([m.step for m in history], [m.value for m in history], marker=".",
                      color=colours(labels.index(run["label"]) % colours.N),
                      linestyle=styles[seeds.index(run["seed"]) % len(styles)],
                      label=f"{run['label']} (seed {run['seed']}{status})")
    axes.set_xlabel("step")
    axes.set_ylabel("STS-B dev Spearman x 100")
    axes.set_title(f"{experiment}: dev score per trial", fontsize=9)
    if axes.lines:
        axes.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 if len(axes.lines) <= 24 else 2)
    return _save(figure, path)


def grid_axes(trials: pd.DataFrame) -> list[str]:
    """The grid knobs of a sweep's trials: the knobs of their axes that are not sampled."""
    axes = [part.split("=", 1)[0] for part in str(trials["axes"].iloc[0]).split(", ") if "=" in part]
    sampled = {a.strip() for a in str(trials["sampled_axes"].iloc[0]).split(",")} if "sampled_axes" in trials else set()
    return [axis for axis in axes if axis not in sampled and axis in trials.columns]


def sweep_grid_plot(trials: pd.DataFrame, path: Path, metric: str = "test_avg_spearman") -> Path | None:
    """Any sweep's grid: over one grid knob a curve per row (mean ± std over seeds), over two a heatmap
    (of the first row); None when the sweep has no grid (or more than two knobs)."""
    finished = trials[trials["status"] == "FINISHED"]
    if trials.empty or finished.empty or metric not in finished:
        return None
    axes = grid_axes(trials)
    rows = list(dict.fromkeys(trials.sort_values("trial_id")["row"]))
    if len(axes) == 1:
        figure, plot = plt.subplots(figsize=(6.5, 4))
        values = list(dict.fromkeys(trials.sort_values("trial_id")[axes[0]]))
        for row in rows:
            cells = [finished[(finished["row"] == row) & (finished[axes[0]] == v)][metric].dropna().astype(float)
                     for v in values]
            plot.errorbar(range(len(values)), [c.mean() if len(c) else math.nan for c in cells],
                          yerr=[c.std() if len(c) > 1 else 0.0 for c in cells], marker="o", capsize=3,
                          label=row or "all trials")
        plot.set_xticks(range(len(values)), [str(v) for v in values], rotation=45)
        plot.set_xlabel(axes[0])
        plot.set_ylabel(f"{metric} (mean ± std over seeds)")
        plot.legend(fontsize=7)
    elif len(axes) == 2:
        first = finished[finished["row"] == rows[0]]
        lines, columns = (list(dict.fromkeys(trials.sort_values("trial_id")[a])) for a in axes)
        means = np.array([[first[(first[axes[0]] == i) & (first[axes[1]] == j)][metric].astype(float).mean()
                           for j in columns] for i in lines], dtype=float)
        figure, plot = plt.subplots(figsize=(1.3 * len(columns) + 2.5, 0.5 * len(lines) + 1.8))
        image = plot.imshow(np.ma.masked_invalid(means), cmap="viridis", aspect="auto")
        plot.set_xticks(range(len(columns)), [str(c) for c in columns])
        plot.set_yticks(range(len(lines)), [str(i) for i in lines])
        plot.set_xlabel(axes[1])
        plot.set_ylabel(axes[0])
        for i in range(len(lines)):
            for j in range(len(columns)):
                plot.text(j, i, f"{means[i, j]:.1f}" if math.isfinite(means[i, j]) else DASH,
                          ha="center", va="center", fontsize=7, color="white")
        figure.colorbar(image, ax=plot, label=f"{metric} (mean over seeds)")
    else:
        return None
    plot.set_title(f"{trials['experiment'].iloc[0]}: {metric} over its grid", fontsize=9)
    return _save(figure, path)


def plot_sweep(results: pd.DataFrame, name: str, tracking_uri: str, out: Path) -> list[Path]:
    """Dev curves and the grid plot of each variant of sweep ``name``."""
    written = []
    for trials in sweep_variants(results, name):
        stem = f"{name}-{trials['spec_hash'].iloc[0]}"
        written.append(dev_curves(trials, tracking_uri, name, out / f"{stem}_dev_curves.png"))
        grid = sweep_grid_plot(trials, out / f"{stem}_grid.png")
        written += [grid] if grid else []
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=DEFAULT_OUT)
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="For the dev curves' metric history.")
    parser.add_argument("--out", default="reports/out")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--table", action="append", dest="tables", help="Only these grid tables (repeatable).")
    which.add_argument("--sweep", help="Any collected sweep: its dev curves and a curve or heatmap of its grid.")
    args = parser.parse_args(argv)
    if not Path(args.results).is_file():
        print(f"{args.results}: no results file; run `python -m reports.collect` first", file=sys.stderr)
        return 2
    results = pd.read_parquet(args.results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sweep:
        try:
            print("\n".join(str(p) for p in plot_sweep(results, args.sweep, args.tracking_uri, out)))
        except NotCollected as error:
            print(error.args[0], file=sys.stderr)
            return 2
        return 0
    specs = load_table_specs()
    grids = [name for name, spec in specs.items() if spec.kind == "grid" and (not args.tables or name in args.tables)]
    written = []
    for table in build_tables_for_cli(results, grids, specs):
        if not any(cell.n for line in table.lines for cell in line.cells.values()):
            print(f"{table.name}: no results yet, no figure", file=sys.stderr)
            continue
        draw = heatmap if specs[table.name].across else curve
        written.append(draw(table, out / f"{table.name}.png"))
    if not args.tables:
        for experiment in sorted(results["experiment"].unique()):
            written.append(dev_curves(results, args.tracking_uri, experiment, out / f"{experiment}_dev_curves.png"))
    print("\n".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
