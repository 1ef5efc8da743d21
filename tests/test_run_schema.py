"""A trial's identity crosses MLflow and results.parquet with its types, and stores written before the
identity tag still read, to the same identity the current writer gives the same trial."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from reports.cli import read_results
from reports.collect import write
from results.reader import read_trials, run_identity
from results.record import Tag, TrialIdentity
from sweep.spec.sweep_spec import load_spec, trial_config
from sweep.tracking.trial_run import trial_identity

OLD_STORE = Path(__file__).parent / "data" / "store_before_identity"
"""A tiny sweep (``spec.yaml``: an untuned and a SimCSE row, a grid axis, a sampled axis, two seeds) recorded
by the tracker before the identity tag existed, when every value was a string."""


def types(value):
    """The type of every leaf of ``value``, in its shape."""
    if isinstance(value, dict):
        return {key: types(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *map(types, value)]
    return type(value).__name__


def test_an_identity_reads_back_with_the_same_values_and_types():
    identity = TrialIdentity(
        method="sct", row="SCT", seed=3, seeds=(1, 2),
        grid_point={"learning_rate": 1e-05, "batch_size": 64, "view1": "shuffle", "queue": None},
        sampled={"temperature": np.float64(0.05), "warmup_steps": np.int64(7)},
        knobs={"freeze": True, "temperature": 0.05, "evaluations": [{"suite": "sts"}, {"suite": "senteval",
                                                                                         "kfold": 10}]},
        metric="test_avg_spearman", mode="min",
    )
    read = TrialIdentity.from_json(identity.to_json())
    assert read == identity
    assert types(read.sampled) == {"temperature": "float", "warmup_steps": "int"}  # NumPy's, as Python's
    assert types(read.grid_point) == {"learning_rate": "float", "batch_size": "int", "view1": "str",
                                      "queue": "NoneType"}
    assert types(read.seeds) == ["tuple", "int", "int"] and read.knobs["freeze"] is True
    assert identity.tags()[Tag.AXES] == "learning_rate=1e-05, batch_size=64, view1=shuffle, queue=None, " \
                                        "temperature=0.05, warmup_steps=7"


def old_store(tmp_path: Path) -> str:
    folder = tmp_path / "old"
    folder.mkdir()
    with gzip.open(OLD_STORE / "mlflow.db.gz") as packed, (folder / "mlflow.db").open("wb") as db:
        shutil.copyfileobj(packed, db)
    return f"sqlite:///{folder}/mlflow.db"


def test_a_store_written_before_the_identity_tag_reads_to_the_identity_the_writer_gives_now(tmp_path):
    uri = old_store(tmp_path)
    frame = read_trials(uri)
    spec = load_spec(OLD_STORE / "spec.yaml", check_environment=False)
    assert sorted(zip(frame["row"], frame["seed"])) == [("simcse", 1), ("simcse", 1), ("simcse", 2), ("simcse", 2),
                                                        ("untuned", 1), ("untuned", 1)]
    assert set(frame["status"]) == {"FINISHED"}

    from mlflow import MlflowClient

    client = MlflowClient(uri)
    for run_id in frame["run_id"]:
        recorded = run_identity(client.get_run(run_id))
        assert Tag.IDENTITY not in client.get_run(run_id).data.tags  # truly the older record
        axes = {**recorded.grid_point, **recorded.sampled}
        config = trial_config(spec, recorded.row, recorded.seed, axes)
        now = trial_identity(spec, recorded.row, recorded.seed, axes, config, spec.stands_for(recorded.row))
        assert recorded == now, recorded.row
        assert types(recorded.sampled) == {"learning_rate": "float"} and types(recorded.grid_point) == {
            "pooling": "str"}

    # The frame's columns have the knobs' declared types, and survive results.parquet.
    simcse = frame[frame["row"] == "simcse"]
    assert str(frame["learning_rate"].dtype) == "Float64" and str(frame["max_steps"].dtype) == "Int64"
    assert list(simcse["learning_rate"]) == [point["learning_rate"] for point in simcse["sampled_point"]]
    assert [tuple(s) for s in frame.loc[frame["row"] == "untuned", "seeds"]] == [(1, 2), (1, 2)]
    stored = read_results(write(frame, tmp_path / "results.parquet"))
    pd.testing.assert_frame_equal(stored, frame)
    assert stored["evaluations"].iloc[0] == [{"suite": "sts"}]

