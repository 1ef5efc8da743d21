"""PNG figures: heatmaps of grid tables and per-trial dev-score curves.

    python -m reports.plots [--results results.parquet] [--tracking-uri URI] [--out reports/out]

The ``kind: grid`` tables of ``table_specs.yaml`` become heatmaps over two
knobs (SG-BERT Figure 1's layer x pooling, ConSERT Figure 5's augmentation
pairs) or curves over one (temperature, batch size, few-shot size, queue
size); curves of STS-B dev Spearman per trial come from MLflow's metric
history.
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
import pandas as pd  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from reports.collect import DEFAULT_OUT  # noqa: E402
from reports.tables import RenderedTable, build_tables, load_yaml, TABLE_SPECS  # noqa: E402
from sweep.engine import absolute_tracking_uri  # noqa: E402
from sweep.tracking import DEFAULT_TRACKING_URI  # noqa: E402


def _mean_of(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return math.nan


def heatmap(table: RenderedTable, path: Path) -> Path:
    values = [[_mean_of(cell) for cell in line[1:]] for line in table.lines]
    figure, axes = plt.subplots(figsize=(1.2 * len(table.header) + 2, 0.45 * len(values) + 1.5))
    image = axes.imshow(values, cmap="viridis", aspect="auto")
    axes.set_xticks(range(len(table.header) - 1), table.header[1:])
    axes.set_yticks(range(len(values)), [line[0] for line in table.lines])
    axes.set_xlabel(table.header[0].split(" \\ ")[1])
    axes.set_ylabel(table.header[0].split(" \\ ")[0])
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            if not math.isnan(value):
                axes.text(j, i, f"{value:.1f}", ha="center", va="center", color="white", fontsize=8)
    figure.colorbar(image, ax=axes, label="Spearman x 100")
    axes.set_title(table.title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def curve(table: RenderedTable, path: Path) -> Path:
    """One metric over one knob (temperature, batch size, queue size, few-shot size)."""
    points = [(line[0], _mean_of(line[1])) for line in table.lines]
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(range(len(points)), [y for _, y in points], marker="o")
    axes.set_xticks(range(len(points)), [x for x, _ in points], rotation=45)
    axes.set_xlabel(table.header[0])
    axes.set_ylabel(f"{table.header[1]} Spearman x 100")
    axes.set_title(table.title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def dev_curves(results: pd.DataFrame, tracking_uri: str, experiment: str, path: Path) -> Path:
    client = MlflowClient(absolute_tracking_uri(tracking_uri))
    runs = results[results["experiment"] == experiment]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for _, run in runs.iterrows():
        history = sorted(client.get_metric_history(run["run_id"], "dev_spearman"), key=lambda m: m.step)
        if history:
            axes.plot([m.step for m in history], [m.value for m in history], marker=".",
                      label=f"{run['row'] or run['trial_id']} (seed {run['seed']})")
    axes.set_xlabel("step")
    axes.set_ylabel("STS-B dev Spearman x 100")
    axes.set_title(f"{experiment}: dev score per trial", fontsize=9)
    axes.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=DEFAULT_OUT)
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--out", default="reports/out")
    args = parser.parse_args(argv)
    if not Path(args.results).is_file():
        print(f"{args.results}: no results file; run `python -m reports.collect` first", file=sys.stderr)
        return 2
    results = pd.read_parquet(args.results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = load_yaml(TABLE_SPECS)
    grids = [name for name, spec in specs.items() if spec["kind"] == "grid"]
    written = [
        (heatmap if specs[table.name].get("columns") else curve)(table, out / f"{table.name}.png")
        for table in build_tables(results, grids)
    ]
    for experiment in sorted(results["experiment"].unique()):
        written.append(dev_curves(results, args.tracking_uri, experiment, out / f"{experiment}_dev_curves.png"))
    print("\n".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
