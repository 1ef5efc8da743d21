"""Shared frozen-model outputs: the same numbers as computing them every step, computed once per node."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import build_tiny_bert
from trainers import frozen_outputs
from trainers.encoder import SentenceEncoder
from trainers.frozen_outputs import FrozenOutputs, model_key, weights_digest
from trainers.loop import run_trial
from trainers.objectives.sct_distillation import Teacher
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method

CPU = torch.device("cpu")
TEXTS = ["A man plays a guitar.", "Two dogs run.", "A man plays a guitar.", "The market fell."]


def new_process() -> None:
    """What another trial process of the node sees: nothing in memory, the shards on disk."""
    frozen_outputs._STORES.clear()


def counting(compute):
    calls = []

    def wrapped(texts):
        calls.append(list(texts))
        return compute(texts)

    return wrapped, calls


def fake_model(texts):
    return torch.tensor([[float(len(t)), float(sum(map(ord, t)) % 97)] for t in texts])


def test_each_distinct_text_is_computed_once_per_node(tmp_path):
    new_process()
    key = {"outputs": "unit", "weights": "w"}
    compute, calls = counting(fake_model)
    first = FrozenOutputs(key, tmp_path, max_gb=1.0)
    torch.testing.assert_close(first.get(TEXTS, compute, CPU), fake_model(TEXTS), rtol=0, atol=0)
    assert calls == [["A man plays a guitar."], ["Two dogs run."], ["The market fell."]]  # each alone, once
    first.get(TEXTS[::-1] + ["New one."], compute, CPU)
    assert calls[3:] == [["New one."]] and (first.computed, first.reused) == (4, 5)  # a repeat in a batch is reused too

    new_process()  # another trial on the node: reads the shards, runs nothing
    second = FrozenOutputs(key, tmp_path, max_gb=1.0)
    out = second.get(["New one."] + TEXTS, compute, CPU)
    torch.testing.assert_close(out, fake_model(["New one."] + TEXTS), rtol=0, atol=0)
    assert len(calls) == 4 and (second.computed, second.reused) == (0, 5)
    assert len(list(tmp_path.glob("*/*.pt"))) == 2 and len(list(tmp_path.glob(f"*/{frozen_outputs.KEY_FILE}"))) == 1

    other = FrozenOutputs({**key, "weights": "v"}, tmp_path, max_gb=1.0)  # another key shares nothing
    other.get(TEXTS, compute, CPU)
    assert other.computed == 3


def test_the_bound_evicts_other_keys_and_then_stops_storing(tmp_path):
    new_process()
    compute, _ = counting(lambda texts: fake_model(texts).repeat(1, 5000))  # 40 kB a text
    old = FrozenOutputs({"k": "old"}, tmp_path, max_gb=1.0)
    old.get(TEXTS, compute, CPU)
    key_bytes = sum(p.stat().st_size for p in tmp_path.glob("*/*"))
    # Room for about one key: writing the new key deletes the old one.
    new = FrozenOutputs({"k": "new"}, tmp_path, max_gb=1.5 * key_bytes / 1e9)
    new.get(TEXTS, compute, CPU)
    kept = [json.loads(p.read_text())["k"] for p in tmp_path.glob(f"*/{frozen_outputs.KEY_FILE}")]
    assert kept == ["new"] and len(list(tmp_path.glob("*/*.pt"))) == 1
    new_process()
    none = FrozenOutputs({"k": "none"}, tmp_path, max_gb=0.0)  # bound 0: nothing kept anywhere
    none.get(TEXTS, compute, CPU)
    none.get(TEXTS, compute, CPU)
    assert none.computed == 6 and len(list(tmp_path.iterdir())) == 1


def test_the_key_holds_the_weights_so_a_cut_or_trained_model_is_another_key(tiny_bert):
    whole = SentenceEncoder.from_pretrained(tiny_bert)
    cut = SentenceEncoder.from_pretrained(tiny_bert, keep_layers=1)
    assert weights_digest(whole.model) == weights_digest(SentenceEncoder.from_pretrained(tiny_bert).model)
    assert weights_digest(whole.model) != weights_digest(cut.model)
    with torch.no_grad():
        next(whole.model.parameters()).add_(1e-6)
    assert weights_digest(whole.model) != weights_digest(SentenceEncoder.from_pretrained(tiny_bert).model)
    assert set(model_key(cut.model, cut.tokenizer)) == {"weights", "tokenizer"}


def history(overrides: dict, share: bool) -> tuple[list[dict], dict]:
    reports = []
    final = run_trial({**overrides, "share_frozen_outputs": share}, reports.append)
    return reports[:-1], final


def assert_same_trial(shared, fresh) -> None:
    """The same losses at every evaluation and the same final metrics, bit for bit."""
    (shared_reports, shared_final), (fresh_reports, fresh_final) = shared, fresh
    assert [r["step"] for r in shared_reports] == [r["step"] for r in fresh_reports]
    for ours, theirs in zip(shared_reports, fresh_reports):
        assert (ours["loss"], ours["dev_spearman"]) == (theirs["loss"], theirs["dev_spearman"])
    scores = [name for name in fresh_final if name.startswith("test_") and name != "test_seconds"]
    assert len(scores) > 10 and {n: shared_final[n] for n in scores} == {n: fresh_final[n] for n in scores}


def test_a_frozen_output_does_not_depend_on_the_rest_of_its_batch(tiny_bert, tmp_path):
    new_process()
    config = get_method("sg").resolve({"model": tiny_bert, "projection_hidden": 32, "frozen_outputs_dir": str(tmp_path)})
    fresh = SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_bert))
    fresh.shared = None
    alone = fresh.views([TEXTS[3]])
    assert torch.equal(fresh.views(TEXTS)[3], alone[0])  # a longer sentence in the batch changes nothing
    shared = SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_bert))
    assert torch.equal(shared.views(TEXTS[::-1]), fresh.views(TEXTS[::-1]))


SG_TRIAL = {"method": "sg", "projection_hidden": 32, "batch_size": 8, "train_limit": 24, "epochs": 3,
            "eval_every": 3}


def test_sg_with_shared_views_gives_the_same_trial_and_a_second_trial_runs_no_bert_f(
        tiny_bert, use_tiny_sts, tmp_path, monkeypatch):
    new_process()
    trial = {**SG_TRIAL, "model": tiny_bert, "frozen_outputs_dir": str(tmp_path)}
    forwards = []
    compute = SelfGuidedObjective.compute_views
    monkeypatch.setattr(SelfGuidedObjective, "compute_views", lambda self, s: forwards.append(len(s)) or compute(self, s))
    fresh = history(trial, share=False)
    assert sum(forwards) == 24 * 3 and "frozen_outputs_computed" not in fresh[1]
    forwards.clear()
    shared = history(trial, share=True)
    assert sum(forwards) == 24 and shared[1]["frozen_outputs_computed"] == 24  # each sentence once, 3 epochs
    assert shared[1]["frozen_outputs_reused"] == 24 * 2
    assert_same_trial(shared, fresh)

    new_process()  # a second trial of the sweep, another row and seed, in another process of the node
    forwards.clear()
    _, second = history({**trial, "seed": 7, "loss": "opt1"}, share=True)
    assert forwards == [] and second["frozen_outputs_computed"] == 0 and second["frozen_outputs_reused"] == 24 * 3


def test_sct_with_a_shared_teacher_gives_the_same_trial_and_a_second_trial_runs_no_teacher(
        tiny_bert, use_tiny_sts, tmp_path_factory, monkeypatch):
    new_process()
    teacher = str(build_tiny_bert(tmp_path_factory.mktemp("teacher"), seed=3, hidden_size=48))
    trial = {"method": "sct", "model": tiny_bert, "teacher": teacher, "distillation": "cd", "queue_size": 16,
             "projector_expansion": 1, "batch_size": 8, "train_limit": 24, "epochs": 3, "eval_every": 3,
             "frozen_outputs_dir": str(tmp_path_factory.mktemp("shared"))}
    forwards = []
    compute = Teacher.compute_vectors
    monkeypatch.setattr(Teacher, "compute_vectors", lambda self, t: forwards.append(len(t)) or compute(self, t))
    fresh = history(trial, share=False)
    assert sum(forwards) == 2 * 24 * 3  # two views a step, every epoch
    forwards.clear()
    shared = history(trial, share=True)
    assert sum(forwards) == 24 and shared[1]["frozen_outputs_computed"] == 24
    assert_same_trial(shared, fresh)

    new_process()
    forwards.clear()
    _, second = history({**trial, "seed": 5, "distillation": "mse"}, share=True)
    assert forwards == [] and second["frozen_outputs_computed"] == 0


def test_random_rewrites_never_reach_the_shared_teacher(tiny_bert, tmp_path):
    new_process()
    config = get_method("sct").resolve({"model": tiny_bert, "teacher": tiny_bert, "distillation": "cd",
                                        "frozen_outputs_dir": str(tmp_path)})
    teacher = Teacher(config, 32, torch.Generator().manual_seed(0))
    rewritten = teacher.vectors(TEXTS, fixed_texts=False)
    torch.testing.assert_close(rewritten, teacher.compute_vectors(TEXTS))
    assert teacher.shared.computed == teacher.shared.reused == 0 and not list(tmp_path.glob("*/*.pt"))
    teacher.vectors(TEXTS, fixed_texts=True)
    assert teacher.shared.computed == 3
