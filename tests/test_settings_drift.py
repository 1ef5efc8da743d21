"""A resume compares each trial run of the sweep with what this code resolves for it (sweep.run.settings_drift):
other knobs, models or data refuse it, other code, libraries or precision are said.

The runs are written by the tracker's own writer (:class:`sweep.tracking.trial_run.TrialRuns`) into a SQLite
store, with the identity each trial of the spec has; "older code" is played by writing a run whose identity
another default resolved, or by this code's key parts changing after the runs were written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient

from results.names import UsageError
from results.record import Tag
from sweep.run.settings_drift import check_resume, settings_drift, sweep_config
from sweep.spec.sweep_spec import SweepSpec, load_spec
from sweep.tracking.store import open_client
from sweep.tracking.trial_run import FAILED, TrialRuns, trial_identity
from tests.conftest import write_spec

COMMIT = "abc1234"


def spec_of(folder: Path, model: str, **extra) -> SweepSpec:
    path = write_spec(folder, {
        "name": "drift", "method": "simcse",
        "base": {"model": model, "batch_size": 8, "train_limit": 48, "max_steps": 4, "eval_every": 2},
        "rows": [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}}, {"name": "simcse", "set": {}}],
        "seeds": [1, 2], **extra})
    return load_spec(path, check_environment=False)


def write_runs(spec: SweepSpec, uri: str, configs: dict[tuple[str, int], dict] | None = None,
               tune_chosen: dict | None = None) -> tuple[MlflowClient, list]:
    """One run per trial of ``spec``, as the tracker opens it; ``configs`` replaces the config a trial ran (the
    config older code resolved), ``tune_chosen`` adds values Tune chose to every trial's config."""
    client = open_client(uri)
    experiment = client.create_experiment("drift")
    parent = client.create_run(experiment).info.run_id
    runs = TrialRuns(client, experiment, parent, {Tag.GIT_COMMIT: COMMIT, Tag.NAME: spec.name}, uri,
                     note=lambda line: None)
    for index, trial in enumerate(spec.trials):
        point = trial.point
        ran = dict((configs or {}).get((point.row, point.seed)) or trial.config)
        ran.update({knob: value for knob, value in (tune_chosen or {}).items() if knob in ran})  # the row's knobs
        identity = trial_identity(spec, point.row, point.seed, point.axes, ran, ())
        runs.open(f"trial_{index}", identity, f"{point.row} seed {point.seed}")
    return client, runs.child_runs()


def test_runs_of_this_code_resume_without_a_word(tmp_path, tiny_bert, use_tiny_sts):
    spec = spec_of(tmp_path, tiny_bert)
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db")
    assert len(runs) == 3  # the untuned row is seed-free: one trial
    assert settings_drift(runs, sweep_config(spec)) == [] and check_resume(spec, runs) == []


def test_a_knob_another_default_gave_refuses_the_resume_naming_the_trial_the_knob_and_the_commit(
        tmp_path, tiny_bert, use_tiny_sts):
    spec = spec_of(tmp_path, tiny_bert)
    simcse = next(trial for trial in spec.trials if trial.point.row == "simcse" and trial.point.seed == 2)
    older = {k: v for k, v in simcse.config.items() if k != "adam_implementation"}  # before the knob existed
    older["temperature"] = 0.1
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db", {("simcse", 2): older})
    (drift,) = settings_drift(runs, sweep_config(spec))
    assert drift.label == "simcse seed 2" and drift.parts == ("knobs",) and drift.commit == COMMIT
    assert drift.knobs == {"adam_implementation": (None, "transformers"), "temperature": (0.1, 0.05)}
    with pytest.raises(UsageError) as refused:
        check_resume(spec, runs)
    message = str(refused.value)
    assert f"spec hash {spec.spec_hash}" in message and f"git checkout {COMMIT}" in message
    assert "simcse seed 2: adam_implementation None -> 'transformers'; temperature 0.1 -> 0.05" in message
    assert "seed 1" not in message and "untuned" not in message


def test_a_failed_run_is_not_compared(tmp_path, tiny_bert, use_tiny_sts):
    spec = spec_of(tmp_path, tiny_bert)
    simcse = next(trial for trial in spec.trials if trial.point.row == "simcse" and trial.point.seed == 1)
    client, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db",
                              {("simcse", 1): {**simcse.config, "temperature": 0.1}})
    (drift,) = settings_drift(runs, sweep_config(spec))
    client.set_terminated(drift.run_id, FAILED)  # Ray resumes no errored trial (resume_errored=False)
    runs = [client.get_run(run.info.run_id) for run in runs]
    assert settings_drift(runs, sweep_config(spec)) == []


def test_a_model_whose_files_changed_refuses_the_resume(tmp_path, tiny_bert, use_tiny_sts):
    model = shutil.copytree(tiny_bert, tmp_path / "model")
    spec = spec_of(tmp_path, str(model))
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db")
    config = model / "config.json"
    config.write_text(config.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    drifts = settings_drift(runs, sweep_config(spec))
    assert len(drifts) == 3 and all(drift.parts == ("models",) for drift in drifts)
    with pytest.raises(UsageError, match="untuned seed 1: models differ") as refused:
        check_resume(spec, runs)
    assert "finish it with the models it ran with, or run it afresh" in str(refused.value)
    assert "git checkout" not in str(refused.value)  # no code to check out: the model's files changed


def test_other_code_libraries_and_precision_are_said_and_the_resume_goes_on(tmp_path, tiny_bert, use_tiny_sts,
                                                                            monkeypatch):
    """A resume on another machine (auto resolves to another precision) or after an upgrade or a pull changes no
    setting of the spec: each is one line on the console, with what the trials ran and what they get now."""
    import sweep.spec.trial_key as trial_key

    spec = spec_of(tmp_path, tiny_bert)
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db")
    ran = {trial.point.row: trial_key.trial_key(trial.config).parts["precision"] for trial in spec.trials}
    monkeypatch.setattr(trial_key, "code_digest", lambda: "0" * 16)
    monkeypatch.setattr(trial_key, "version", lambda package: "9.9")
    monkeypatch.setattr(trial_key, "_precision", lambda setting, graphed=False: "tf32")
    drifts = settings_drift(runs, sweep_config(spec))
    assert len(drifts) == 3 and all(drift.parts == ("precision", "libraries", "code") for drift in drifts)
    code, libraries, precision = check_resume(spec, runs)
    same = ": their knobs, models and data are the same"
    assert code == f"resuming with other training code than 3 of this sweep's trials ran (commit {COMMIT} -> this " \
        f"checkout){same}"
    assert libraries.startswith("resuming with other libraries than 3 of this sweep's trials ran (torch ")
    assert libraries.endswith(" -> torch 9.9, transformers 9.9)" + same)
    untuned, trained = '{"eval_precision": "tf32"}', '{"eval_precision": "tf32", "train_precision": "tf32"}'
    assert f"{ran['simcse']} -> {trained}" in precision and f"{ran['untuned']} -> {untuned}" in precision
    assert precision.endswith(same)


def test_a_value_tune_chose_is_the_runs_own_not_a_drift(tmp_path, tiny_bert, use_tiny_sts):
    """A PBT mutation's first value is drawn by Tune, so the spec alone does not resolve it: the run's value is
    kept, and only a knob Tune did not choose can drift."""
    spec = spec_of(tmp_path, tiny_bert, scheduler={"pbt": {"perturbation_interval": 2, "hyperparam_mutations": {
        "learning_rate": {"loguniform": [1.0e-5, 1.0e-4]}}}})
    assert "learning_rate" in spec.tune_chosen()
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db", tune_chosen={"learning_rate": 2.5e-5})
    assert settings_drift(runs, sweep_config(spec)) == []
    simcse = next(trial for trial in spec.trials if trial.point.row == "simcse" and trial.point.seed == 1)
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/other.db", {("simcse", 1): {**simcse.config, "pooling": "mean"}},
                         tune_chosen={"learning_rate": 2.5e-5})
    (drift,) = settings_drift(runs, sweep_config(spec))
    assert drift.knobs == {"pooling": ("mean", "cls")}


def test_each_run_is_compared_with_its_own_grid_point(tmp_path, tiny_bert, use_tiny_sts):
    spec = spec_of(tmp_path, tiny_bert, grid={"learning_rate": [1.0e-5, 3.0e-5]})
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/store.db")
    assert len(runs) == 6 and settings_drift(runs, sweep_config(spec)) == []  # the untuned row at each point too
    simcse = next(trial for trial in spec.trials if trial.point.params() == {"row": "simcse", "seed": 1,
                                                                             "learning_rate": 1e-5})
    _, runs = write_runs(spec, f"sqlite:///{tmp_path}/other.db", {("simcse", 1): {**simcse.config, "temperature": 0.1}})
    drifts = settings_drift(runs, sweep_config(spec))  # both grid points of (simcse, 1) ran that temperature
    assert [(drift.label, drift.knobs) for drift in drifts] == [
        ("simcse seed 1 (learning_rate=1e-05)", {"temperature": (0.1, 0.05)}),
        ("simcse seed 1 (learning_rate=3e-05)", {"learning_rate": (1e-05, 3e-05), "temperature": (0.1, 0.05)})]


@pytest.mark.slow
def test_sweep_resume_with_another_default_exits_2_and_runs_nothing(tmp_path, tiny_bert, local_ray, capsys):
    """The engine's check, end to end: a finished sweep whose run says its trial ran another pooling (older
    code's default) is not resumed, nor planned; Ray is not started again, and the run is left as it was."""
    from dataclasses import replace

    import ray

    from results.reader import run_identity
    from sweep.commands.cli import main
    from sweep.spec.trial_key import trial_key
    from tests.conftest import child_runs

    path = write_spec(tmp_path, {"name": "drift", "method": "none", "base": {"model": tiny_bert, "pooling": "mean"},
                                 "rows": [{"name": "untuned", "set": {}}], "seeds": [1]})
    uri, storage = f"sqlite:///{tmp_path}/store.db", str(tmp_path / "ray")
    assert main(["run", str(path), "--tracking-uri", uri, "--storage", storage]) == 0
    capsys.readouterr()
    assert main(["plan", str(path), "--tracking-uri", uri]) == 0
    assert "resume: the store holds 1 trial runs of this variant (1 finished)" in capsys.readouterr().out
    (run,) = child_runs(uri, "drift")
    identity = run_identity(run)
    older = replace(identity, knobs={**identity.knobs, "pooling": "cls"})
    client = MlflowClient(uri)
    for key, value in {**older.tags(), **trial_key(older.knobs).tags()}.items():
        client.set_tag(run.info.run_id, key, value)
    capsys.readouterr()
    ray.shutdown()
    assert main(["run", str(path), "--tracking-uri", uri, "--storage", storage]) == 2
    assert not ray.is_initialized()  # refused before Ray starts
    error = capsys.readouterr().err
    assert "cannot be resumed with this code" in error and "untuned seed 1: pooling 'cls' -> 'mean'" in error
    assert "Traceback" not in error
    assert main(["plan", str(path), "--tracking-uri", uri]) == 2  # the plan refuses what the run would
    assert "untuned seed 1: pooling 'cls' -> 'mean'" in capsys.readouterr().err
    (after,) = child_runs(uri, "drift")
    assert after.info.status == "FINISHED" and after.info.end_time == run.info.end_time
