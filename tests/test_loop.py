import math
import time

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from trainers.data.sources import load_sts
from trainers.knobs import ConfigError
from trainers.method import Stage
from trainers.models.encoder import SentenceEncoder
from trainers.registry import get_method
from trainers.suites.sts import STSEvaluator
from trainers.training.loop import NonFiniteLossError, run_trial
from trainers.training.optimization import batches, optimization_step
from trainers.training.steps import load_examples, planned_evaluations, total_steps


@pytest.fixture
def base(tiny_bert, use_tiny_sts):
    return {"method": "simcse", "model": tiny_bert, "batch_size": 8, "train_limit": 64, "eval_every": 2}


def test_trial_steps_evaluates_and_reports_test_metrics(base):
    reports = []
    final = run_trial({**base, "max_steps": 5, "eval_grid": "stage"}, reports.append)
    progress = reports[:-1]
    assert [r["step"] for r in progress] == [2, 4, 5]  # every eval_every steps and after the last
    assert all(math.isfinite(r["loss"]) and "dev_spearman" in r for r in progress)
    assert reports[-1] is final and final["steps"] == 5
    assert final["best_dev_spearman"] == max(r["dev_spearman"] for r in progress)
    assert {f"test_{n}_spearman" for n in ("stsb", "sickr", "sts12", "sts16", "avg")} <= set(final)


def test_test_seconds_times_the_final_test(base, monkeypatch):
    original = STSEvaluator.test

    def slow_test(self, encode):
        time.sleep(0.3)
        return original(self, encode)

    monkeypatch.setattr(STSEvaluator, "test", slow_test)
    final = run_trial({**base, "max_steps": 2})
    assert final["test_seconds"] >= 0.3
    parts = final["train_seconds"] + final["test_seconds"] + final["stsb_test_seconds_b16"]
    assert parts < final["wall_seconds"]  # disjoint parts of the trial
    assert final["train_seconds_with_frozen_outputs"] == final["train_seconds"]  # SimCSE has no frozen model


def test_the_inference_time_is_sts_b_test_alone_tokenised_and_encoded_at_batch_16(tiny_bert, use_tiny_sts,
                                                                                   monkeypatch):
    """SG-BERT Table 6's inference (``stsb_test_seconds_b16``): the timed span tokenises STS-B test's distinct
    sentences, also in a process whose token ids are cached (the second trial), and encodes them in
    ceil(n / 16) forwards of 16 (the last fewer) whatever ``eval_batch_size`` is; each forward made 20 ms
    slower there shows in the metric."""
    sts_b = load_sts("local", ["stsb-test"])["stsb-test"]
    sentences = sorted(set(sts_b.sentence1) | set(sts_b.sentence2))
    n = len(sentences)
    timing, tokenised, forwards = [False], [], []

    def timed(original):
        def window(self, encode):
            timing[0] = True
            try:
                return original(self, encode)
            finally:
                timing[0] = False
        return window

    def counted_forward(self, features, **kwargs):
        if timing[0]:
            forwards.append(len(features["input_ids"]))
            time.sleep(0.02)
        return forward(self, features, **kwargs)

    def counted_tokeniser(self, text=None, *args, **kwargs):
        if timing[0]:
            tokenised.append(sorted(text))
        return tokenise(self, text, *args, **kwargs)

    forward, tokenise = SentenceEncoder.forward, PreTrainedTokenizerBase.__call__
    monkeypatch.setattr(STSEvaluator, "stsb_test_seconds", timed(STSEvaluator.stsb_test_seconds))
    monkeypatch.setattr(SentenceEncoder, "forward", counted_forward)
    monkeypatch.setattr(PreTrainedTokenizerBase, "__call__", counted_tokeniser)
    for _ in range(2):
        forwards.clear()
        tokenised.clear()
        final = run_trial({"method": "none", "model": tiny_bert, "eval_batch_size": 128})
        assert tokenised == [sentences]
        assert forwards == [16] * (n // 16) + [n % 16] * (n % 16 > 0) and len(forwards) == math.ceil(n / 16)
        assert final["stsb_test_seconds_b16"] >= 0.02 * len(forwards)


@pytest.mark.parametrize("setting, used", [(0, 128), (7, 7)])
def test_eval_batch_size_0_is_the_devices_size_and_the_trial_records_the_size_used(tiny_bert, use_tiny_sts,
                                                                                    monkeypatch, setting, used):
    """0 is 512 on a CUDA GPU and 128 elsewhere (this CPU): every STS evaluation forward of an untuned trial holds
    at most that many sentences and some hold exactly that many; the trial reports the size it used."""
    from trainers.common_knobs import eval_batch_size
    from trainers.metrics import ReportKey

    assert eval_batch_size(0, "cuda") == 512 and eval_batch_size(0, "cpu") == 128 and eval_batch_size(64, "cuda") == 64
    sizes, forward = [], SentenceEncoder.forward
    monkeypatch.setattr(SentenceEncoder, "forward",
                        lambda self, features, **kwargs: sizes.append(len(features["input_ids"]))
                        or forward(self, features, **kwargs))
    monkeypatch.setattr(STSEvaluator, "stsb_test_seconds", lambda self, encode: 0.0)  # its own batch of 16
    final = run_trial({"method": "none", "model": tiny_bert, "eval_batch_size": setting})
    assert max(sizes) == used and final[ReportKey.EVAL_BATCH_SIZE] == used


def test_learning_rate_warms_up_then_decays(base):
    reports = []
    run_trial({**base, "max_steps": 8, "warmup_ratio": 0.5, "learning_rate": 1e-3}, reports.append)
    lrs = [r["lr"] for r in reports[:-1]]
    assert lrs[0] == pytest.approx(0.5e-3) and lrs[1] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(0.0)


def scripted_dev(monkeypatch, scores: list[float]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """STS-B dev answers ``scores`` in turn; returns (the probe sentence's vector at each dev evaluation, at the
    final test), filled as the trial runs."""
    scripted, probes, tested = iter(scores), [], []

    def fake_dev(self, encode):
        probes.append(encode(["a probe sentence"]).clone())
        return {"dev_spearman": next(scripted)}

    real_test = STSEvaluator.test

    def recording_test(self, encode):
        tested.append(encode(["a probe sentence"]).clone())
        return real_test(self, encode)

    monkeypatch.setattr(STSEvaluator, "dev", fake_dev)
    monkeypatch.setattr(STSEvaluator, "test", recording_test)
    return probes, tested


def test_early_stopping_restores_the_best_state(base, monkeypatch):
    """Scripted dev scores peak at the 2nd evaluation; patience 2 stops at the 4th.
    The final test must see the encoder as it was at the 2nd evaluation."""
    probes, tested = scripted_dev(monkeypatch, [50.0, 60.0, 55.0, 54.0, 99.0])
    final = run_trial({**base, "learning_rate": 1e-3, "patience": 2, "epochs": 10})
    assert final["steps"] == 8 and final["early_stopped"] == 1.0
    assert final["best_step"] == 4 and final["best_dev_spearman"] == 60.0
    assert len(probes) == 4
    torch.testing.assert_close(tested[0], probes[1])
    assert not torch.allclose(tested[0], probes[3])


def test_final_state_last_tests_the_last_state_not_the_best(base, monkeypatch):
    """The scripted dev scores peak at the 2nd of 4 evaluations; final_state 'last' must test the encoder as it
    was at the 4th and report that evaluation's score and step (the default tests the 2nd: the test above)."""
    probes, tested = scripted_dev(monkeypatch, [50.0, 60.0, 55.0, 54.0])
    final = run_trial({**base, "learning_rate": 1e-3, "max_steps": 8, "final_state": "last"})
    assert final["best_step"] == 8 and final["best_dev_spearman"] == 54.0
    torch.testing.assert_close(tested[0], probes[3])
    assert not torch.allclose(tested[0], probes[1])


def test_final_state_last_with_patience_is_refused_where_patience_counts_against_the_best():
    with pytest.raises(ConfigError, match="patience: .*final_state 'last'"):
        get_method("simcse").resolve({"final_state": "last", "patience": 2})
    for rule in ("drops", "epoch_ends"):  # they compare with the last score, or the best epoch end: no kept state
        assert get_method("simcse").resolve({"final_state": "last", "patience": 2, "early_stopping_rule": rule,
                                             "eval_grid": "epoch"})


@pytest.mark.parametrize("grid, rule", [("stage", "drops"), ("epoch", "epoch_ends")])
def test_a_last_state_trial_stops_early_by_drops_or_epoch_ends_and_tests_where_it_stopped(base, monkeypatch, grid,
                                                                                           rule):
    """SG-BERT's code tests the model its fit() leaves (final_state 'last') and stops it by 'drops': scores
    50, 60, 55, 54 drop twice by the 4th evaluation (patience 2), and the test sees the 4th's encoder, not the
    best (2nd). 'epoch_ends' on the epoch grid (eval_every 2, 8 steps an epoch: evaluations at 2, 4, 6, 8, 8 ...)
    counts the epochs' ends alone: its scores 50, 49, 48 stop the trial after the third epoch."""
    scores = [50.0, 60.0, 55.0, 54.0, 99.0] if rule == "drops" else [70.0, 80.0, 90.0, 50.0] + [
        90.0, 90.0, 90.0, 49.0] + [90.0, 90.0, 90.0, 48.0] + [99.0] * 8
    probes, tested = scripted_dev(monkeypatch, scores)
    final = run_trial({**base, "learning_rate": 1e-3, "patience": 2, "epochs": 10, "final_state": "last",
                       "eval_grid": grid, "early_stopping_rule": rule})
    assert final["early_stopped"] == 1.0 and len(probes) == {"drops": 4, "epoch_ends": 12}[rule]
    assert final["steps"] == {"drops": 8, "epoch_ends": 24}[rule]
    assert final["best_dev_spearman"] == scores[len(probes) - 1] and final["best_step"] == final["steps"]
    torch.testing.assert_close(tested[0], probes[-1])
    assert not torch.allclose(tested[0], probes[1])


def test_max_grad_norm_clips_the_step_to_that_norm():
    """With plain SGD at lr 1 the step is minus the (clipped) gradient: its norm is the clip norm; unclipped,
    the gradient's own norm (here 5 x sqrt(8))."""
    for max_grad_norm, expected in ((0.0, 5.0 * math.sqrt(8)), (0.5, 0.5)):
        weight = torch.nn.Parameter(torch.zeros(8))
        optimizer = torch.optim.SGD([weight], lr=1.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        optimization_step((weight * 5.0).sum(), optimizer, schedule, max_grad_norm)
        assert weight.detach().norm().item() == pytest.approx(expected)


def test_nan_loss_fails_the_trial_clearly(base, monkeypatch):
    import trainers.objectives.simcse as simcse

    monkeypatch.setattr(simcse, "info_nce", lambda *args: torch.tensor(float("nan"), requires_grad=True))
    with pytest.raises(NonFiniteLossError, match="training loss is nan at step 1"):
        run_trial({**base, "max_steps": 3})


def test_same_seed_same_result_other_seed_differs(base):
    first = run_trial({**base, "max_steps": 3, "seed": 7})
    again = run_trial({**base, "max_steps": 3, "seed": 7})
    other = run_trial({**base, "max_steps": 3, "seed": 8})
    assert first["test_avg_spearman"] == again["test_avg_spearman"]
    assert first["test_avg_spearman"] != other["test_avg_spearman"]


def test_invalid_config_is_rejected_before_loading(base):
    with pytest.raises(ConfigError) as error:
        run_trial({**base, "batch_size": 1, "temprature": 0.1})
    assert len(error.value.problems) == 2


def test_baseline_evaluates_without_training(tiny_bert, use_tiny_sts):
    reports = []
    final = run_trial({"method": "none", "model": tiny_bert, "pooling": "mean", "pooling_layer": 1}, reports.append)
    assert reports == [final] and final["steps"] == 0
    other_layer = run_trial({"method": "none", "model": tiny_bert, "pooling": "mean", "pooling_layer": 2})
    assert final["test_avg_spearman"] != other_layer["test_avg_spearman"]


def test_batches_cover_the_epoch_and_total_steps_agree():
    generator = torch.Generator().manual_seed(0)
    epoch = batches(21, 4, generator, "keep")
    seen = [i for b in epoch for i in b]
    assert len(set(seen)) == 20 and set(seen) <= set(range(21))
    assert [len(b) for b in epoch] == [4, 4, 4, 4, 4]  # the last batch of one is dropped
    config = {"batch_size": 4, "epochs": 3, "max_steps": 0, "last_batch": "keep"}
    assert total_steps(config, 21) == 15 and total_steps({**config, "max_steps": 7}, 21) == 7
    assert total_steps(config, 22) == 18  # a last batch of two is kept
    assert batches(1, 4, generator, "keep") == [[0]] and total_steps(config, 1) == 3  # one sentence still trains


@pytest.mark.parametrize("n, batch_size", [(23, 4), (24, 4), (21, 4), (3, 4), (4, 4), (9, 5), (50, 7), (0, 4)])
def test_last_batch_drop_trains_the_full_batches_of_the_same_shuffle(n, batch_size):
    """'drop' is BERT-flow's drop_remainder: int(n / batch) full batches, the first of the same shuffled order
    'keep' cuts (a corpus smaller than one batch is one batch all the same); total_steps counts what is cut."""
    kept = batches(n, batch_size, torch.Generator().manual_seed(3), "keep")
    dropped = batches(n, batch_size, torch.Generator().manual_seed(3), "drop")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(3)).tolist()
    full = n // batch_size
    assert dropped == ([order[i * batch_size:(i + 1) * batch_size] for i in range(full)] if full or not n else [order])
    assert dropped == kept[:len(dropped)] and len(kept) - len(dropped) == (n % batch_size > 1 and full > 0)
    for last_batch, cut in (("keep", kept), ("drop", dropped)):
        config = {"batch_size": batch_size, "epochs": 2, "max_steps": 0, "last_batch": last_batch}
        assert total_steps(config, n) == 2 * len(cut)


def test_train_limit_keeps_the_first_or_a_seeded_sample_repeated_on_request():
    """train_subset 'first' keeps the corpus's first N; 'random' N distinct examples drawn with the trial's seed
    (another seed, another draw), in corpus order; train_subset_repeat repeats them floor(all / N) times."""
    corpus = [f"sentence {i}" for i in range(103)]
    stage = Stage("train", "unused:Objective", lambda config: corpus)

    def examples(**knobs):
        config = {"train_limit": 10, "train_subset": "first", "train_subset_repeat": False, "seed": 1, **knobs}
        return load_examples(stage, config)

    assert examples() == corpus[:10] and examples(train_limit=0) == corpus == examples(train_limit=500)
    drawn = examples(train_subset="random")
    assert len(set(drawn)) == 10 and set(drawn) <= set(corpus) and drawn != corpus[:10]
    assert drawn == sorted(drawn, key=corpus.index) == examples(train_subset="random")
    assert examples(train_subset="random", seed=2) != drawn
    assert examples(train_subset="random", train_subset_repeat=True) == drawn * 10  # 103 // 10
    config = {"batch_size": 8, "epochs": 1, "max_steps": 0, "last_batch": "keep"}
    assert total_steps(config, len(examples(train_subset_repeat=True))) == 13


def test_constant_schedule_keeps_the_rate_after_warmup(base):
    reports = []
    run_trial({**base, "max_steps": 6, "warmup_ratio": 0.5, "learning_rate": 1e-3, "lr_schedule": "constant"},
              reports.append)
    assert [r["lr"] for r in reports[:-1]] == pytest.approx([2e-3 / 3, 1e-3, 1e-3])


@pytest.mark.parametrize("knob, value", [("optimizer", "adam"), ("weight_decay", 50.0), ("adam_beta2", 0.5),
                                         ("adam_epsilon", 1e-2), ("max_grad_norm", 1e-3),
                                         ("adam_bias_correction", False)])
def test_optimizer_knobs_change_training(base, knob, value):
    common = {**base, "max_steps": 3, "learning_rate": 1e-3, "weight_decay": 0.1}
    assert run_trial({**common, knob: value})["test_avg_spearman"] != run_trial(common)["test_avg_spearman"]


def test_every_step_trains_in_training_mode_after_an_evaluation_that_left_eval_mode(base, monkeypatch):
    """The loop sets training mode before the first step and after each evaluation, not every step: an
    evaluation that leaves the encoder in eval mode (dropout off) must not reach the next steps."""
    from trainers.objectives.simcse import SimCSEObjective

    objectives, modes = [], []
    real_init, real_loss = SimCSEObjective.__init__, SimCSEObjective.loss

    def remembered_init(self, config, encoder):
        real_init(self, config, encoder)
        objectives.append(self)

    def recording_loss(self, batch):
        modes.append(all(module.training for module in self.modules()))
        return real_loss(self, batch)

    def dev_leaving_eval_mode(self, encode):
        objectives[-1].eval()
        return {"dev_spearman": 50.0}

    monkeypatch.setattr(SimCSEObjective, "__init__", remembered_init)
    monkeypatch.setattr(SimCSEObjective, "loss", recording_loss)
    monkeypatch.setattr(STSEvaluator, "dev", dev_leaving_eval_mode)
    run_trial({**base, "max_steps": 5})
    assert modes == [True] * 5


def authors_early_stop(scores: list[float], limit: int) -> int:
    """How many evaluations galsang/SG-BERT's fit() runs before it stops, written out from its loop: a score
    below the one before adds one to a count that is never reset, starting from a last score of 0."""
    count, last = 0, 0
    for index, score in enumerate(scores, start=1):
        if score < last:
            count += 1
        if count >= limit:
            return index
        last = score
    return len(scores)


def hugging_face_early_stop(scores: list[float], patience: int) -> int:
    """The same for Hugging Face's EarlyStoppingCallback: evaluations in a row without a better score."""
    best, since = float("-inf"), 0
    for index, score in enumerate(scores, start=1):
        best, since = (score, 0) if score > best else (best, since + 1)
        if since >= patience:
            return index
    return len(scores)


@pytest.mark.parametrize("scores", [[50.0, 60.0, 55.0, 61.0, 58.0, 62.0, 57.0, 70.0, 69.0],  # drops, gains between
                                    [50.0, 49.0, 48.0, 47.0, 46.0, 45.0],  # drops in a row
                                    [-1.0, 5.0, 4.0, 6.0, 3.0, 7.0, 2.0]])  # the first, below 0, counts
@pytest.mark.parametrize("patience", [2, 3])
def test_the_drops_rule_stops_where_sg_berts_code_stops_and_no_gain_where_hugging_face_does(scores, patience):
    from trainers.training.optimization import Selection

    def evaluations(rule: str) -> int:
        selection, encoder = Selection(patience, rule=rule), torch.nn.Linear(1, 1)
        for index, score in enumerate(scores, start=1):
            selection.update(score, index, encoder)
            if selection.should_stop:
                return index
        return len(scores)

    assert evaluations("drops") == authors_early_stop(scores, patience)
    assert evaluations("no_gain") == hugging_face_early_stop(scores, patience)


@pytest.mark.parametrize("rule, steps", [("drops", 10), ("no_gain", 16)])
def test_a_trials_early_stopping_rule_decides_where_it_stops(base, monkeypatch, rule, steps):
    """The knob reaches the loop: dev scores that drop twice but never twice in a row stop a 'drops' trial at
    its 5th evaluation (patience 2) and let a 'no_gain' trial run to its last step."""
    scripted_dev(monkeypatch, [50.0, 60.0, 55.0, 61.0, 58.0, 62.0, 59.0, 63.0])
    final = run_trial({**base, "learning_rate": 1e-3, "patience": 2, "epochs": 10, "max_steps": 16,
                       "early_stopping_rule": rule})
    assert final["steps"] == steps and final["early_stopped"] == (1.0 if rule == "drops" else 0.0)


def fit_evaluations(epoch_length: int, every: int, epochs: int) -> list[tuple[int, bool]]:
    """The evaluations of sentence-transformers' fit(), written out from its loop (the SG-BERT, ConSERT and SCT
    authors' copies agree on it): (global step, whether at an epoch's end)."""
    evaluations, step = [], 0
    for _ in range(epochs):
        for training_steps in range(1, epoch_length + 1):
            step += 1
            if training_steps % every == 0:
                evaluations.append((step, False))
        evaluations.append((step, True))
    return evaluations


def fit_stop(evaluations: list[tuple[int, bool]], score: dict[int, float], patience: int, code: str) -> int:
    """The step after which each authors' fit() stops (the last step if it never does), written out from it;
    ``score`` gives the dev score of the state at each step (an evaluation twice at one step scores alike)."""
    if code == "sg":  # galsang/SG-BERT modules.py: the grid's evaluations, a count of drops never reset
        count, last = 0, 0
        for step, end in evaluations:
            if not end:
                count += score[step] < last
                if count >= patience:
                    return step
                last = score[step]
    elif code == "consert":  # yym6472/ConSERT: every evaluation, the epochs' ends too
        best, left = -9999999, patience
        for step, _ in evaluations:
            best, left = (score[step], patience) if score[step] > best else (best, left - 1)
            if left == 0:
                return step
    else:  # mrpeerat/SCT: the epochs' ends alone, against the best of them
        best, count = -9999999, 0
        for step, end in evaluations:
            if end:
                if score[step] > best:
                    best, count = score[step], 0
                if score[step] < best:
                    count += 1
                if count == patience:  # its next epoch does not start
                    return step
    return evaluations[-1][0]


@pytest.mark.parametrize("epoch_length, every", [(7, 3), (6, 3), (5, 8)])  # apart, coinciding, no grid step
@pytest.mark.parametrize("code, rule", [("sg", "drops"), ("consert", "no_gain"), ("sct", "epoch_ends")])
@pytest.mark.parametrize("seed", range(6))
def test_the_epoch_grid_and_the_rules_stop_where_each_authors_fit_stops(epoch_length, every, code, rule, seed):
    """eval_grid 'epoch' evaluates where fit() does, each early-stopping rule counts what its authors' fit()
    counts, and the trial stops at the same step, over random dev scores with ties (one decimal)."""
    import random

    from trainers.training.loop import _Position
    from trainers.training.optimization import Selection
    from trainers.training.steps import evaluations_after

    epochs, patience = 6, 2
    draw = random.Random(seed)
    score = {step: round(draw.uniform(40, 60), 1) for step in range(1, epoch_length * epochs + 1)}
    expected = fit_evaluations(epoch_length, every, epochs)
    steps = epoch_length * epochs
    position, generator = _Position(), torch.Generator().manual_seed(0)
    selection, encoder = Selection(patience, rule=rule), torch.nn.Linear(1, 1)
    seen = []
    while position.stage_step < steps and not selection.should_stop:
        position.next_batch(2 * epoch_length, 2, generator, "keep")
        position.stage_step += 1
        for epoch_end in evaluations_after(position.stage_step, position.batch_in_epoch, epoch_length, steps, every,
                                           "epoch"):
            seen.append((position.stage_step, epoch_end))
            selection.update(score[position.stage_step], position.stage_step, encoder, epoch_end)
    stop = fit_stop(expected, score, patience, code)
    assert position.stage_step == stop
    assert seen == [evaluation for evaluation in expected if evaluation[0] <= stop]


def test_the_stage_and_trainer_grids_count_from_the_stages_start_and_max_steps_ends_an_epoch_grid_with_one():
    from trainers.training.loop import _Position
    from trainers.training.steps import evaluations_after

    def grid(kind: str, steps: int) -> list[tuple[int, list[bool]]]:
        position, generator, due = _Position(), torch.Generator().manual_seed(0), []
        while position.stage_step < steps:
            position.next_batch(10, 2, generator, "keep")  # 5 steps an epoch
            position.stage_step += 1
            if flags := evaluations_after(position.stage_step, position.batch_in_epoch, 5, steps, 3, kind):
                due.append((position.stage_step, flags))
        return due

    assert grid("stage", 11) == [(3, [False]), (6, [False]), (9, [False]), (11, [False])]
    assert grid("trainer", 11) == [(3, [False]), (6, [False]), (9, [False])]  # Hugging Face's: none after step 11
    assert grid("trainer", 2) == [(2, [False])]  # a stage shorter than eval_every: its one state is scored
    assert grid("epoch", 12) == [(3, [False]), (5, [True]), (8, [False]), (10, [True]), (12, [False])]


@pytest.mark.parametrize("grid, every, max_steps", [("epoch", 3, 0), ("epoch", 4, 0), ("epoch", 3, 13),
                                                    ("trainer", 3, 0), ("trainer", 20, 0), ("stage", 3, 0),
                                                    ("stage", 20, 0)])
def test_the_planned_evaluations_are_the_ones_a_trial_scores(base, monkeypatch, grid, every, max_steps):
    """What `sweep plan` counts (planned_evaluations, for --estimate and its warnings) is what the loop scores:
    8 steps an epoch, 2 epochs; grid steps apart from the epochs' ends, on them (scored once), max_steps inside
    an epoch, and eval_every past the stage."""
    scripted_dev(monkeypatch, [50.0] * 20)
    reports = []
    config = {**base, "epochs": 2, "eval_every": every, "eval_grid": grid, "max_steps": max_steps}
    run_trial(config, reports.append)
    assert planned_evaluations(get_method("simcse").resolve(config), 64) == len(reports) - 1


@pytest.mark.parametrize("grid, rule, reported", [("epoch", "epoch_ends", [3, 6, 8, 11, 14, 16, 19, 22, 24]),
                                                  ("stage", "no_gain", list(range(3, 37, 3)))])
def test_a_trials_eval_grid_and_epoch_ends_rule_reach_the_loop(base, monkeypatch, grid, rule, reported):
    """8 steps an epoch, eval_every 3, patience 2. The epoch grid evaluates at steps 3, 6, 8 (the epoch's end),
    11, ...; its epochs' ends score 70, 60, 65, so 'epoch_ends' stops after the third epoch, though the grid's
    scores between them rise. The stage grid evaluates at 3, 6, 9, ... and 'no_gain' stops at the third 99."""
    scripted_dev(monkeypatch, [50.0, 55.0, 70.0, 80.0, 81.0, 60.0, 90.0, 91.0, 65.0] + [99.0] * 20)
    reports = []
    final = run_trial({**base, "learning_rate": 1e-3, "patience": 2, "epochs": 10, "eval_every": 3,
                       "eval_grid": grid, "early_stopping_rule": rule}, reports.append)
    assert [r["step"] for r in reports[:-1]] == reported
    assert final["steps"] == reported[-1] and final["early_stopped"] == 1.0
    best = {"epoch": (91.0, 22), "stage": (99.0, 30)}[grid]  # the best of every evaluation, not of the ends
    assert (final["best_dev_spearman"], final["best_step"]) == best


def test_epoch_ends_needs_the_epoch_grid():
    with pytest.raises(ConfigError, match="early_stopping_rule: 'epoch_ends' counts the evaluations at epochs' ends"):
        get_method("simcse").resolve({"early_stopping_rule": "epoch_ends"})
    assert get_method("simcse").resolve({"early_stopping_rule": "epoch_ends", "eval_grid": "epoch"})


@pytest.mark.parametrize("rule, scores", [("drops", [50.0, 49.0, 60.0, 59.0, 58.0, 70.0]),  # 3 drops
                                          ("epoch_ends", [60.0, 50.0, 70.0, 69.0, 65.0, 68.0])])  # 3 below 70
def test_a_selection_restored_from_its_state_counts_on_as_the_one_it_was_taken_from(tmp_path, rule, scores):
    """Exact resume: a checkpoint's selection state (written and read as a checkpoint's) holds the count and
    the score the rule compares with (the last for 'drops', the best epoch end for 'epoch_ends'); restored after
    the third evaluation, it stops where the uninterrupted one stops, at the sixth."""
    from trainers.training.checkpoint import SelectionState
    from trainers.training.optimization import Selection

    encoder, epoch_end = torch.nn.Linear(1, 1), rule == "epoch_ends"  # 'drops' leaves the epochs' ends out
    whole, first = Selection(3, rule=rule), Selection(3, rule=rule)
    for index, score in enumerate(scores[:3], start=1):
        whole.update(score, index, encoder, epoch_end)
        first.update(score, index, encoder, epoch_end)
    torch.save(vars(first.state(3)), tmp_path / "selection.pt")
    restored = Selection(3, rule=rule)
    restored.restore(SelectionState(**torch.load(tmp_path / "selection.pt", weights_only=True)), encoder)
    for index, score in enumerate(scores[3:], start=4):
        whole.update(score, index, encoder, epoch_end)
        restored.update(score, index, encoder, epoch_end)
        assert (restored.should_stop, restored.evaluations_without_gain) == (whole.should_stop,
                                                                             whole.evaluations_without_gain)
    assert whole.should_stop and restored.should_stop


def test_selection_pooling_pools_the_dev_evaluations_that_select_and_no_other(base):
    """With a learning rate of 0 the weights stay the untuned model's: every dev evaluation scores it pooled
    with selection_pooling (mean), and the test sets with pooling (cls), each as an encoder built with that
    pooling alone scores them."""
    from trainers.metrics import Metric
    from trainers.training.encoding import encode_fn

    frozen = {**base, "max_steps": 2, "eval_every": 1, "learning_rate": 0.0, "final_state": "last"}
    reports = []
    final = run_trial({**frozen, "selection_pooling": "mean"}, reports.append)

    def scores(pooling: str) -> dict[str, float]:
        config = get_method("simcse").resolve({**frozen, "pooling": pooling})
        encoder = SentenceEncoder.from_config(config)
        evaluator = STSEvaluator.of_trial(config)
        return {**evaluator.dev(encode_fn(encoder, config)), **evaluator.test(encode_fn(encoder, config))}

    mean, cls = scores("mean"), scores("cls")
    assert mean[Metric.DEV] != pytest.approx(cls[Metric.DEV], abs=1e-3)
    assert [r[Metric.DEV] for r in reports[:-1]] == pytest.approx([mean[Metric.DEV]] * 2, abs=1e-6)
    assert final[Metric.BEST_DEV] == pytest.approx(mean[Metric.DEV], abs=1e-6)
    assert final[Metric.TEST_AVG] == pytest.approx(cls[Metric.sts(Metric.STS_AVG)], abs=1e-6)


def test_a_flows_dev_evaluations_pool_as_its_flow_reads():
    flow = get_method("flow")
    assert [p.key for p in flow.check(flow.resolve({"selection_pooling": "cls"}))] == ["selection_pooling"]
    assert flow.check(flow.resolve({"selection_pooling": "first_last_avg"})) == []


def test_selection_metric_avg_sts_reaches_the_loop_and_the_evaluations_read_sick_r_dev(base):
    """A trial with selection_metric avg_sts reports, at each evaluation, dev_spearman as the mean of its two
    parts, and selects on it: best_dev_spearman is the best such mean. DCLR selects so by default."""
    reports = []
    final = run_trial({**base, "max_steps": 4, "selection_metric": "avg_sts", "learning_rate": 1e-3},
                      reports.append)
    progress = reports[:-1]
    assert all(r["dev_spearman"] == pytest.approx((r["dev_stsb_spearman"] + r["dev_sickr_spearman"]) / 2)
               for r in progress)
    assert len({r["dev_sickr_spearman"] for r in progress}) > 1  # SICK-R dev was scored, not a constant
    assert final["best_dev_spearman"] == max(r["dev_spearman"] for r in progress)
    assert get_method("dclr").resolve({})["selection_metric"] == "avg_sts"
    with pytest.raises(ConfigError, match="selection_metric: 'avg_sts' reads SICK-R dev"):
        get_method("simcse").resolve({"selection_metric": "avg_sts", "sts_source": "hub"})
