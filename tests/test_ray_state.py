"""Ray's experiment state kept whole (:mod:`sweep.run.ray_state`): a copy of each state Ray finished writing, put
back when a driver killed during the write left the state cut short (Ray writes it in place on local
storage, and a restore from the cut file starts the trials again without their configs)."""

from __future__ import annotations

import json
import pickle

import pytest

import sweep.run.ray_state as ray_state
from sweep.run.ray_state import CHECK_SHARE, WHOLE_SUFFIX, WholeRayState, mend, newest_state


def test_a_state_cut_short_is_mended_from_its_last_whole_copy(tmp_path):
    state = tmp_path / "experiment_state-2026-11-27_00-16-38.json"
    whole = json.dumps({"trial_data": [["trial", "its checkpoint"]], "runner_data": {}})
    state.write_text(whole)
    WholeRayState(str(tmp_path)).get_state()  # as Ray calls it, right after it wrote its state
    state.write_text(whole[: len(whole) // 2])  # the driver killed during Ray's next write

    assert mend(str(tmp_path)) == [state]
    assert state.read_text() == whole
    assert mend(str(tmp_path)) == []  # a whole state is left alone


@pytest.mark.parametrize("name", ["basic-variant-state-2026-11-29_05-24-53.json",
                                  "searcher-state-2026-11-29_05-24-53.pkl"])
def test_a_searcher_state_cut_short_is_mended_from_its_last_whole_copy(tmp_path, name):
    """The driver killed while Ray copied its searcher's state (the search algorithm's, or a searcher's own:
    Optuna's study) left it empty: Ray's restore would fail on it (EOFError) and start the experiment again."""
    experiment = tmp_path / "experiment_state-2026-11-29_05-24-53.json"
    experiment.write_text(json.dumps({"trial_data": []}))
    searcher = tmp_path / name
    whole = pickle.dumps({"_uuid_prefix": "34e36_", "_total_samples": 6})
    searcher.write_bytes(whole)
    WholeRayState(str(tmp_path)).get_state()
    searcher.write_bytes(b"")

    assert mend(str(tmp_path)) == [searcher] and searcher.read_bytes() == whole
    searcher.write_bytes(whole[:10])  # cut in the middle
    assert mend(str(tmp_path)) == [searcher] and searcher.read_bytes() == whole
    assert mend(str(tmp_path)) == []


def test_a_state_slow_to_read_back_is_checked_within_its_share_of_the_drivers_time(tmp_path, monkeypatch):
    """A searcher's state whose check takes 0.1 s is copied again 0.1 / CHECK_SHARE s later, not at every save
    (an Optuna study of thousands of trials takes that long to unpickle); the experiment's JSON at every save."""
    now = [1000.0]
    read_back = ray_state.is_whole

    def slow_is_whole(state):
        now[0] += 0.1 if state.suffix == ".pkl" else 0.0
        return read_back(state)

    monkeypatch.setattr(ray_state.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(ray_state, "is_whole", slow_is_whole)
    experiment, searcher = tmp_path / "experiment_state-x.json", tmp_path / "searcher-state-x.pkl"
    copies = [path.with_name(path.name + WHOLE_SUFFIX) for path in (experiment, searcher)]
    callback = WholeRayState(str(tmp_path))
    for save in range(3):
        experiment.write_text(json.dumps({"save": save}))
        searcher.write_bytes(pickle.dumps({"save": save}))
        callback.get_state()
        now[0] += 1.0
    assert json.loads(copies[0].read_text()) == {"save": 2} and pickle.loads(copies[1].read_bytes()) == {"save": 0}
    now[0] += 0.1 / CHECK_SHARE
    callback.get_state()
    assert pickle.loads(copies[1].read_bytes()) == {"save": 2}


def test_nothing_is_mended_without_a_whole_copy_or_on_a_uri(tmp_path):
    (tmp_path / "experiment_state-x.json").write_text("")
    assert mend(str(tmp_path)) == [] and (tmp_path / "experiment_state-x.json").read_text() == ""
    assert mend("s3://bucket/sweeps/x") == [] and mend(str(tmp_path / "none")) == []
    WholeRayState("s3://bucket/sweeps/x").get_state()  # a URI's state is uploaded whole: nothing to copy


def test_ray_calls_it_after_each_save_of_its_state(tmp_path, local_ray):
    """Through Ray Tune itself: the copy is there, whole, beside the state Ray wrote, of the same trials (Ray's
    last save at the end may come after the last copy)."""
    from ray import tune

    def trainable(config):
        for step in range(3):
            tune.report({"step": step})

    folder = tmp_path / "experiment"
    tune.Tuner(trainable, run_config=tune.RunConfig(
        name="experiment", storage_path=str(tmp_path), callbacks=[WholeRayState(str(folder))], verbose=0,
    )).fit()
    state = newest_state(folder)
    copy = state.with_name(state.name + WHOLE_SUFFIX)
    def trial_ids(path):
        return [json.loads(trial[0])["trial_id"] for trial in json.loads(path.read_text())["trial_data"]]

    assert trial_ids(copy) == trial_ids(state) and len(trial_ids(state)) == 1
