"""PNG figures: heatmaps and curves of the paper grid tables, and any sweep's figures.

    python -m reports.plots [--results results.parquet] [--tracking-uri URI] [--out reports/out]
                            [--table NAME ... | --sweep NAME]

The ``kind: grid`` tables of ``table_specs.yaml`` become heatmaps over two
knobs (SG-BERT Figure 1's layer x pooling, ConSERT Figure 5's augmentation
pairs) or curves over one (temperature, batch size, few-shot size, queue
size), with the paper's figures marked where it reports them. The STS-B dev
Spearman of every trial over its steps comes from MLflow's metric history.
``--sweep NAME`` draws any collected sweep: its dev curves, and a curve (one
grid knob) or a heatmap (two) of its test average over its grid, drawn from
the lines of its table (:mod:`results.figures`, as the end-of-sweep summary).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from reports.cli import read_results, results_parser, run_command
from reports.paper_tables import build_tables_for_cli
from reports.sweeps import variant_tables
from reports.table_specs import load_table_specs
from results.figures import (
    DEV_CURVES,
    GRID_PLOT,
    PAPER_COLOUR,
    dev_curves,
    heatmap,
    legend_below,
    row_colours,
    save,
    show_span,
    sweep_grid_plot,
    title,
    trial_labels,
)
from results.names import UsageError
from results.record import DEFAULT_TRACKING_URI
from results.table import Table


def curve(table: Table, path: Path) -> Path:
    """Our first column over a one-knob grid (mean ± std), with the paper's figures where it gives them."""
    column = table.columns[0]
    positions = range(len(table.lines))
    cells = [line.cells[column] for line in table.lines]
    figure, axes = plt.subplots(figsize=(6.5, 4.5), layout="constrained")
    axes.errorbar(positions, [c.mean for c in cells], yerr=[0.0 if math.isnan(c.std) else c.std for c in cells],
                  marker="o", capsize=3, label="ours (mean ± std over seeds)")
    paper = [(i, line.paper[column]) for i, line in enumerate(table.lines) if column in line.paper]
    if paper:
        axes.plot([i for i, _ in paper], [v for _, v in paper], marker="s", linestyle="--", color=PAPER_COLOUR,
                  label=f"paper ({table.paper_model})" if table.paper_model else "paper")
    show_span(axes, [value for cell in cells for value in cell.values] + [value for _, value in paper])
    axes.set_xticks(list(positions), [line.label for line in table.lines], rotation=45)
    axes.set_xlabel(table.corner)
    axes.set_ylabel(f"{column} Spearman x 100")
    axes.set_title(title(table), fontsize=8, wrap=True)
    legend_below(figure, 1 + bool(paper))
    return save(figure, path)


def plot_sweep(results: pd.DataFrame, name: str, tracking_uri: str, out: Path) -> list[Path]:
    """Dev curves and the grid plot of each variant of sweep ``name``, a row in one colour in all of them."""
    written = []
    variants = variant_tables(results, name)
    colours = row_colours(trial_labels(pd.concat([trials for trials, _ in variants])))
    for trials, table in variants:
        stem = f"{name}-{trials['spec_hash'].iloc[0]}"
        written.append(dev_curves(trials, tracking_uri, name, out / DEV_CURVES.format(stem), colours))
        grid = sweep_grid_plot(table, out / GRID_PLOT.format(stem), colours=colours)
        written += [grid] if grid else []
    return written


def plot_tables(results: pd.DataFrame, names: Sequence[str] | None, tracking_uri: str, out: Path) -> list[Path]:
    """The paper grid tables' heatmaps and curves (those named, else all), then every sweep's dev curves
    (a row in one colour in all of them: each draws its colours from all of ``results``)."""
    specs = load_table_specs()
    grids = [name for name, spec in specs.items() if spec.kind == "grid"]
    not_grids = sorted(set(names or []) - set(grids))
    if not_grids:  # refused before anything is drawn, as reports.tables refuses an unknown table
        raise UsageError(f"--table {', '.join(not_grids)}: no such grid table; grid tables: {', '.join(grids)}")
    written = []
    for table in build_tables_for_cli(results, names or grids, specs):
        if not table.has_results():
            print(f"{table.name}: no results yet, no figure", file=sys.stderr)
            continue
        draw = heatmap if specs[table.name].across else curve
        written.append(draw(table, out / f"{table.name}.png"))
    if not names:
        for experiment in sorted(results["experiment"].unique()):
            written.append(dev_curves(results, tracking_uri, experiment, out / DEV_CURVES.format(experiment)))
    return written


def draw(args: argparse.Namespace) -> int:
    results = read_results(args.results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sweep:
        written = plot_sweep(results, args.sweep, args.tracking_uri, out)
    else:
        written = plot_tables(results, args.tables, args.tracking_uri, out)
    print("\n".join(str(p) for p in written))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = results_parser("python -m reports.plots", __doc__, "Only these grid tables (repeatable).",
                            "Any collected sweep: its dev curves and a curve or heatmap of its grid.")
    parser.add_argument("--out", default="reports/out")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="For the dev curves' metric history.")
    return run_command(parser, argv, draw)


if __name__ == "__main__":
    sys.exit(main())
