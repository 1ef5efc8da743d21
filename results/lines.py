"""The lines of any sweep: one per row and grid point, in the plan's order, with its cells.

A trial's line is its row and its axes (the grid and sampled knobs' values of
its :class:`~results.record.TrialIdentity`, compared with their types: :func:`line_key`), so the seeds
of one grid point share a line and a sampled trial, whose axes are drawn for it alone, has a line of
its own; two points that print alike (``1`` and ``"1"``) are two lines, labelled apart. Lines come in
the plan's order (rows, then grid points), so the first line is the spec's
first row at its first grid point: the reference every other line is tested
against.

A cell holds the latest FINISHED run of each seed (:func:`latest_finished`, the
one definition that paper tables use too); a seed-free trial's one run stands
for every seed (:func:`cell_of` marks it), and where the spec declares two
symmetric grid axes, the mirror point of each point that ran gets a line of
its own, filled from that point and marked ``mirror``. The end-of-sweep
summary, ``reports.tables --sweep`` (and its CSV), the p-values of
``results.parquet`` and the grid plot are all made of these lines.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from results.ranking import best_first, frame_ranking
from results.record import axes_text, plain
from results.schema import FAILED, FINISHED, collected_layout
from results.significance import add_significance, line_p, reference_label
from results.table import COLUMNS, DASH, SWEEP_COLUMNS, Cell, Column, Line, Table

LINE = "line"
LINE_KEY = "line key"
SEEDS_FINISHED = "seeds finished"
FAILED_TRIALS = "failed"
COUNTS = (SEEDS_FINISHED, FAILED_TRIALS)
"""What each sweep line counts besides its cells (the summary shows them)."""


@dataclass(frozen=True)
class Grid:
    """A sweep's grid axes as its spec declares them: each axis's values in order, and its
    ``symmetric`` pair (mirror points run once). Lines are laid out in this order."""

    axes: Mapping[str, Sequence[Any]]
    symmetric: tuple[str, str] | None = None

    def rank(self, point: Mapping[str, Any]) -> tuple[int, ...]:
        """The position of a point (knob -> value) in the plan; values not in the grid last."""
        return tuple(list(values).index(point[axis]) if axis in point and point[axis] in values else len(values)
                     for axis, values in self.axes.items())


def line_label(row: str, axes: str) -> str:
    """``row [knob=value, ...]`` (either part alone where the other is empty; no ``|``, which would
    split a Markdown cell)."""
    if row and axes:
        return f"{row} [{axes}]"
    return row or axes or "(all trials)"


def mirror_point(point: Mapping[str, Any], pair: tuple[str, str] | None) -> dict[str, Any] | None:
    """The mirror of ``point`` under the symmetric axes ``pair`` (their values exchanged); None where
    there is no pair or the point is its own mirror."""
    if pair is None or not set(pair) <= set(point) or point[pair[0]] == point[pair[1]]:
        return None
    first, second = pair
    return {**point, first: point[second], second: point[first]}


def latest_finished(trials: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The FINISHED trials, the latest run of each point (``keys``) and seed, in ``trials``' order:
    a (row, seed, grid point) run again (a smoke run then a full one, a resumed sweep) counts once."""
    finished = trials[trials["status"] == FINISHED]
    latest = finished.sort_values(["start_time", "run_id"]).drop_duplicates([*keys, "seed"], keep="last")
    return finished[finished.index.isin(latest.index)]


def is_seed_free(trials: pd.DataFrame) -> bool:
    """Whether these runs are seed-free: each stands for every seed (tag ``sweep.seeds``)."""
    return bool(len(trials)) and "seeds" in trials.columns and bool(trials["seeds"].map(len).gt(0).all())


def cell_of(trials: pd.DataFrame, metric: str, mirror: bool = False) -> Cell:
    """One cell: ``metric`` of each of these (latest finished) runs."""
    values = tuple(trials[metric].dropna().astype(float)) if metric in trials.columns else ()
    return Cell(values, seed_free=is_seed_free(trials), mirror=mirror)


def grid_point(trial: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's grid point, knob -> value (also where the row's method lacks the knob)."""
    return dict(trial["grid_point"])


def line_key(row: str, point: Mapping[str, Any], sampled: Mapping[str, Any]) -> str:
    """What makes a line: its row and its grid and sampled values with their types (``1`` and ``"1"``, ``True``
    and ``1`` are other points), as canonical JSON."""
    return json.dumps([row, plain(point), plain(sampled)], sort_keys=True)


def _typed_text(axes: Mapping[str, Any]) -> str:
    """``knob=value, ...`` with each value as Python writes it (``x='1'`` beside ``x=1``)."""
    return ", ".join(f"{knob}={value!r}" for knob, value in axes.items())


def label_lines(trials: pd.DataFrame) -> pd.DataFrame:
    """``trials`` with a ``line key`` column (:func:`line_key`, what groups them into lines) and a ``line`` column,
    its label, the one place lines are named: ``row [knob=value, ...]``, or, where points that differ print
    alike, their values as Python writes them, so that no two lines share a label."""
    keys = [line_key(str(row), point, sampled)
            for row, point, sampled in zip(trials["row"], trials["grid_point"], trials["sampled_point"])]
    texts = {key: line_label(str(row), str(axes)) for key, row, axes in zip(keys, trials["row"], trials["axes"])}
    typed = {key: line_label(str(row), _typed_text({**point, **sampled}))
             for key, row, point, sampled in zip(keys, trials["row"], trials["grid_point"], trials["sampled_point"])}
    shared = {text for text, count in Counter(texts.values()).items() if count > 1}
    labels = [typed[key] if texts[key] in shared else texts[key] for key in keys]
    return trials.assign(**{LINE_KEY: pd.Series(keys, index=trials.index, dtype="object"),
                            LINE: pd.Series(labels, index=trials.index, dtype="object")})


def _mirror_line(line: Line, sampled: Mapping[str, Any], pair: tuple[str, str]) -> tuple[str, Line] | None:
    """(key, line) of the mirror point of ``line`` (whose sampled axes are ``sampled``), filled from it."""
    point = mirror_point(line.point, pair)
    if point is None:
        return None
    label = line_label(line.row, axes_text({**point, **sampled}))
    cells = {column: replace(cell, mirror=True) for column, cell in line.cells.items()}
    return line_key(line.row, point, sampled), Line(label, cells, row=line.row, point=point, lead=dict(line.lead))


def sweep_lines(trials: pd.DataFrame, formats: Mapping[str, Column], grid: Grid | None = None) -> list[Line]:
    """A line per row and typed grid point (:func:`line_key`) of a labelled (:func:`label_lines`) variant's
    trials, in the plan's order, with the mirror lines of ``grid``'s symmetric axes; each counts its finished
    and failed runs."""
    finished = latest_finished(trials, [LINE_KEY])
    first_trial: dict[str, str] = {}
    lines: dict[str, Line] = {}
    for key, group in trials.groupby(LINE_KEY, sort=False):
        done = finished[finished[LINE_KEY] == key]
        first = group.sort_values("trial_id").iloc[0]
        line = Line(
            str(first[LINE]), {c: cell_of(done, f.metric) for c, f in formats.items()}, row=str(first["row"]),
            point=grid_point(first),
            lead={SEEDS_FINISHED: len(done), FAILED_TRIALS: int((group["status"] == FAILED).sum())},
        )
        mirror = _mirror_line(line, first["sampled_point"], grid.symmetric) if grid and grid.symmetric else None
        for made_key, made in ((key, line), mirror or (None, None)):
            if made is not None and made_key not in lines:
                lines[made_key] = made
                first_trial[made_key] = str(first["trial_id"])
    labels = Counter(line.label for line in lines.values())
    for key, line in lines.items():  # a mirror line labelled as another point's line is: its values typed
        if labels[line.label] > 1 and any(cell.mirror for cell in line.cells.values()):
            line.label = line_label(line.row, _typed_text({**line.point, **json.loads(key)[2]}))
    rows = {row: rank for rank, row in enumerate(dict.fromkeys(
        lines[key].row for key in sorted(lines, key=lambda key: first_trial[key])))}
    rank = grid.rank if grid is not None else (lambda point: ())
    return [lines[key] for key in sorted(lines, key=lambda key: (rows[lines[key].row], rank(lines[key].point),
                                                                   first_trial[key]))]


def sweep_table(trials: pd.DataFrame, columns: Sequence[str] = SWEEP_COLUMNS, title: str | None = None,
                grid: Grid | None = None, reference: str | None = None) -> Table:
    """Any sweep variant's table: a line per row x grid point (a line per trial for sampled axes, sorted by
    the sweep's metric; mirror lines of symmetric axes where ``grid`` has them), cells mean ± std (n) over
    the latest FINISHED run of each seed, the best in bold, and each line's Avg tested against the line of the
    spec's ``reference`` row (:func:`results.significance.reference_label`: else the first line)."""
    trials = label_lines(trials)
    name, spec_hash = str(trials["experiment"].iloc[0]), str(trials["spec_hash"].iloc[0])
    formats = {column: COLUMNS[column] for column in columns}
    table = Table(f"{name}-{spec_hash}", title or f"{name} (spec hash {spec_hash})", "row [grid point]",
                  list(columns), formats, sweep_lines(trials, formats, grid))
    finished = latest_finished(trials, [LINE_KEY])
    for _, group in trials.groupby(LINE_KEY, sort=False):
        left_out = group.loc[~group.index.isin(finished.index), "status"].value_counts().sort_index()
        if len(left_out):
            counts = ", ".join(f"{n} {status}" for status, n in left_out.items())
            table.notes.append(f"{group[LINE].iloc[0]}: left out {counts} trial(s)")
    add_significance(table, reference=reference)
    metric, mode = frame_ranking(trials)
    sampled = list(trials["sampled_point"].iloc[0])
    if sampled:
        column = next((c for c, f in formats.items() if f.metric == metric), columns[0])
        table.lines = best_first(table.lines, lambda line: line.cells[column].mean if line.cells[column].n else None,
                                 mode)
        table.notes.append(f"sampled axes ({', '.join(sampled)}): one line per trial, best {metric} first")
    budget = ", ".join(sorted(set(trials["budget"].dropna().astype(str))))
    models = ", ".join(sorted(set(trials["model"].dropna().astype(str)))) if "model" in trials else DASH
    table.notes.insert(0, f"ours: {models}; budget {budget}; {len(finished)} finished of {len(trials)} trials")
    return table


NO_LAYOUT = ("the sweep's layout (grid order, symmetric axes, reference row) was not recorded: its parent run is "
             "from before sweeps recorded it (or the results were collected before: collect again); lines in the "
             "order they ran, no mirror lines, each tested against the first line")


def variant_table(trials: pd.DataFrame, columns: Sequence[str] = SWEEP_COLUMNS) -> Table:
    """A collected sweep variant's table, laid out by the layout its parent run recorded when the sweep started
    (:func:`results.schema.collected_layout`: the grid's order and symmetric pair, tested against its reference
    row, as the end-of-sweep summary does); where none was recorded, the lines that ran, in the plan's order,
    tested against the first, and a note that says so."""
    layout = collected_layout(trials)
    if layout is None:
        table = sweep_table(trials, columns)
        table.notes.append(NO_LAYOUT)
        return table
    return sweep_table(trials, columns, grid=Grid(layout.grid, layout.symmetric), reference=layout.reference)


def add_p_values(frame: pd.DataFrame, column: str = "Avg") -> pd.DataFrame:
    """``p_value`` and ``p_reference`` columns for collected trials: each trial's line's p in its variant's table
    (:func:`variant_table`, tested by :func:`results.significance.add_significance` as every table is), the
    reference line's own by the same rule against itself."""
    frame = frame.assign(p_value=pd.Series(np.nan, index=frame.index, dtype="float64"),
                         p_reference=pd.Series(pd.NA, index=frame.index, dtype="string"))
    if frame.empty or COLUMNS[column].metric not in frame.columns:
        return frame
    for _, variant in frame.groupby(["experiment", "spec_hash"], sort=False):
        table, layout = variant_table(variant, (column,)), collected_layout(variant)
        reference = table.p_reference or reference_label(table.lines, layout.reference if layout else None)
        cell = next(line.cells[column] for line in table.lines if line.label == reference)
        p_values = {**table.p_values, reference: line_p(cell, cell)}
        frame.loc[variant.index, "p_value"] = label_lines(variant)[LINE].map(p_values).astype(float)
        frame.loc[variant.index, "p_reference"] = reference
    return frame
