"""A searched sweep on the tiny BERT: Optuna's TPE over SimCSE's temperature and learning rate, each point
run with every seed, its summary naming the best point with its seeds' mean and spread; killed with its
driver, it resumes with its searcher's state, and the point whose seeds were part way gets the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from sweep.commands.cli import main
from sweep.tracking.store import open_client
from tests.conftest import child_runs, spec_file, wait_for
from tests.fault_helpers import HOLDING_DRIVER, UNTIL_IT_HAPPENS, held_file, hold_env, release
from tests.test_sweep_run import driver, step_history

pytestmark = pytest.mark.slow
HOLD_STEP = 8


def test_an_optuna_search_runs_each_point_with_every_seed(tmp_path, tracking_uri, tiny_bert, local_ray, capsys,
                                                          monkeypatch):
    path = spec_file(tmp_path, tiny_bert, "searched", rows=None, seeds=[1, 2],
                     sample={"temperature": {"loguniform": [0.02, 0.2]},
                             "learning_rate": {"loguniform": [1.0e-5, 1.0e-4]}},
                     search={"algorithm": "optuna", "trials": 2})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 0
    out = capsys.readouterr().out

    runs = child_runs(tracking_uri, "searched")
    assert len(runs) == 4 and {run.info.status for run in runs} == {"FINISHED"}
    points: dict[tuple[str, str], list[str]] = {}
    for run in runs:  # the values Tune's searcher chose reached the trained config
        points.setdefault((run.data.params["temperature"], run.data.params["learning_rate"]), []).append(
            run.data.tags["sweep.seed"])
    assert len(points) == 2 and all(sorted(seeds) == ["1", "2"] for seeds in points.values()), points
    note = next(line for line in out.splitlines() if "search (optuna, 2 points x 2 seeds): best point" in line)
    assert "best_dev_spearman" in note and "± " in note and "(2)" in note, note



def test_bohb_runs_with_its_hyperband_pausing_and_resuming_each_seed(tmp_path, tracking_uri, tiny_bert, local_ray,
                                                                     capsys, monkeypatch):
    path = spec_file(tmp_path, tiny_bert, "bohb", rows=None, seeds=[1, 2],
                     base={"model": tiny_bert, "batch_size": 8, "train_limit": 48, "max_steps": 8, "eval_every": 2,
                           "checkpoint_every": 1, "epochs": 10},
                     sample={"temperature": {"loguniform": [0.02, 0.2]}},
                     search={"algorithm": "bohb", "trials": 2},
                     scheduler={"hyperband_for_bohb": {"max_t": 4, "reduction_factor": 2}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--tracking-uri", tracking_uri, "--storage", str(tmp_path / "ray")]) == 0
    out = capsys.readouterr().out
    runs = child_runs(tracking_uri, "bohb")
    seeds_of: dict[str, list[str]] = {}
    for run in runs:
        seeds_of.setdefault(run.data.params["temperature"], []).append(run.data.tags["sweep.seed"])
    assert len(seeds_of) == 2 and all(sorted(seeds) == ["1", "2"] for seeds in seeds_of.values()), seeds_of
    assert "search (bohb, 2 points x 2 seeds): best point temperature=" in out
    # HyperBand paused trials at its milestone and resumed some from their checkpoints, in the same runs,
    # each evaluation step logged once.
    resumed = [run for run in runs if run.data.tags.get("sweep.restored_from")]
    assert resumed, {run.data.tags["sweep.trial_id"]: step_history(tracking_uri, run.info.run_id) for run in runs}
    for run in resumed:
        steps = step_history(tracking_uri, run.info.run_id)
        assert steps == list(range(2, steps[-1] + 1, 2)) and steps[-1] > 2, steps


def test_a_killed_searched_sweep_resumes_with_its_searcher_and_every_point_keeps_its_seeds(tmp_path, tracking_uri,
                                                                                         tiny_bert, use_tiny_sts):
    path = spec_file(tmp_path, tiny_bert, "searched_killed", rows=None, seeds=[1, 2], max_concurrent_trials=1,
                     base={"model": tiny_bert, "batch_size": 8, "train_limit": 48, "max_steps": 40,
                           "eval_every": 4, "epochs": 10},
                     sample={"temperature": {"loguniform": [0.02, 0.2]}},
                     search={"algorithm": "optuna", "trials": 3})
    command, env = driver(path, tracking_uri, tmp_path)
    command = [*HOLDING_DRIVER, *command[3:]]  # `sweep run ...`, its trials held at HOLD_STEP (seed 2)
    holds, log = tmp_path / "holds", tmp_path / "driver.log"
    env.update(hold_env(holds, HOLD_STEP, seed=2))
    open_client(tracking_uri)  # the store exists before this test's polling reads it beside the driver
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stdout=output,
                                   stderr=output)

    def second_seed_held():  # the first point's second seed, held part way with its checkpoint recorded
        held = [r for r in child_runs(tracking_uri, "searched_killed")
                if r.info.status == "RUNNING" and r.data.tags.get("sweep.checkpoint_step") == str(HOLD_STEP)]
        return held if held_file(holds, HOLD_STEP).exists() and held else None

    try:
        (held,) = wait_for(second_seed_held, UNTIL_IT_HAPPENS, "the second seed held, its checkpoint recorded",
                           log, process)
        seen = time.time()  # a state of the experiment (the searcher's included) written after that checkpoint
        wait_for(lambda: any(state.stat().st_mtime > seen for state in (tmp_path / "ray").glob("*/experiment_state-*")),
                 UNTIL_IT_HAPPENS, "the experiment's state written after the checkpoint", log, process)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        release(holds, HOLD_STEP)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    finished = [r for r in child_runs(tracking_uri, "searched_killed") if r.info.status == "FINISHED"]
    # Killed at the mid-point of a group: its first seed finished, its second part way, no other point begun.
    assert [r.data.tags["sweep.seed"] for r in finished] == ["1"] and held.data.tags["sweep.seed"] == "2"
    assert finished[0].data.params["temperature"] == held.data.params["temperature"]

    resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)  # pytest caps it
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    runs = child_runs(tracking_uri, "searched_killed")
    assert len(runs) == 6 and {run.info.status for run in runs} == {"FINISHED"}
    assert finished[0].info.run_id in {run.info.run_id for run in runs}  # not trained again
    (held_again,) = [run for run in runs if run.info.run_id == held.info.run_id]  # the held seed, from its checkpoint
    assert held_again.data.metrics["resumed_from_step"] == HOLD_STEP
    seeds_of: dict[str, list[str]] = {}
    for run in runs:
        seeds_of.setdefault(run.data.params["temperature"], []).append(run.data.tags["sweep.seed"])
    assert len(seeds_of) == 3 and all(sorted(seeds) == ["1", "2"] for seeds in seeds_of.values()), seeds_of
    assert "search (optuna, 3 points x 2 seeds): best point" in resumed.stdout
