"""A sweep's layout (grid order, symmetric pair, sample ranges, reference row) is recorded on its parent run when
it starts, and the reports read it from there: a spec edited after its sweep does not change its tables."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from reports.collect import collect
from reports.importance import NO_SAMPLE_RANGES, declared_samples
from reports.sweeps import sweep_tables
from results.lines import NO_LAYOUT
from results.record import LAYOUT_TAG, SweepLayout, Tag
from sweep.spec.sweep_spec import load_spec
from sweep.tracking.tracker import open_trial_runs, sweep_tags
from sweep.tracking.trial_run import trial_identity
from tests.conftest import write_spec

SPEC = {"name": "lay", "method": "consert", "seeds": [1, 2], "symmetric": ["aug1", "aug2"],
        "grid": {"aug1": ["shuffle", "none"], "aug2": ["shuffle", "none"]},
        "rows": [{"name": "untuned", "set": {"method": "none"}}, {"name": "consert"}]}
EDITED = {**SPEC, "symmetric": None, "grid": {"aug1": ["none", "shuffle"], "aug2": ["none", "shuffle"]},
          "rows": [{"name": "consert"}, {"name": "untuned", "set": {"method": "none"}}]}
RAN = [{"aug1": "shuffle", "aug2": "shuffle"}, {"aug1": "shuffle", "aug2": "none"}, {"aug1": "none", "aug2": "none"}]
AS_RECORDED = [f"consert [aug1={a}, aug2={b}]" for a in ("shuffle", "none") for b in ("shuffle", "none")]
"""The consert lines in the recorded grid's order, the mirror point (none, shuffle) included."""


def test_the_layout_reads_back_with_its_types_and_order():
    layout = SweepLayout(grid={"z": (0.1, 1e-5), "a": (1, "1", True)}, symmetric=("z", "a"),
                         sample={"lr": {"loguniform": [1e-5, 1e-3]}}, reference="base")
    back = SweepLayout.from_json(layout.to_json())
    assert back == layout and list(back.grid) == ["z", "a"]
    assert [type(value) for value in back.grid["a"]] == [int, str, bool]


def test_a_spec_edited_after_its_sweep_keeps_the_sweeps_table(tmp_path):
    """The store written by the tracker's own writers; then the spec is edited (grid order, symmetric pair and
    rows changed) and collected: the table is laid out as the sweep ran, not as the file says now."""
    path = write_spec(tmp_path, SPEC)
    spec = load_spec(path, check_environment=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    runs = open_trial_runs(spec, uri)
    client, parent_id = runs.client, runs.parent_run_id
    for i, (row, axes, seed) in enumerate([("untuned", axes, 1) for axes in RAN]
                                          + [("consert", axes, seed) for axes in RAN for seed in (1, 2)]):
        method = "none" if row == "untuned" else "consert"
        identity = trial_identity(spec, row, seed, axes, {"method": method, **axes}, (1, 2) if method == "none" else ())
        runs.open(f"t_{i:05d}", identity, row)
        runs.log(f"t_{i:05d}", {"test_avg_spearman": 50.0 + i})
        runs.complete(f"t_{i:05d}")
    write_spec(tmp_path, EDITED)

    (table,) = sweep_tables(collect(uri), "lay")
    assert [line.label for line in table.lines if line.row == "consert"] == AS_RECORDED
    assert NO_LAYOUT not in table.notes

    # A store from before the layout was recorded: its table says so, and nothing is read from the spec file.
    client.delete_tag(parent_id, LAYOUT_TAG)
    (old,) = sweep_tables(collect(uri), "lay")
    assert NO_LAYOUT in old.notes and not any(cell.mirror for line in old.lines for cell in line.cells.values())


def test_the_tracker_records_the_layout_the_spec_declares(tmp_path):
    spec = load_spec(write_spec(tmp_path, SPEC), check_environment=False)
    layout = SweepLayout.from_json(sweep_tags(spec)[LAYOUT_TAG])
    assert layout == SweepLayout(grid={"aug1": ("shuffle", "none"), "aug2": ("shuffle", "none")},
                                 symmetric=("aug1", "aug2"), sample={}, reference=None)
    assert sweep_tags(spec)[Tag.SPEC_HASH] == spec.spec_hash  # the hash beside it: the variant the layout is of


def test_importance_takes_the_sample_ranges_its_parent_recorded():
    sample = {"learning_rate": {"loguniform": [1e-5, 1e-3]}}
    recorded = SimpleNamespace(data=SimpleNamespace(tags={LAYOUT_TAG: SweepLayout(sample=sample).to_json()}))
    old = SimpleNamespace(data=SimpleNamespace(tags={}))
    sampled = pd.DataFrame({"sampled_point": [{"learning_rate": 1e-4}]})
    assert declared_samples(recorded, sampled) == (sample, ())
    assert declared_samples(old, sampled) == ({}, (NO_SAMPLE_RANGES,))
    assert declared_samples(old, pd.DataFrame({"sampled_point": [{}]})) == ({}, ())
