"""``sweep plan --estimate``: the arithmetic from timings to a sweep's wall time, on a fake timing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sweep.commands import estimate as estimate_module
from sweep.commands.cli import main
from sweep.commands.estimate import estimate, spread_sample
from sweep.commands.trial_costs import (
    StagePlan,
    StageTiming,
    Timing,
    TrialCost,
    gpu_sharing_slowdown,
    own_seconds,
    slots,
    trial_cost,
    wall_seconds,
)
from sweep.spec.resources import Resources
from sweep.spec.sweep_spec import SpecError, load_spec
from trainers.registry import get_method
from trainers.training import graphs

SMOKE = Path(__file__).resolve().parent.parent / "search_spaces" / "smoke.yaml"
TRAIN = StageTiming("train", setup=0.0, table_per_example=0.001, step=0.5, dev=3.0)
FAKE = Timing(setup=2.0, stages=(TRAIN,), dev=3.0, test=10.0)


def fake_timing(config) -> Timing:
    """FAKE, with a stage like its one for each stage of ``config``'s method."""
    method = get_method(config["method"])
    stages = method.stages(config) if method.trains else ()
    return Timing(setup=2.0, stages=tuple(StageTiming(stage.name, 0.0, 0.001, 0.5, 3.0) for stage in stages),
                  dev=3.0, test=10.0)


def alone(*seconds: float, shared_prefix: str | None = None) -> TrialCost:
    """A trial of stages of these seconds, nothing else."""
    return TrialCost(0.0, seconds, 0.0, shared_prefix)


def test_a_trial_is_setup_table_steps_evaluations_and_test():
    assert trial_cost(FAKE, [StagePlan(40, 2, 1000)]).seconds == 2.0 + 1.0 + 40 * 0.5 + 2 * 3.0 + 10.0
    assert trial_cost(FAKE, [StagePlan(45, 3)]).seconds == 2.0 + 45 * 0.5 + 3 * 3.0 + 10.0
    assert trial_cost(FAKE, [StagePlan(0, 0, 1000)]).seconds == 2.0 + 3.0 + 10.0  # trains nothing: one dev, the test
    assert trial_cost(FAKE, []).seconds == 2.0 + 3.0 + 10.0
    two = Timing(2.0, (StageTiming("nli", 1.0, 0.0, 0.2, 4.0), TRAIN), dev=3.0, test=10.0)
    cost = trial_cost(two, [StagePlan(100, 1), StagePlan(40, 2)], "nli key")
    assert cost.stages == (1.0 + 100 * 0.2 + 4.0, 40 * 0.5 + 2 * 3.0)  # each stage by its own timing
    assert cost.seconds == 2.0 + 25.0 + 26.0 + 10.0 and cost.reading_seconds == 2.0 + 26.0 + 10.0
    with pytest.raises(ValueError):  # a plan per timed stage
        trial_cost(two, [StagePlan(40, 2)])


def test_trials_start_in_order_each_on_the_first_free_slot_after_its_worker_starts():
    def wall(seconds, slot_count, worker_start=0.0):
        return wall_seconds([alone(s) for s in seconds], slot_count, worker_start)

    assert wall([10, 10, 10], 1) == 30
    assert wall([10, 10, 10], 2) == 20
    assert wall([30, 10, 10, 10], 2) == 30  # the long one alone, the three others beside it
    assert wall([10, 10, 30], 2) == 40  # Ray Tune starts trials in order: the long one waits for a slot
    assert wall([3, 3, 3, 4, 5], 2) == 11  # 3+3+5 and 3+4
    assert wall([10, 10, 10], 2, worker_start=4) == 24  # each slot's worker starts once, then is reused
    assert wall([10], 4, worker_start=4) == 14  # a worker is started only for a slot that gets a trial


def test_trials_sharing_their_first_stages_train_them_once_the_others_wait_for_them():
    """Trials a, b, c share a 100 s first stage (a trains it; b and c read it), d has its own."""
    a, b, c = (alone(100, last, shared_prefix="k") for last in (10, 20, 30))
    d = alone(100, 10, shared_prefix="other")
    assert own_seconds([a, b, c, d]) == [110, 20, 30, 110]
    assert wall_seconds([a, b, c], 1) == 110 + 20 + 30  # one after another: each reader starts after it
    assert wall_seconds([a, b, c], 3) == 100 + 30  # at once: b and c wait for a's first stage, then train their own
    assert wall_seconds([a, b, c, d], 2) == 120 + 110  # b waits beside a (120); c after a (140), d after b
    assert wall_seconds([a, b, c, d], 2, worker_start=5) == 5 + 230
    setup = TrialCost(7.0, (100.0, 10.0), 3.0, "k")
    assert wall_seconds([setup, setup], 2) == 7 + 100 + 10 + 3  # a reader's setup overlaps the wait
    assert wall_seconds([setup, TrialCost(200.0, (100.0, 10.0), 3.0, "k")], 2) == 200 + 10 + 3  # a slow setup


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


def minutes(line: str, what: str) -> float:
    return float(line.split(f" {what}")[0].rsplit(" ", 1)[-1])


def test_the_estimate_trains_the_flow_rows_nli_stage_once_per_seed():
    """ConSERT Table 3 on one seed: labelled NLI is planned by its size without the hub (BERT-flow's allnli,
    961,735 pairs, one epoch at batch 16, the short batch dropped: 60,108 steps, a dev evaluation every 125 and
    after the last: 481), and six of the seven flow rows read the first one's NLI stage (share_stages): 6 x its
    seconds fewer."""
    spec = load_spec(SMOKE.parent / "consert_supervised.yaml", seeds=[1], check_environment=False)
    unshared = load_spec(SMOKE.parent / "consert_supervised.yaml", {"share_stages": False}, seeds=[1],
                         check_environment=False)
    flow_rows = [t for t in spec.trials if t.config["method"] == "flow"]
    assert len(flow_rows) == 7 and {t.config["eval_every"] for t in flow_rows} == {125}
    shared_lines = estimate(spec, fake_timing, cpus=2, worker_start=1.0)
    unshared_lines = estimate(unshared, fake_timing, cpus=2, worker_start=1.0)
    assert "6 trials read their stages before the last from an earlier trial (share_stages)" in shared_lines[-2]
    assert not any("read their stages" in line for line in unshared_lines)
    nli_stage = 60_108 * 0.5 + 481 * 3.0
    saved = minutes(unshared_lines[-1], "trial-minutes") - minutes(shared_lines[-1], "trial-minutes")
    assert saved == pytest.approx(6 * nli_stage / 60, abs=0.1)
    assert minutes(shared_lines[-1], "minutes of wall") < minutes(unshared_lines[-1], "minutes of wall")


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
    lines = estimate(spec, fake_timing, cpus=2, worker_start=1.0)
    assert lines[-1].startswith(f"estimate: {spec.trials_to_run} trials") and "minutes of wall time" in lines[-1]


def test_trials_sharing_a_gpu_take_longer_by_the_measured_speed_up():
    from sweep.commands.trial_costs import GPU_SHARING

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
    from sweep.spec import environment as spec_environment

    monkeypatch.setattr(spec_environment, "local_gpus", lambda: 1)  # the spec's check sees one GPU here
    text = SMOKE.read_text(encoding="utf-8").replace("resources: {cpu: 1}", "resources: {cpu: 1, gpu: 0.25}")
    assert "gpu: 0.25" in text
    path = tmp_path / "smoke_gpu.yaml"
    path.write_text(text.replace("max_concurrent_trials: 2", "max_concurrent_trials: 4"), encoding="utf-8")
    spec = load_spec(path)
    timing = Timing(setup=2.0, stages=(StageTiming("train", 0.0, 0.0, 0.5, 3.0),), dev=3.0, test=10.0,
                    parameters=22e6)
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
    (stage,) = timing.stages
    assert 0 < stage.step < slow / 10
    assert stage.setup > slow * warmup_steps(config)


def test_graphed_trials_sharing_a_gpu_are_costed_by_their_own_measured_speed_up(tmp_path, monkeypatch):
    """The step-mode rows two to a GPU at BERT-base's size: the graphed rows by the graphed trials' figures."""
    from sweep.spec import environment as spec_environment

    monkeypatch.setattr(spec_environment, "local_gpus", lambda: 1)
    text = (SMOKE.parent / "simcse_step_modes.yaml").read_text(encoding="utf-8")
    path = tmp_path / "step_modes_gpu.yaml"
    path.write_text(text.replace("resources: {cpu: 1}", "resources: {cpu: 1, gpu: 0.5}")
                    .replace("max_concurrent_trials: 1", "max_concurrent_trials: 2"), encoding="utf-8")
    spec = load_spec(path)
    timing = Timing(setup=2.0, stages=(StageTiming("train", 0.0, 0.0, 0.5, 3.0),), dev=3.0, test=10.0,
                    parameters=110e6)
    lines = estimate(spec, lambda config: timing, cpus=16, gpus=1, worker_start=0.0)
    eager, graphed = gpu_sharing_slowdown(2, 110e6), gpu_sharing_slowdown(2, 110e6, graphed=True)
    assert f"2 trials share each GPU: each takes {eager:.2f}x to {graphed:.2f}x as long as alone" in lines[-2]


def test_each_stage_of_a_two_stage_trial_is_timed_on_its_own(tiny_bert, use_tiny_sts, monkeypatch):
    """A flow trial after an NLI stage (fake NLI), its NLI steps made slow: two stage timings, in order, the NLI
    stage's step the slow one, its warm-up step its own setup."""
    import trainers.data.nli_examples as nli
    from sweep.commands.estimate import measure
    from tests.test_flow import NLI
    from trainers.objectives.nli import SBERTNLIObjective

    monkeypatch.setattr(nli, "load_nli_pairs", lambda pair_set: NLI * 8)
    slow = 0.5
    loss = SBERTNLIObjective.loss
    monkeypatch.setattr(SBERTNLIObjective, "loss", lambda self, batch: time.sleep(slow) or loss(self, batch))
    config = get_method("flow").resolve({"model": tiny_bert, "nli_supervision": True, "batch_size": 8,
                                         "eval_precision": "fp32"})
    timing = measure(config)
    nli_stage, flow_stage = timing.stages
    assert (nli_stage.name, flow_stage.name) == ("nli", "flow")
    assert nli_stage.step > slow > 4 * flow_stage.step
    assert nli_stage.setup > slow  # the stage's first step is its setup
    assert timing.dev == flow_stage.dev > 0 and timing.test > timing.dev
