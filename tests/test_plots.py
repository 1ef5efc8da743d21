"""The figures a report shows, inspected through matplotlib's objects: one colour per row across all of them,
untuned rows as reference lines, integer steps, a y-range that shows the seeds' spread, readable legends.

Synthetic trials frames (reports.collect's schema, as tests/test_results.py builds them) whose dev histories
are logged into an MLflow store of the test's own; no Ray, no training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from mlflow import MlflowClient

import results.figures as figures
from reports.plots import plot_sweep
from results.figures import MIN_SPAN, dev_curves, legend_below, row_colours
from tests.conftest import write_spec
from tests.test_results import trials
from trainers.metrics import Metric

STEPS = (20, 40)  # as the tour's smoke runs: matplotlib's own ticks would be 20, 22.5, 25...
FIRST_SIMCSE = {1: (71.2, 71.1), 2: (71.5, 71.3), 3: (70.9, 71.0)}  # seed -> dev at STEPS, a 0.6-point spread
TAU = {1: (69.0, 64.0), 2: (68.5, 66.0), 3: (67.0, 63.5)}  # a spread wider than MIN_SPAN
GRID = {(0.05, 1): (60.0, 61.0), (0.05, 2): (60.5, 61.5), (0.1, 1): (58.0, 58.5), (0.1, 2): (59.0, 58.0)}


@dataclass
class PlotData:
    uri: str
    frame: pd.DataFrame  # the campaign's trials: sweeps "first" and "second"
    grid: pd.DataFrame  # a one-knob grid sweep, "temperatures"
    untuned: dict[str, dict[str, list[float]]]  # sweep -> untuned row -> its dev score of each seed


def log_histories(client: MlflowClient, experiment: str, histories: list[tuple[float, float]]) -> list[str]:
    """One run per history, its dev score at STEPS; the run ids."""
    experiment_id = client.create_experiment(experiment)
    run_ids = []
    for history in histories:
        run_id = client.create_run(experiment_id).info.run_id
        for step, value in zip(STEPS, history):
            client.log_metric(run_id, Metric.DEV, value, step=step)
        run_ids.append(run_id)
    return run_ids


def with_runs(frame: pd.DataFrame, row: str, run_ids: list[str], column: str = "run_id") -> pd.DataFrame:
    rows = frame.index[frame["row"] == row]
    frame.loc[rows, column] = run_ids
    return frame


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> PlotData:
    """Sweep "first": two untuned rows (seed-free, one run each) and SimCSE over seeds 1-3. Sweep "second":
    the untuned row run for seeds 1 and 2 (its scores differ), SimCSE reused from "first", and "simcse
    tau=0.1". As in the tour, SimCSE is the third row of one sweep and the second of the other."""
    folder = tmp_path_factory.mktemp("plots")
    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(uri)
    untuned = {"name": "untuned", "set": {"method": "none"}}
    first_path = write_spec(folder, {"name": "first", "method": "simcse", "seeds": [1, 2, 3], "rows": [
        untuned, {"name": "untuned mean", "set": {"method": "none", "pooling": "mean"}}, {"name": "simcse"}]})
    second_path = write_spec(folder, {"name": "second", "method": "simcse", "seeds": [1, 2, 3], "rows": [
        untuned, {"name": "simcse"}, {"name": "simcse tau=0.1", "set": {"temperature": 0.1}}]})
    first = trials(first_path, [("untuned", {}, 1, "FINISHED", 60.0), ("untuned mean", {}, 1, "FINISHED", 62.5)]
                   + [("simcse", {}, seed, "FINISHED", 62.0) for seed in FIRST_SIMCSE], seeds=(1, 2, 3))
    second = trials(second_path, [("untuned", {}, 1, "FINISHED", 59.5), ("untuned", {}, 2, "FINISHED", 60.5)]
                    + [(row, {}, seed, "FINISHED", 62.0) for row in ("simcse", "simcse tau=0.1") for seed in TAU])
    second["start_time"] += pd.Timedelta(minutes=5)  # "second" ran after "first"
    simcse_runs = log_histories(client, "first", list(FIRST_SIMCSE.values()))
    with_runs(first, "simcse", simcse_runs)
    with_runs(second, "simcse", simcse_runs, "reused_from")  # the runs that trained them hold the history
    with_runs(second, "simcse tau=0.1", log_histories(client, "second", list(TAU.values())))
    frame = pd.concat([first, second], ignore_index=True).fillna({"reused_from": ""})
    frame.loc[frame["row"].str.startswith("untuned"), "method"] = "none"

    grid_path = write_spec(folder, {"name": "temperatures", "method": "simcse", "seeds": [1, 2],
                                    "grid": {"temperature": [0.05, 0.1]},
                                    "rows": [{"name": "untuned", "set": {"method": "none"}}, {"name": "simcse"}]})
    grid = trials(grid_path, [("untuned", {"temperature": t}, 1, "FINISHED", 60.0) for t in (0.05, 0.1)]
                  + [("simcse", {"temperature": t}, seed, "FINISHED", 62.0 + seed) for t, seed in GRID], seeds=(1, 2))
    grid.loc[grid["row"] == "untuned", "method"] = "none"
    # A second variant of the sweep (another spec hash, run later) with the SimCSE row alone.
    variant = trials(grid_path, [("simcse", {"temperature": t}, 1, "FINISHED", 63.0) for t in (0.05, 0.1)])
    variant = variant.assign(spec_hash="h2", start_time=variant["start_time"] + pd.Timedelta(minutes=5))
    grid = pd.concat([grid, variant], ignore_index=True)
    with_runs(grid, "simcse", log_histories(client, "temperatures", list(GRID.values()) + [(62.0, 63.0)] * 2))
    scores = frame[frame["method"] == "none"].groupby(["experiment", "row"])[Metric.BEST_DEV].agg(list)
    return PlotData(uri, frame, grid, {sweep: dict(scores[sweep]) for sweep in ("first", "second")})


@pytest.fixture
def drawn(monkeypatch):
    """The figures the code under test saves, by file name, kept open to be inspected (after they were
    saved, so their layout is the one in the PNG)."""
    close, save = plt.close, figures.save
    kept: dict[str, Figure] = {}

    def keep(figure: Figure, path: Path) -> Path:
        kept[path.name] = figure
        return save(figure, path)

    monkeypatch.setattr(plt, "close", lambda figure=None: None)
    monkeypatch.setattr(figures, "save", keep)
    yield kept
    close("all")


def row_of(label: str) -> str:
    """The row (and grid point) a legend label names: "simcse (seeds 1, 2, 3)" -> "simcse"."""
    return label.split(" (")[0].split(":")[0]


def shown_lines(figure: Figure) -> list[tuple[str, Line2D]]:
    """(legend label, line) of each line the legend names: plotted lines, and the data line of an error bar."""
    lines = [(line.get_label(), line) for axes in figure.axes for line in axes.get_lines()]
    lines += [(bars.get_label(), bars.lines[0]) for axes in figure.axes for bars in axes.containers]
    return [(label, line) for label, line in lines if not label.startswith("_")]


def colour_of_each_row(kept: dict[str, Figure]) -> dict[str, set[str]]:
    """Row -> the colours its lines have in all the figures."""
    colours: dict[str, set[str]] = {}
    for figure in kept.values():
        for label, line in shown_lines(figure):
            colours.setdefault(row_of(label), set()).add(to_hex(line.get_color()))
    return colours


def cycle() -> list[str]:
    """matplotlib's colour cycle, as hex."""
    return [to_hex(colour) for colour in plt.rcParams["axes.prop_cycle"].by_key()["color"]]


def the_axes(figure: Figure):
    (axes,) = figure.axes
    return axes


def test_a_row_has_one_colour_in_every_figure_of_a_report_and_no_other_row_has_it(report, drawn, tmp_path):
    for sweep in ("first", "second"):  # as reports.paper draws a campaign's curves: each from all its trials
        dev_curves(report.frame, report.uri, sweep, tmp_path / f"dev-{sweep}.png")
    colours = colour_of_each_row(drawn)
    rows = ["untuned", "untuned mean", "simcse", "simcse tau=0.1"]  # in the order they first ran
    assert set(colours) == set(rows)
    assert all(len(shades) == 1 for shades in colours.values()), colours
    assert len({shade for shades in colours.values() for shade in shades}) == len(colours), colours
    assert [colours[row].pop() for row in rows] == cycle()[:4]  # matplotlib's cycle


def test_untuned_rows_are_reference_lines_at_their_score_with_their_seeds_spread(report, drawn, tmp_path):
    for sweep, rows in report.untuned.items():
        dev_curves(report.frame, report.uri, sweep, tmp_path / f"dev-{sweep}.png")
        axes = the_axes(drawn[f"dev-{sweep}.png"])
        for row, scores in rows.items():
            (reference,) = [line for line in axes.get_lines() if row_of(line.get_label()) == row]
            mean = sum(scores) / len(scores)
            assert list(reference.get_xdata()) == [0, 1] and list(reference.get_ydata()) == [mean, mean]  # axhline
            assert reference.get_linestyle() == "--" and f": {mean:.2f}" in reference.get_label()
        spread = [(min(scores), max(scores)) for scores in rows.values() if len(set(scores)) > 1]
        assert [(patch.get_y(), patch.get_y() + patch.get_height()) for patch in axes.patches] == spread  # axhspan
    assert "untuned (seed-free): 70.00" in [line.get_label() for line in the_axes(drawn["dev-first.png"]).get_lines()]


def test_steps_are_integers_and_the_y_range_shows_every_seed_over_at_least_the_minimum_span(report, drawn, tmp_path):
    for sweep in ("first", "second"):
        dev_curves(report.frame, report.uri, sweep, tmp_path / f"dev-{sweep}.png")
        axes = the_axes(drawn[f"dev-{sweep}.png"])
        ticks = [tick for tick in axes.get_xticks() if axes.get_xlim()[0] <= tick <= axes.get_xlim()[1]]
        assert len(ticks) >= 2 and all(float(tick).is_integer() for tick in ticks), ticks
        low, high = axes.get_ylim()
        seeds = FIRST_SIMCSE if sweep == "first" else {**FIRST_SIMCSE, **{-s: v for s, v in TAU.items()}}
        values = [value for history in seeds.values() for value in history]
        values += [score for scores in report.untuned[sweep].values() for score in scores]
        assert high - low >= MIN_SPAN and low <= min(values) and max(values) <= high, (low, high, values)
    # Several seeds: their mean, the min-max shaded (first's SimCSE).
    first = the_axes(drawn["dev-first.png"])
    (simcse,) = [line for line in first.get_lines() if row_of(line.get_label()) == "simcse"]
    means = [sum(history[i] for history in FIRST_SIMCSE.values()) / 3 for i in range(len(STEPS))]
    assert list(simcse.get_xdata()) == list(STEPS) and list(simcse.get_ydata()) == pytest.approx(means)
    (band,) = first.collections
    ys = band.get_paths()[0].vertices[:, 1]
    everything = [value for history in FIRST_SIMCSE.values() for value in history]
    assert (ys.min(), ys.max()) == pytest.approx((min(everything), max(everything)))


def readable_legend_below_the_axes(figure: Figure) -> list[str]:
    """The legend's texts, once it is checked: 8 pt or more, inside the figure, below the axes."""
    (legend,) = figure.legends + [axes.get_legend() for axes in figure.axes if axes.get_legend()]
    assert min(text.get_fontsize() for text in legend.get_texts()) >= 8
    box, inside = legend.get_window_extent(), figure.bbox
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, (box, inside)
    assert box.y1 <= the_axes(figure).get_window_extent().y0, "the legend hides no curve: it sits below the axes"
    return [text.get_text() for text in legend.get_texts()]


def test_legends_are_readable_and_inside_the_figure(report, drawn, tmp_path):
    dev_curves(report.frame, report.uri, "second", tmp_path / "dev.png")
    texts = readable_legend_below_the_axes(drawn["dev.png"])
    assert {row_of(text) for text in texts} == {"untuned", "simcse", "simcse tau=0.1"}
    # Many long labels (a grid's lines): in fewer columns, the figure made taller, still inside it.
    labels = [f"pooling=mean, pooling_layer={layer} (seed-free): -23.91" for layer in range(14)]
    heights = []
    for legend in (False, True):
        figure, axes = plt.subplots(figsize=(9, 5.4), layout="constrained")
        for layer, label in enumerate(labels):
            axes.axhline(layer, label=label)
        if legend:
            legend_below(figure, len(labels))
        figures.save(figure, tmp_path / f"legend-{legend}.png")
        heights.append(axes.get_window_extent().height)
    assert readable_legend_below_the_axes(figure) == labels
    assert heights[1] >= 0.9 * heights[0], heights  # the curves keep the room they have without a legend


def test_a_sweeps_dev_curves_and_grid_plots_share_its_rows_colours(report, drawn, tmp_path):
    """reports.plots --sweep: the dev curves and grid plot of each of its two variants."""
    written = plot_sweep(report.grid, "temperatures", report.uri, tmp_path)
    assert sorted(path.name for path in written) == sorted(drawn) and len(drawn) == 4
    colours = colour_of_each_row(drawn)
    assert {"untuned [temperature=0.05]", "simcse [temperature=0.1]", "simcse", "untuned"} <= set(colours)
    assert all(len(shades) == 1 for shades in colours.values()), colours
    assert len({shade for shades in colours.values() for shade in shades}) == len(colours), colours
    grid_plot = drawn["temperatures-h_grid.png"]
    low, high = the_axes(grid_plot).get_ylim()
    averages = report.grid.loc[report.grid["spec_hash"] == "h", "test_avg_spearman"]
    assert high - low >= MIN_SPAN and low <= averages.min() and averages.max() <= high, (low, high)


def test_row_colours_are_the_colour_cycle_then_as_many_distinct_colours_as_rows():
    assert list(row_colours(["a", "b", "a"]).values()) == cycle()[:2]
    many = row_colours(f"row {i}" for i in range(3 * len(cycle())))
    assert len(set(many.values())) == 3 * len(cycle())
