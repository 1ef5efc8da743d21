"""The papers' tables built from collected results: our cells beside the papers' figures.

Cells are mean ± std over seeds ("seed-free": one run of a configuration that
cannot depend on the seed; "mirror": filled from the mirror cell of symmetric
grid axes), made by the same functions as any sweep's lines
(:mod:`results.lines`): only FINISHED trials count, and where a (row, seed,
grid point) ran more than once, the latest run. Under each of our lines comes
the paper's figure and our difference from it. Lines, grid cells or seeds the
sweep has not produced show as "–" and are listed in a :class:`MissingResults`
warning; a partial sweep still renders. Row tables test each row against
their reference row over seeds (:func:`results.significance.add_significance`).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Mapping, Sequence

import pandas as pd

from reports.table_specs import (
    COMPOSED_AVERAGE,
    ENCODER_ANALYSES,
    PAPER_NUMBERS,
    PaperSource,
    TableSpec,
    load_table_specs,
    load_yaml,
)
from results.lines import cell_of, latest_finished, mirror_point
from results.schema import FINISHED, IDENTITY
from results.significance import add_significance
from results.table import COLUMNS, DASH, DELTA, Cell, Column, Line, Table
from sweep.spec.budget import BUDGETS
from trainers.models.pretrained import BUNDLED_MODEL

PAPER_MODELS = {
    "bert-base-uncased": "bert-base",
    "bert-large-uncased": "bert-large",
    "prajjwal1/bert-tiny": "bert-tiny",
    "prajjwal1/bert-mini": "bert-mini",
    "prajjwal1/bert-small": "bert-small",
    "roberta-base": "roberta-base",
    "FacebookAI/roberta-base": "roberta-base",
    "roberta-large": "roberta-large",
    "FacebookAI/roberta-large": "roberta-large",
    "sentence-transformers/bert-base-nli-mean-tokens": "sbert-base",
    "sentence-transformers/bert-large-nli-mean-tokens": "sbert-large",
    "bert-base-multilingual-cased": "mbert",
    "bert-base-multilingual-uncased": "mbert",
}
"""Our ``model`` knob value -> the papers' model key: when every trial of a
table ran one of these, the paper's rows for that model are compared with;
otherwise the table spec's ``paper.model``."""


NO_BUDGET = "none"
"""The budget tag of a trial that ran at its spec's own steps, seeds and evaluation subset."""


def _recorded(trials: pd.DataFrame, column: str) -> list[str]:
    return sorted({str(v) for v in trials[column].dropna() if str(v)}) if column in trials.columns else []


def evaluation_subset(trials: pd.DataFrame) -> str:
    """Which STS pairs the trials scored (their ``eval_max_pairs``; 0 or unset: every pair)."""
    if trials.empty:
        return "no trials yet"
    if "eval_max_pairs" not in trials.columns:
        return "not recorded"
    values = sorted({int(v) for v in trials["eval_max_pairs"].dropna()})
    return "; ".join(f"the first {v} pairs of each STS set" if v else "all pairs of each STS set"
                     for v in values) or "all pairs of each STS set"


def budget_text(trials: pd.DataFrame) -> str:
    """The budgets the trials ran under and what each capped (``sweep.budget``)."""
    def one(name: str) -> str:
        if name in BUDGETS:
            return f"{name} (caps {BUDGETS[name].caps()})"
        return f"{name} (the specs' own steps, seeds and evaluation subset)" if name == NO_BUDGET else name
    return "; ".join(one(name) for name in _recorded(trials, "budget")) or "not recorded"


def layers_kept(trials: pd.DataFrame) -> list[int]:
    """The encoder layers the trials kept where they cut the model (``model_layers``; 0 or unset: all)."""
    return sorted({int(v) for v in trials["model_layers"].dropna() if v}) if "model_layers" in trials.columns else []


def model_text(trials: pd.DataFrame) -> str:
    """The models the trials ran (the bundled one named as such), with the layers kept where cut."""
    def one(model: str) -> str:
        return f"{model} (shipped with the package; nothing downloaded)" if model == BUNDLED_MODEL else model
    cut = layers_kept(trials)
    layers = f"; first {', '.join(map(str, cut))} layers" if cut else ""
    return ("; ".join(one(model) for model in _recorded(trials, "model")) or "not recorded") + layers


def precision_text(trials: pd.DataFrame, used: str | None = None) -> str:
    """The precisions the trials asked for (knobs) and, where given, what their runs record they used (``auto``
    resolved on the trial's node: ``used``, read from the runs' tags)."""
    asked = "; ".join(f"{kind} {', '.join(values)}" for kind, values in
                      (("train", _recorded(trials, "train_precision")),
                       ("evaluation", _recorded(trials, "eval_precision"))) if values)
    return f"asked {asked or 'not recorded'}" + (f"; used {used}" if used else "")


def how_made(trials: pd.DataFrame, used_precision: str | None = None) -> list[str]:
    """How the trials' numbers were made, from what they recorded: evaluation subset, budget, model, precision."""
    return [f"evaluation subset: {evaluation_subset(trials)}", f"budget: {budget_text(trials)}",
            f"model: {model_text(trials)}", f"precision: {precision_text(trials, used_precision)}"]


def subset_caveats(trials: pd.DataFrame) -> list[str]:
    """Where the trials scored part of the STS sets, or ran under a budget: their scores are not the papers'."""
    pairs = sorted({int(v) for v in trials["eval_max_pairs"].dropna() if v}) if "eval_max_pairs" in trials else []
    caveats = [f"scores are Spearman correlations on the first {', '.join(map(str, pairs))} pairs of each STS set "
               "(eval_max_pairs), not on the whole sets the papers report: compare them with each other, "
               "not with the papers' figures"] if pairs else []
    budgets = [name for name in _recorded(trials, "budget") if name in BUDGETS]
    caveats += [f"budget {name} caps {BUDGETS[name].caps()}: a smoke-sized run, not the paper's training"
                for name in budgets]
    return caveats


class MissingResults(UserWarning):
    """Lines, grid cells or seeds a table expects that the results do not have."""


def texts(values: Sequence[Any]) -> list[str]:
    """Each line's or column's label: its value as text, or where two values print alike (``1`` and ``"1"``) as
    Python writes it, so that no two share a label."""
    printed = [str(value) for value in values]
    return [repr(value) if printed.count(text) > 1 else text for value, text in zip(values, printed)]


def keys_by_label(spec: TableSpec) -> dict[str, Any]:
    """Each line's label (:func:`texts`) -> the line's key, the value it is selected and compared by."""
    return dict(zip(texts(spec.line_keys()), spec.line_keys()))


def _select(frame: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    for knob, value in where.items():
        if knob not in frame.columns:
            return frame.iloc[0:0]
        frame = frame[frame[knob] == value]
    return frame


def _describe(where: Mapping[str, Any]) -> str:
    if set(where) == {"experiment", "row"}:
        return f"row {where['row']!r}"
    return ", ".join(f"{k}={v}" for k, v in where.items() if k != "experiment")


def paper_rows(
    numbers: Mapping[str, Any], source: PaperSource | None, model: str | None
) -> dict[str, dict[str, float]]:
    """The paper's row name -> column -> figure, for ``model`` (all rows when None)."""
    if source is None:
        return {}
    table = numbers[source.paper][source.table]
    return {r["row"]: r["values"] for r in table["rows"] if model is None or r.get("model") == model}


def _paper_model(spec: TableSpec, numbers: Mapping[str, Any], runs: pd.DataFrame) -> str | None:
    if spec.paper is None:
        return None
    models = set(runs["model"].dropna()) if "model" in runs.columns else set()
    if len(models) == 1:
        mapped = PAPER_MODELS.get(next(iter(models)))
        if mapped and paper_rows(numbers, spec.paper, mapped):
            return mapped
    return spec.paper.model


def build_table(spec: TableSpec, results: pd.DataFrame, numbers: Mapping[str, Any]) -> Table:
    """Our cells and the paper's figures for one table spec."""
    if results.empty:
        results = pd.DataFrame(columns=list(IDENTITY))
    all_runs = results[results["experiment"].isin(list(spec.sweeps()))]
    runs = latest_finished(all_runs, ["experiment", "row", *(k for k in spec.sweep.grid if k in all_runs.columns)])
    model = _paper_model(spec, numbers, runs)
    paper = paper_rows(numbers, spec.paper, model)
    if spec.across:
        labels = texts(spec.column_keys())
        formats = {label: COLUMNS[spec.metric] for label in labels}
    else:
        labels = list(spec.columns)
        formats = {c: COLUMNS.get(c, Column(c)) for c in labels}
    corner = "row" if spec.kind == "rows" else spec.index
    table = Table(spec.name, spec.caption, corner, labels, formats, [], paper_model=model, across=spec.across)

    for key, line_label in zip(spec.line_keys(), texts(spec.line_keys())):
        line_where = {"experiment": spec.sweep_of(key)[1].name}
        line_where.update({"row": key} if spec.kind == "rows" else {spec.index: key})
        paper_row = spec.paper.rows.get(key, key if spec.kind == "rows" else None) if spec.paper else None
        figures = paper.get(paper_row, {}) if paper_row is not None else {}
        line = Line(line_label, {}, {})
        parts, noted = spec.parts.get(key, {}), set()
        for column_key, label in zip(spec.column_keys(), labels):
            if spec.across:
                where = {**line_where, spec.across: column_key}
                metric = COLUMNS[spec.metric].metric
                paper_column = spec.paper.columns.get(column_key) if spec.paper else None
            else:
                where, metric, paper_column = line_where, formats[label].metric, label
            if label in parts:
                where = {**line_where, "row": parts[label]}
            # what is missing is noted once per line, grid cell, or row of a composed line
            first_of_row = where.get("row") not in noted if parts else label == table.columns[0] or spec.across
            noted.add(where.get("row"))
            if parts and label == "Avg":
                line.cells[label] = _composed_average(runs, line_where["experiment"], parts, formats)
            elif label != DELTA:  # Delta is computed from the other cells below
                line.cells[label] = _cell(table, spec, runs, all_runs, where, metric, label, first_of_row)
            if paper_column in figures:
                line.paper[label] = float(figures[paper_column])
        table.lines.append(line)

    ran = set(runs["experiment"])
    absent = [f"no finished trial of sweep {name!r} ({command})"
              for name, command in spec.fill_commands().items() if name not in ran]
    table.missing = absent if runs.empty else table.missing + absent
    if spec.delta:
        _add_delta(table, spec)
    _note_sources(table, spec, runs, paper)
    if spec.kind == "rows":
        add_significance(table, spec.delta[0] if spec.delta else None, spec.delta[1] if spec.delta else None)
    return table


def _cell(table: Table, spec: TableSpec, runs: pd.DataFrame, all_runs: pd.DataFrame,
          where: Mapping[str, Any], metric: str, label: str, first_of_row: bool) -> Cell:
    """Our cell where ``where`` holds; notes what is missing where ``first_of_row``."""
    trials = _select(runs, where)
    mirror = mirror_point(where, spec.mirrored()) if trials.empty else None
    if mirror is not None:
        trials = _select(runs, mirror)
    place = _describe(where)
    if first_of_row:
        done = {int(s) for s in trials["seed"]} | _stood_for(trials)
        seeds = spec.sweep_of(where.get("row"))[1].seeds
        missing = [s for s in seeds if s not in done]
        if missing:
            table.missing.append(f"{place}: {len(missing)} of {len(seeds)} seeds missing: {missing}")
        others = _select(all_runs, where)
        others = others[others["status"] != FINISHED] if not others.empty else others
        if len(others):
            counts = others["status"].value_counts().sort_index()
            table.notes.append(f"{place}: left out " + ", ".join(f"{n} {s}" for s, n in counts.items()) + " trial(s)")
    cell = cell_of(trials, metric, mirror=mirror is not None)
    if len(trials) and cell.n < len(trials):
        where_text = place if spec.across else f"{place}, {label}"
        table.notes.append(f"{where_text}: {len(trials) - cell.n} of {len(trials)} finished trials logged no {metric}")
    return cell


def _composed_average(runs: pd.DataFrame, experiment: str, parts: Mapping[str, str],
                      formats: Mapping[str, Column]) -> Cell:
    """A composed line's Avg (:attr:`reports.table_specs.TableSpec.parts`): for each seed that every part has a
    figure for, the mean of its parts' test sets (:data:`reports.table_specs.COMPOSED_AVERAGE`)."""
    by_seed = []
    for column in COMPOSED_AVERAGE:
        trials = _select(runs, {"experiment": experiment, "row": parts[column]})
        metric = formats[column].metric
        if metric not in trials.columns:
            return Cell(())
        values = trials[["seed", metric]].dropna()
        by_seed.append(values.set_index("seed")[metric].astype(float).rename(column))
    frame = pd.concat(by_seed, axis=1, join="inner").sort_index()
    return Cell(tuple(frame.mean(axis=1)))


def _stood_for(trials: pd.DataFrame) -> set[int]:
    """The seeds that seed-free trials stand for (their one run counts for every seed)."""
    if "seeds" not in trials.columns:
        return set()
    return {seed for seeds in trials["seeds"] for seed in seeds}


def _add_delta(table: Table, spec: TableSpec) -> None:
    """Delta = each seed's value of ``delta.of`` minus its reference line's mean (so its std is the line's): the
    table's ``delta.from``, or the line's own in ``delta.rows`` (:attr:`TableSpec.delta_from`)."""
    column, reference = spec.delta
    keys = keys_by_label(spec)  # compared as values (1 is not "1"), not as text
    for line in table.lines:
        wanted = next((base for of, base in spec.delta_from.items() if of == keys[line.label]), reference)
        base = next(other.cells[column] for other in table.lines if keys[other.label] == wanted)
        source = line.cells[column]
        line.cells[DELTA] = Cell(tuple(v - base.mean for v in source.values) if base.n else (), source.seed_free)


def _note_sources(table: Table, spec: TableSpec, runs: pd.DataFrame, paper: Mapping[str, Any]) -> None:
    def listed(name: str) -> str:
        values = sorted({str(v) for v in runs[name].dropna()}) if name in runs.columns else []
        return ", ".join(values) or DASH

    budget = f"; budget {listed('budget')}" if "budget" in runs.columns else ""
    paper_name = f"{spec.paper.paper} {spec.paper.table}, {table.paper_model or 'all models'}" if spec.paper else "none"
    cut = layers_kept(runs)
    layers = f" (first {', '.join(map(str, cut))} layers)" if cut else ""
    table.notes.insert(0, f"ours: {listed('model')}{layers}{budget}; paper: {paper_name}")
    table.notes.insert(1, f"evaluation subset: {evaluation_subset(runs)}")
    for name in ("model", "budget", "model_layers"):
        # A grid table over the knob (SCT Figure 2: model, or model_layers offline) mixes it on purpose.
        if name in runs.columns and name not in (spec.index, spec.across) and runs[name].nunique() > 1:
            table.notes.insert(1, f"the trials mix several values of {name} ({listed(name)}): "
                                  "filter or re-run before comparing")
    if spec.paper and spec.across:
        keys = keys_by_label(spec)
        columns = dict(zip(table.columns, spec.column_keys()))
        shown = [(keys[line.label], columns[label]) for line in table.lines for label in line.paper]
        reported = [(k, c) for k, row in spec.paper.rows.items() for c, pc in spec.paper.columns.items()
                    if row in paper and pc in paper[row]]
        absent = [f"{spec.index}={k}, {spec.across}={c}" for k, c in reported if (k, c) not in shown]
        if absent:
            table.notes.append(f"the paper reports cells outside this grid: {'; '.join(absent)}")


def build_tables(
    results: pd.DataFrame,
    names: Sequence[str] | None = None,
    specs: Mapping[str, TableSpec] | None = None,
    numbers: Mapping[str, Any] | None = None,
) -> list[Table]:
    """The named tables (all by default) of ``specs`` (default: table_specs.yaml), warning about gaps."""
    specs = specs if specs is not None else load_table_specs()
    numbers = numbers if numbers is not None else load_yaml(PAPER_NUMBERS)
    analyses = [f"{name} is drawn from an encoder: {ENCODER_ANALYSES[name]}" for name in names or []
                if name in ENCODER_ANALYSES]
    if analyses:
        raise KeyError("; ".join(analyses) + " (docs/analyses.md)")
    unknown = sorted(set(names or []) - set(specs))
    if unknown:
        raise KeyError(f"unknown table(s) {unknown}; known: {sorted(specs)}, and drawn from an encoder by "
                       f"reports.analyses: {sorted(ENCODER_ANALYSES)}")
    tables = []
    for name in names or list(specs):
        table = build_table(specs[name], results, numbers)
        if table.missing:
            warnings.warn(f"{name}: " + "; ".join(table.missing), MissingResults, stacklevel=2)
        tables.append(table)
    return tables


def build_tables_for_cli(
    results: pd.DataFrame, names: Sequence[str] | None, specs: Mapping[str, TableSpec] | None = None
) -> list[Table]:
    """:func:`build_tables`, with what is missing printed to stderr, one line per item. With no
    ``names``, only the tables that have results: one line then lists the others and the command
    that fills each."""
    specs = specs if specs is not None else load_table_specs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingResults)
        built = build_tables(results, names, specs)
    if not names:
        empty = [t for t in built if not t.has_results()]
        built = [t for t in built if t.has_results()]
        if empty:
            print(without_results_line(empty, specs), file=sys.stderr)
    for table in built:
        for item in table.missing:
            print(f"warning: {table.name}: {item}", file=sys.stderr)
    return built


def without_results_line(tables: Sequence[Table], specs: Mapping[str, TableSpec]) -> str:
    """One line naming the paper tables that have no results yet, with the command that fills each."""
    commands = [f"{t.name} ({'; '.join(specs[t.name].fill_commands().values())})"
                for t in tables]
    analyses = [f"{name} ({command})" for name, command in ENCODER_ANALYSES.items()]
    return "no results yet for: " + ", ".join(commands) + "; drawn from an encoder: " + ", ".join(analyses)
