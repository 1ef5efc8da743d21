"""Trials that cannot differ run once: seed-free rows, mirror cells of symmetric grid axes.

The plan, the Tune param space and the tables all agree on which trials run
and what each one stands for.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml
from ray.tune.search.variant_generator import generate_variants

from reports.paper_tables import MissingResults, build_tables
from reports.table_specs import load_table_specs
from results.render import layout, legend
from sweep.commands.cli import main
from sweep.run.engine import param_space
from sweep.spec.sweep_spec import SpecError, load_spec
from trainers.data.sources import load_corpus

ROOT = Path(__file__).resolve().parent.parent
AUGMENTATIONS = ["none", "shuffle", "token_cutoff", "feature_cutoff", "dropout"]


def write(tmp_path: Path, spec: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def tune_configs(spec) -> list[dict]:
    """The configs Ray Tune's grid generator makes of the sweep's param space."""
    return [config for _, config in generate_variants(param_space(spec))]


def test_seed_free_rows_run_once_and_the_plan_says_so(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no store there: the plan's reuse lines say nothing
    spec = load_spec(ROOT / "search_spaces/sg_main.yaml")
    assert spec.trial_count == 48 and spec.trials_to_run == 27
    points = spec.trial_points()
    untuned = [p for p in points if p.row.startswith("No tuning")]
    assert [(p.row, p.seed) for p in untuned] == [("No tuning (CLS)", 1), ("No tuning (Mean)", 1),
                                                  ("No tuning (WK)", 1)]
    assert spec.stands_for("No tuning (CLS)") == (1, 2, 3, 4, 1234, 2345, 3456, 7890)
    assert spec.stands_for("SG") == ()
    configs = tune_configs(spec)
    assert len(configs) == 27
    # Every (row, seed) the plan runs, exactly once, as keys of the trial's own config.
    assert sorted((c["row"], c["seed"]) for c in configs) == sorted((p.row, p.seed) for p in points)
    assert main(["plan", str(ROOT / "search_spaces/sg_main.yaml")]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[-1] == "48 trials in the grid, 27 trials to run"
    assert any(line.startswith("runs once: 'No tuning (CLS)', 'No tuning (Mean)'") for line in out)


def test_symmetric_axes_run_each_unordered_pair_once(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no store there: the plan's reuse lines say nothing
    path = ROOT / "search_spaces/consert_augmentation_grid.yaml"
    spec = load_spec(path)
    assert spec.symmetric == ("aug1", "aug2") and spec.trial_count == 25 and spec.trials_to_run == 15
    configs = tune_configs(spec)
    pairs = [(c["aug1"], c["aug2"]) for c in configs]
    assert len(pairs) == len(set(pairs)) == 15
    assert {frozenset(pair) for pair in pairs} == {frozenset((a, b)) for a in AUGMENTATIONS for b in AUGMENTATIONS}
    assert ("none", "shuffle") in pairs and ("shuffle", "none") not in pairs
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[-1] == "25 trials in the grid, 15 trials to run"
    assert sum("mirror of" in line for line in out) == 10
    assert any(line.startswith("symmetric: aug1 <-> aug2") and "NT-Xent" in line for line in out)


def test_symmetric_with_a_budget_and_rows_and_seeds(tmp_path):
    spec = load_spec(write(tmp_path, {
        "name": "sym", "method": "consert", "grid": {"aug1": ["none", "shuffle"], "aug2": ["none", "shuffle"]},
        "symmetric": ["aug2", "aug1"], "seeds": [1, 2],
        "rows": [{"name": "a", "set": {}}, {"name": "untuned", "set": {"method": "none"}}],
    }))
    # consert: 3 unordered pairs x 2 seeds; the `none` row ignores the augmentations but still has the
    # grid's points, of which the mirror cells do not run either: 3 points x 1 run.
    assert spec.trial_count == 2 * 2 * 4 and spec.trials_to_run == 3 * 2 + 3
    assert len(tune_configs(spec)) == 9


@pytest.mark.parametrize(
    "change, message",
    [
        ({"symmetric": ["aug1"]}, "symmetric: expected a list of two different grid axes"),
        ({"symmetric": ["aug1", "aug1"]}, "symmetric: expected a list of two different grid axes"),
        ({"symmetric": ["aug1", "temperature"]}, r"symmetric: \['temperature'\] not grid axes of this spec"),
        ({"grid": {"aug1": ["none", "shuffle"], "aug2": ["shuffle", "none"]}},
         "grid.aug1 and grid.aug2 must have the same values in the same order"),
        ({"grid": {"aug1": ["none", "shuffle"], "aug2": ["none"]}},
         "grid.aug1 and grid.aug2 must have the same values"),
    ],
)
def test_symmetric_declaration_is_validated(tmp_path, change, message):
    raw = {"name": "sym", "method": "consert", "grid": {"aug1": ["none", "shuffle"], "aug2": ["none", "shuffle"]},
           "symmetric": ["aug1", "aug2"], **change}
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, raw))


def test_only_a_method_that_declares_the_pair_may_be_symmetric(tmp_path, capsys):
    # SCT's two views are not exchangeable (bt1/bt2 files, distinct queues): it declares no pair.
    raw = {"name": "sym", "method": "sct", "grid": {"view1": ["shuffle", "token_cutoff"],
                                                     "view2": ["shuffle", "token_cutoff"]},
           "symmetric": ["view1", "view2"]}
    path = write(tmp_path, raw)
    with pytest.raises(SpecError, match="method 'sct' does not declare view1 and view2 exchangeable"):
        load_spec(path)
    assert main(["plan", str(path)]) == 2  # a clear error, no traceback
    assert "symmetric: method 'sct' does not declare" in capsys.readouterr().err


def _frame(experiment: str, rows: list[dict]) -> pd.DataFrame:
    base = {"experiment": experiment, "status": "FINISHED", "model": "m", "budget": "none", "seeds": ()}
    records = [{**base, "run_id": f"r{i}", "trial_id": f"t{i}", "start_time": pd.Timestamp(i, unit="s", tz="UTC"),
                **row} for i, row in enumerate(rows)]
    return pd.DataFrame.from_records(records)


def test_a_seed_free_row_shows_as_one_deterministic_run_for_all_seeds():
    specs = load_table_specs()
    seeds = (1, 2, 3, 4, 1234, 2345, 3456, 7890)
    frame = _frame("sg_main", [
        {"row": "No tuning (CLS)", "seed": 1, "seeds": seeds, "test_avg_spearman": 30.0},
        {"row": "No tuning (Mean)", "seed": 1, "seeds": seeds, "test_avg_spearman": 50.0},
        {"row": "No tuning (WK)", "seed": 1, "seeds": seeds, "test_avg_spearman": 40.0},
        *({"row": "SG", "seed": s, "test_avg_spearman": 60.0 + i}
          for i, s in enumerate((1, 2, 3, 4, 1234, 2345, 3456, 7890))),
    ])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MissingResults)
        table = build_tables(frame, ["sg-bert-table1"], specs)[0]
    missing = " ".join(str(w.message) for w in caught)
    assert "No tuning" not in missing  # the one run stands for all 8 seeds
    _, lines, _ = layout(table)
    avg = table.columns.index("Avg") + 1
    cls = next(line for line in lines if line[0] == "No tuning (CLS)")
    assert cls[avg] == "30.00†"
    sg = next(line for line in lines if line[0] == "SG")
    assert "±" in sg[avg] and "(" not in sg[avg]  # every trained cell is over the 8 seeds: the legend says so once
    assert "cells: each cell of ours is the mean ± sample std over 8 seeds" in legend(table)


def test_mirror_cells_of_symmetric_axes_are_filled_and_marked(tmp_path):
    from results.figures import heatmap

    specs = load_table_specs()
    spec = load_spec(ROOT / "search_spaces/consert_augmentation_grid.yaml")
    values = {}
    rows = []
    for point in spec.trial_points():
        first, second = point.axes["aug1"], point.axes["aug2"]
        values[(first, second)] = 60.0 + AUGMENTATIONS.index(first) + 0.1 * AUGMENTATIONS.index(second)
        rows.append({"row": "", "seed": 42, "aug1": first, "aug2": second,
                     "test_avg_spearman": values[(first, second)]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MissingResults)
        table = build_tables(_frame("consert_augmentation_grid", rows), ["consert-figure5"], specs)[0]
    assert not caught and not table.missing
    _, lines, _ = layout(table)
    ours = [line for line in lines if line[0] in AUGMENTATIONS]
    for line in table.lines:
        for column in table.columns:
            cell = line.cells[column]
            ran = (line.label, column) in values
            assert cell.mirror == (not ran)
            assert cell.values == ((values[(line.label, column)] if ran else values[(column, line.label)]),)
    shuffle_none = ours[AUGMENTATIONS.index("shuffle")][1 + AUGMENTATIONS.index("none")]
    assert shuffle_none == f"{values[('none', 'shuffle')]:.2f}‡"  # one seed in every cell: the legend says it once
    assert "‡ mirror: " in " ".join(legend(table))
    png = heatmap(table, tmp_path / "figure5.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name, shared, corpus, width, sets", [
    ("sct_distillation", "the teacher's vectors", "sts_all_sentences", 384, []),  # the teacher's pooled vector
    # layers 0..6 of the bundled model; BERT_F without dropout, whose views are tabled
    ("sg_opt_ablation", "BERT_F's views", "stsb_sentences", 7 * 384, ["--set", "bert_f_dropout=false"]),
])
def test_the_plan_says_where_the_frozen_outputs_table_is_and_its_size(capsys, name, shared, corpus, width, sets):
    texts = len(set(load_corpus(corpus)))
    size = f"table {texts} texts x {width} x 4 B = {texts * width * 4 / 1e9:.3f} GB"
    assert main(["plan", str(ROOT / f"search_spaces/{name}.yaml"), *sets]) == 0
    out = capsys.readouterr().out
    assert f"shared: {shared} (every row): one batched pass over the training texts per node" in out
    assert f"{size}, fits frozen_outputs_gb 8" in out
    assert main(["plan", str(ROOT / f"search_spaces/{name}.yaml"), *sets, "--set", "share_frozen_outputs=false",
                 "--set", "frozen_outputs_gb=0.01"]) == 0
    out, err = capsys.readouterr()
    assert ("shared:" not in out
            and f"{shared} (every row): one batched pass over the training texts inside each trial" in out)
    assert f"{size}, does not fit frozen_outputs_gb 0.01" in out
    assert f"warning: frozen_outputs_gb: {shared} (every row) take" in err
