"""``sweep plan --estimate``: the arithmetic from timings to a sweep's wall time, on a fake timing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sweep.commands import estimate as estimate_module
from sweep.commands.cli import main
from sweep.commands.estimate import Timing, estimate, slots, spread_sample, trial_seconds, wall_seconds
from sweep.spec.resources import Resources
from sweep.spec.sweep_spec import SpecError, load_spec
from trainers.registry import get_method
from trainers.training import graphs

SMOKE = Path(__file__).resolve().parent.parent / "search_spaces" / "smoke.yaml"
FAKE = Timing(setup=2.0, table_per_example=0.001, step=0.5, dev=3.0, test=10.0)


def test_a_trial_is_setup_table_steps_evaluations_and_test():
    assert trial_seconds(FAKE, 40, 2, 1000) == 2.0 + 1.0 + 40 * 0.5 + 2 * 3.0 + 10.0
    assert trial_seconds(FAKE, 45, 3, 0) == 2.0 + 45 * 0.5 + 3 * 3.0 + 10.0
    assert trial_seconds(FAKE, 0, 0, 1000) == 2.0 + 3.0 + 10.0  # trains nothing: one dev, the test


def test_trials_start_in_order_each_on_the_first_free_slot_after_its_worker_starts():
    assert wall_seconds([10, 10, 10], 1) == 30
    assert wall_seconds([10, 10, 10], 2) == 20
    assert wall_seconds([30, 10, 10, 10], 2) == 30  # the long one alone, the three others beside it
    assert wall_seconds([10, 10, 30], 2) == 40  # Ray Tune starts trials in order: the long one waits for a slot
    assert wall_seconds([3, 3, 3, 4, 5], 2) == 11  # 3+3+5 and 3+4
    assert wall_seconds([10, 10, 10], 2, worker_start=4) == 24  # each slot's worker starts once, then is reused
    assert wall_seconds([10], 4, worker_start=4) == 14  # a worker is started only for a slot that gets a trial


def test_steps_are_timed_on_examples_spread_over_the_training_set():
    examples = list(range(1000))
    assert spread_sample(examples, 4) == [0, 250, 500, 750]
    assert spread_sample(examples[:3], 4) == [0, 1, 2]


@pytest.mark.parametrize("resources, concurrent, cpus, gpus, expected", [
    ({"cpu": 1, "gpu": 0}, 2, 2, 0, 2), ({"cpu": 1, "gpu": 0}, 4, 2, 0, 2), ({"cpu": 2, "gpu": 0}, 4, 2, 0, 1),
    ({"cpu": 1, "gpu": 0.25}, 8, 16, 1, 4), ({"cpu": 1, "gpu": 0.25}, 3, 16, 1, 3),
    ({"cpu": 4, "gpu": 0.25}, 8, 8, 1, 2),
])
def test_slots_are_max_concurrent_trials_capped_by_resources(resources, concurrent, cpus, gpus, expected):
    assert slots(Resources(**resources), concurrent, cpus, gpus) == expected


def test_the_smoke_estimate_from_a_fake_timing():
    spec = load_spec(SMOKE)
    timed = []
    lines = estimate(spec, lambda config: timed.append(config["method"]) or FAKE, cpus=2, worker_start=5.0)
    assert timed == ["none", "simcse"]  # the two untuned poolings share one timing
    # No tuning CLS and Mean: 2 + 3 + 10 = 15 s each; SimCSE: 40 steps, eval every 20: 2 + 20 + 6 + 10 = 38 s.
    # Two at once, in the spec's order, after each worker's 5 s start: 5 + 15 + 38 on one slot, 5 + 15 on the other.
    assert lines[-1].startswith(f"estimate: 3 trials, {(15 + 15 + 38) / 60:.1f} trial-minutes, 2 at once")
    assert f"about {58 / 60:.1f} minutes of wall time" in lines[-1]


def test_the_estimate_counts_the_evaluations_where_the_trials_eval_grid_puts_them(tmp_path):
    """The smoke spec's SimCSE on 96 examples (3 steps an epoch, 20 epochs cut at 40 steps) on sentence-transformers'
    epoch grid: eval_every 20 never falls inside an epoch, so it evaluates at each epoch's end (steps 3, ..., 39) and
    after step 40: 14 evaluations."""
    text = SMOKE.read_text(encoding="utf-8").replace("max_steps: 40", "max_steps: 40\n  train_limit: 96\n"
                                                     "  epochs: 20\n  eval_grid: epoch")
    path = tmp_path / "smoke_epochs.yaml"
    path.write_text(text, encoding="utf-8")
    lines = estimate(load_spec(path), lambda config: FAKE, cpus=2, worker_start=5.0)
    simcse = 2 + 40 * 0.5 + 14 * 3.0 + 10
    assert lines[-1].startswith(f"estimate: 3 trials, {(15 + 15 + simcse) / 60:.1f} trial-minutes, 2 at once")


def test_rows_that_differ_only_in_how_the_step_runs_are_timed_apart():
    """SimCSE eager, compiled, at a fixed shape, replayed from a CUDA graph, in bf16: each row its own timing."""
    spec = load_spec(SMOKE.parent / "simcse_step_modes.yaml")
    timed = []
    estimate(spec, lambda config: timed.append(config) or FAKE, cpus=2, worker_start=1.0)
    assert len(timed) == len(spec.trials) == 7


def test_the_cli_prints_the_estimate(capsys, monkeypatch):
    monkeypatch.setattr(estimate_module, "measure", lambda config: FAKE)
    monkeypatch.setattr(estimate_module, "worker_start_seconds", lambda: 1.0)
    assert main(["plan", str(SMOKE), "--estimate"]) == 0
    assert "minutes of wall time" in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("path", sorted(SMOKE.parent.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_spec_gets_an_estimate(path):
    """Every trial of every shipped spec is costed (its steps planned, its table counted) from a fake timing."""
    try:
        spec = load_spec(path)
    except SpecError as error:  # what `sweep plan` refuses here (a back-translation file this machine lacks)
        pytest.skip(f"{path.name} cannot be planned here: {error.problems[0]}")
    lines = estimate(spec, lambda config: FAKE, cpus=2, worker_start=1.0)
    assert lines[-1].startswith(f"estimate: {spec.trials_to_run} trials") and "minutes of wall time" in lines[-1]


def test_trials_sharing_a_gpu_take_longer_by_the_measured_speed_up():
    from sweep.commands.estimate import GPU_SHARING, gpu_sharing_slowdown

    small, base = 22e6, 110e6
    assert gpu_sharing_slowdown(1, small) == gpu_sharing_slowdown(1, base) == 1.0
    speedup = dict(GPU_SHARING["small"])
    assert gpu_sharing_slowdown(4, small) == pytest.approx(4 / speedup[4])
    assert gpu_sharing_slowdown(3, small) == pytest.approx(3 / ((speedup[2] + speedup[4]) / 2))  # between two counts
    assert gpu_sharing_slowdown(16, small) == pytest.approx(16 / speedup[8])  # past the last: the GPU is full
    assert gpu_sharing_slowdown(4, base) == pytest.approx(4 / dict(GPU_SHARING["base"])[4])
    assert gpu_sharing_slowdown(4, base) > gpu_sharing_slowdown(4, small)  # a larger model fills more of the GPU
    # One replayed BERT-base trial fills the card: two take twice as long, and more; a small model's graphed
    # trials were not measured sharing, and are costed as its eager ones.
    assert gpu_sharing_slowdown(2, base, graphed=True) == pytest.approx(2 / dict(GPU_SHARING["base, cuda_graph"])[2])
    assert gpu_sharing_slowdown(2, base, graphed=True) > 2 > gpu_sharing_slowdown(2, base)
    assert gpu_sharing_slowdown(4, small, graphed=True) == gpu_sharing_slowdown(4, small)


def test_the_estimate_of_trials_on_a_quarter_gpu_each(tmp_path, monkeypatch):
    """The smoke trials at gpu 0.25 on one GPU: each costed at its measured slowdown, all at once."""
    from sweep.commands.estimate import gpu_sharing_slowdown
    from sweep.spec import environment as spec_environment

    monkeypatch.setattr(spec_environment, "local_gpus", lambda: 1)  # the spec's check sees one GPU here
    text = SMOKE.read_text(encoding="utf-8").replace("resources: {cpu: 1}", "resources: {cpu: 1, gpu: 0.25}")
    assert "gpu: 0.25" in text
    path = tmp_path / "smoke_gpu.yaml"
    path.write_text(text.replace("max_concurrent_trials: 2", "max_concurrent_trials: 4"), encoding="utf-8")
    spec = load_spec(path)
    timing = Timing(setup=2.0, table_per_example=0.0, step=0.5, dev=3.0, test=10.0, parameters=22e6)
    lines = estimate(spec, lambda config: timing, cpus=16, gpus=1, worker_start=0.0)
    slowdown = gpu_sharing_slowdown(3, 22e6)  # the smoke spec's 3 trials all fit at once
    assert "3 trials share each GPU" in lines[-2]
    assert f"{(15 + 15 + 38) * slowdown / 60:.1f} trial-minutes, 4 at once" in lines[-1]  # 4 slots, 3 trials
    assert f"about {38 * slowdown / 60:.1f} minutes of wall time" in lines[-1]


@pytest.mark.parametrize("knobs", [{}, {"pad_to_max_length": True, "cuda_graph": True}], ids=["eager", "cuda_graph"])
def test_the_timed_steps_follow_the_steps_a_trial_pays_for_once(knobs, tiny_bert, use_tiny_sts, monkeypatch):
    """A tiny SimCSE trial timed for real, its first steps made slow: they count as setup (a graph's warm-up and
    recording too, so that the timed steps are what a graph replays), not as the step."""
    from sweep.commands.estimate import TIMED_STEPS, measure, warmup_steps
    from trainers.objectives.simcse import SimCSEObjective
    from trainers.suites.sts import STSEvaluator

    slow, calls = 1.0, []
    device_loss = SimCSEObjective.device_loss

    def first_steps_slow(self, features):
        calls.append(features["input_ids"].shape)
        if len(calls) <= warmup_steps(config):
            time.sleep(slow)
        return device_loss(self, features)

    monkeypatch.setattr(SimCSEObjective, "device_loss", first_steps_slow)
    evaluations = []
    dev = STSEvaluator.dev
    monkeypatch.setattr(STSEvaluator, "dev", lambda self, encode: evaluations.append(1) or dev(self, encode))
    config = get_method("simcse").resolve({"model": tiny_bert, "batch_size": 8, "max_seq_length": 16, **knobs})
    timing = measure(config)
    assert warmup_steps(config) == (graphs.WARMUP_STEPS + 1 if knobs else 1)
    assert len(calls) == warmup_steps(config) + TIMED_STEPS
    assert len(evaluations) == 1  # after the timed steps; none among them
    assert len(set(calls)) == 1 or not knobs  # whole batches: one shape, every step a graph's
    assert 0 < timing.step < slow / 10
    assert timing.setup > slow * warmup_steps(config)


def test_graphed_trials_sharing_a_gpu_are_costed_by_their_own_measured_speed_up(tmp_path, monkeypatch):
    """The step-mode rows two to a GPU at BERT-base's size: the graphed rows by the graphed trials' figures."""
    from sweep.commands.estimate import gpu_sharing_slowdown
    from sweep.spec import environment as spec_environment

    monkeypatch.setattr(spec_environment, "local_gpus", lambda: 1)
    text = (SMOKE.parent / "simcse_step_modes.yaml").read_text(encoding="utf-8")
    path = tmp_path / "step_modes_gpu.yaml"
    path.write_text(text.replace("resources: {cpu: 1}", "resources: {cpu: 1, gpu: 0.5}")
                    .replace("max_concurrent_trials: 1", "max_concurrent_trials: 2"), encoding="utf-8")
    spec = load_spec(path)
    timing = Timing(setup=2.0, table_per_example=0.0, step=0.5, dev=3.0, test=10.0, parameters=110e6)
    lines = estimate(spec, lambda config: timing, cpus=16, gpus=1, worker_start=0.0)
    eager, graphed = gpu_sharing_slowdown(2, 110e6), gpu_sharing_slowdown(2, 110e6, graphed=True)
    assert f"2 trials share each GPU: each takes {eager:.2f}x to {graphed:.2f}x as long as alone" in lines[-2]
