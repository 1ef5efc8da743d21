"""Shared frozen-model outputs: the same numbers as computing them every step, computed once per node."""

from __future__ import annotations

import json
import time

import pytest
import torch

from trainers.metrics import Metric
from trainers.models import frozen_outputs
from trainers.models.encoder import SentenceEncoder
from trainers.models.frozen_outputs import FrozenOutputs, model_key, table_batches, weights_digest
from trainers.objectives.sct_distillation import Teacher
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method
from trainers.training.loop import run_trial

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


def test_the_table_is_one_pass_of_sorted_fixed_batches_computed_once_per_node(tmp_path, monkeypatch):
    new_process()
    monkeypatch.setattr(frozen_outputs, "TABLE_BATCH_SIZE", 2)
    key = {"outputs": "unit", "weights": "w"}
    compute, calls = counting(fake_model)
    first = FrozenOutputs(key, tmp_path, max_gb=1.0)
    first.prepare(TEXTS, compute, CPU)
    # Distinct texts, shortest first, in batches of the fixed size: no trial's batch reaches the table.
    assert calls == [["Two dogs run.", "The market fell."], ["A man plays a guitar."]]
    assert table_batches(TEXTS) == calls
    torch.testing.assert_close(first.get(TEXTS[::-1], compute, CPU), fake_model(TEXTS[::-1]), rtol=0, atol=0)
    assert (first.computed, first.reused) == (3, 4) and len(calls) == 2  # the steps run nothing

    new_process()  # another trial on the node: reads the table from disk, runs nothing
    second = FrozenOutputs(key, tmp_path, max_gb=1.0)
    second.prepare(TEXTS[::-1], compute, CPU)  # the same texts in another order: the same table
    assert torch.equal(second.get(TEXTS, compute, CPU), first.get(TEXTS, compute, CPU))
    assert len(calls) == 2 and second.computed == 0
    assert len(list(tmp_path.glob(f"*/{frozen_outputs.TABLE_FILE}"))) == 1

    FrozenOutputs({**key, "weights": "v"}, tmp_path, max_gb=1.0).prepare(TEXTS, compute, CPU)  # another key
    FrozenOutputs(key, tmp_path, max_gb=1.0).prepare(TEXTS[:2], compute, CPU)  # other texts: another table
    assert len(calls) == 5 and len(list(tmp_path.glob(f"*/{frozen_outputs.TABLE_FILE}"))) == 3


def test_unshared_computes_the_same_table_in_the_trial(tmp_path):
    new_process()
    compute, calls = counting(fake_model)
    shared = FrozenOutputs({"k": 1}, tmp_path / "shared", max_gb=1.0, share=True)
    alone = FrozenOutputs({"k": 1}, tmp_path / "alone", max_gb=1.0, share=False)
    shared.prepare(TEXTS, compute, CPU)
    alone.prepare(TEXTS, compute, CPU)
    assert calls[:len(calls) // 2] == calls[len(calls) // 2:] and not (tmp_path / "alone").exists()
    assert torch.equal(shared.get(TEXTS, compute, CPU), alone.get(TEXTS, compute, CPU))
    assert alone.statistics("x").keys() == {"x_seconds"}  # the pass's time, shared or not; counts when shared
    assert shared.statistics("x").keys() == {"x_computed", "x_reused", "x_seconds"}
    assert (shared.statistics("x")["x_computed"], shared.statistics("x")["x_reused"]) == (3.0, 4.0)


def sleeping(seconds: float, compute):
    """``compute`` that takes at least ``seconds`` a call: a frozen model's forward of known length."""
    def slow(texts):
        time.sleep(seconds)
        return compute(texts)

    return slow


def test_the_pass_is_timed_and_its_time_is_kept_with_the_table(tmp_path, monkeypatch):
    """The table's build time is this trial's pass when it computes it, and the time recorded with the table
    (the builder's, not zero) when it reads it: from disk in another process, or from this process's store."""
    new_process()
    monkeypatch.setattr(frozen_outputs, "TABLE_BATCH_SIZE", 2)  # TEXTS' 3 distinct texts: 2 forwards
    compute, calls = counting(sleeping(0.1, fake_model))
    first = FrozenOutputs({"k": "timed"}, tmp_path, max_gb=1.0)
    first.prepare(TEXTS, compute, CPU)
    built = first.statistics("x")["x_seconds"]
    assert len(calls) == 2 and built >= 0.2
    assert json.loads(next(tmp_path.glob(f"*/{frozen_outputs.KEY_FILE}")).read_text())["build_seconds"] == built
    same_process = FrozenOutputs({"k": "timed"}, tmp_path, max_gb=1.0)
    same_process.prepare(TEXTS, compute, CPU)
    new_process()
    other_process = FrozenOutputs({"k": "timed"}, tmp_path, max_gb=1.0)
    other_process.prepare(TEXTS, compute, CPU)
    assert len(calls) == 2  # neither ran the model...
    assert same_process.statistics("x")["x_seconds"] == other_process.statistics("x")["x_seconds"] == built
    alone = FrozenOutputs({"k": "timed"}, tmp_path / "alone", max_gb=1.0, share=False)
    alone.prepare(TEXTS, compute, CPU)  # ...this one does, and times its own pass
    assert len(calls) == 4 and alone.statistics("x")["x_seconds"] >= 0.2


def test_sg_training_time_counts_bert_fs_pass_in_every_trial_that_reads_it(
        tiny_bert, use_tiny_sts, tmp_path, monkeypatch):
    """SG-BERT Table 6's training time (``train_seconds_with_frozen_outputs``) is the steps plus the table of
    BERT_F's views: with BERT_F's pass made 0.5 s slower, it grows by at least that; a second trial that reads the
    table from disk, running no BERT_F, counts the builder's recorded time."""
    new_process()
    trial = {**SG_TRIAL, "model": tiny_bert, "frozen_outputs_dir": str(tmp_path), "epochs": 1}
    compute = SelfGuidedObjective.compute_views
    monkeypatch.setattr(SelfGuidedObjective, "compute_views", lambda self, s: time.sleep(0.5) or compute(self, s))
    _, built = history(trial, share=True)
    assert built["frozen_outputs_computed"] == 24 and built["frozen_outputs_seconds"] >= 0.5
    assert built["train_seconds_with_frozen_outputs"] == built["train_seconds"] + built["frozen_outputs_seconds"]
    new_process()
    monkeypatch.setattr(SelfGuidedObjective, "compute_views", lambda self, s: pytest.fail("BERT_F ran"))
    _, read = history({**trial, "seed": 7}, share=True)
    assert read["frozen_outputs_computed"] == 0 and read["frozen_outputs_seconds"] == built["frozen_outputs_seconds"]
    assert read["train_seconds_with_frozen_outputs"] >= read["train_seconds"] + 0.5


def test_a_table_past_the_bound_falls_back_to_batched_steps_and_evicts_other_tables(tmp_path):
    new_process()
    compute, calls = counting(lambda texts: fake_model(texts).repeat(1, 5000))  # 40 kB a text
    FrozenOutputs({"k": "old"}, tmp_path, max_gb=1.0).prepare(TEXTS, compute, CPU)
    table_bytes = sum(p.stat().st_size for p in tmp_path.glob("*/*"))
    # Room for about one table: writing the new one deletes the old one.
    FrozenOutputs({"k": "new"}, tmp_path, max_gb=1.5 * table_bytes / 1e9).prepare(TEXTS, compute, CPU)
    kept = [json.loads(p.read_text())["k"] for p in tmp_path.glob(f"*/{frozen_outputs.KEY_FILE}")]
    assert kept == ["new"]
    new_process()
    for share in (True, False):  # 3 texts x 40 kB past a 0.1 MB bound: never one text at a time, shared or not
        calls.clear()
        small = FrozenOutputs({"k": "small"}, tmp_path, max_gb=1e-4, share=share)
        small.prepare(TEXTS, compute, CPU)
        assert small.table is None and len(calls) == 1  # the first batch told the size
        torch.testing.assert_close(small.get(TEXTS, compute, CPU), compute(TEXTS), rtol=0, atol=0)
        assert calls[1] == TEXTS and small.computed == 4
    assert kept == ["new"] and len(list(tmp_path.glob(f"*/{frozen_outputs.TABLE_FILE}"))) == 1


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
    scores = [name for name in fresh_final if name.startswith("test_") and name not in Metric.TIMINGS]
    assert len(scores) > 10 and {n: shared_final[n] for n in scores} == {n: fresh_final[n] for n in scores}


def test_the_table_equals_a_direct_batched_forward_of_the_same_sorted_batches(tiny_bert, tmp_path, monkeypatch):
    new_process()
    monkeypatch.setattr(frozen_outputs, "TABLE_BATCH_SIZE", 2)
    texts = TEXTS + ["A dog.", "Someone is slicing a tomato with a very large knife."]
    config = get_method("sg").resolve({"model": tiny_bert, "projection_hidden": 32, "bert_f_dropout": False,
                                       "frozen_outputs_dir": str(tmp_path)})
    objective = SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_bert))
    objective.prepare(texts)
    direct = {t: row for batch in table_batches(texts) for t, row in zip(batch, objective.compute_views(batch))}
    assert torch.equal(objective.views(texts), torch.stack([direct[t] for t in texts]))
    assert objective.views(texts).dtype == torch.float32  # BERT_F's output precision, [texts, views, width]

    teacher_config = get_method("sct").resolve({"model": tiny_bert, "teacher": tiny_bert, "distillation": "cd",
                                                "frozen_outputs_dir": str(tmp_path)})
    teacher = Teacher(teacher_config, 32, torch.Generator().manual_seed(0))
    teacher.prepare(texts)
    direct = {t: row for batch in table_batches(texts) for t, row in zip(batch, teacher.compute_vectors(batch))}
    assert torch.equal(teacher.vectors(texts, fixed_texts=True), torch.stack([direct[t] for t in texts]))


SG_TRIAL = {"method": "sg", "projection_hidden": 32, "batch_size": 8, "train_limit": 24, "epochs": 3,
            "eval_every": 3, "bert_f_dropout": False}  # BERT_F's views in a table


def test_sg_with_shared_views_gives_the_same_trial_and_a_second_trial_runs_no_bert_f(
        tiny_bert, use_tiny_sts, tmp_path, monkeypatch):
    new_process()
    trial = {**SG_TRIAL, "model": tiny_bert, "frozen_outputs_dir": str(tmp_path)}
    forwards = []
    compute = SelfGuidedObjective.compute_views
    monkeypatch.setattr(SelfGuidedObjective, "compute_views",
                        lambda self, s: forwards.append(len(s)) or compute(self, s))
    fresh = history(trial, share=False)
    assert forwards == [24] and "frozen_outputs_computed" not in fresh[1]  # one batched pass, in the trial
    assert not list(tmp_path.iterdir())
    forwards.clear()
    shared = history(trial, share=True)
    assert forwards == [24] and shared[1]["frozen_outputs_computed"] == 24  # the same pass, kept on disk
    assert shared[1]["frozen_outputs_reused"] == 24 * 3  # every step reads its rows, 3 epochs
    assert_same_trial(shared, fresh)

    new_process()  # a second trial of the sweep, another row and seed, in another process of the node
    forwards.clear()
    _, second = history({**trial, "seed": 7, "loss": "opt1"}, share=True)
    assert forwards == [] and second["frozen_outputs_computed"] == 0 and second["frozen_outputs_reused"] == 24 * 3


SCT_TRIAL = {"method": "sct", "distillation": "cd", "queue_size": 16, "projector_expansion": 1, "batch_size": 8,
             "train_limit": 24, "epochs": 3, "eval_every": 3}


def recording_teacher(monkeypatch) -> tuple[list[int], dict[str, list[torch.Tensor]]]:
    """Teacher forwards (their sizes) and, per fixed text, every teacher vector a step received."""
    forwards: list[int] = []
    received: dict[str, list[torch.Tensor]] = {}
    compute, vectors = Teacher.compute_vectors, Teacher.vectors
    monkeypatch.setattr(Teacher, "compute_vectors", lambda self, t: forwards.append(len(t)) or compute(self, t))

    def recorded(self, texts, fixed_texts):
        out = vectors(self, texts, fixed_texts)
        for text, row in zip(texts, out):
            received.setdefault(text, []).append(row.clone())
        return out

    monkeypatch.setattr(Teacher, "vectors", recorded)
    return forwards, received


def test_sct_with_a_shared_teacher_gives_the_same_trial_and_a_second_trial_runs_no_teacher(
        tiny_bert, tiny_teacher, use_tiny_sts, tmp_path_factory, monkeypatch):
    new_process()
    trial = {**SCT_TRIAL, "model": tiny_bert, "teacher": tiny_teacher,
             "frozen_outputs_dir": str(tmp_path_factory.mktemp("shared"))}
    forwards, _ = recording_teacher(monkeypatch)
    fresh = history(trial, share=False)
    assert forwards == [24]  # one pass over the corpus sentences (both views encode the plain sentence)
    forwards.clear()
    shared = history(trial, share=True)
    assert forwards == [24] and shared[1]["frozen_outputs_computed"] == 24
    assert_same_trial(shared, fresh)

    new_process()
    forwards.clear()
    _, second = history({**trial, "seed": 5, "distillation": "mse"}, share=True)
    assert forwards == [] and second["frozen_outputs_computed"] == 0


def test_a_trial_with_another_batch_size_finds_the_same_teacher_vectors(
        tiny_bert, tiny_teacher, use_tiny_sts, tmp_path_factory, monkeypatch):
    new_process()
    trial = {**SCT_TRIAL, "model": tiny_bert, "teacher": tiny_teacher, "epochs": 1,
             "frozen_outputs_dir": str(tmp_path_factory.mktemp("shared"))}
    forwards, received = recording_teacher(monkeypatch)
    history(trial, share=True)
    by_eight = {text: rows[0] for text, rows in received.items()}
    for share in (True, False):
        new_process()
        forwards.clear()
        received.clear()
        history({**trial, "batch_size": 3}, share=share)
        assert forwards == ([] if share else [24])  # shared: the batch-8 trial's table, read from disk
        assert received.keys() == by_eight.keys()
        assert all(torch.equal(row, by_eight[text]) for text, rows in received.items() for row in rows)


def test_random_rewrites_never_reach_the_teacher_table(tiny_bert, tmp_path):
    new_process()
    config = get_method("sct").resolve({"model": tiny_bert, "teacher": tiny_bert, "distillation": "cd",
                                        "frozen_outputs_dir": str(tmp_path)})
    teacher = Teacher(config, 32, torch.Generator().manual_seed(0))
    teacher.prepare(TEXTS)
    computed = teacher.table.computed
    rewritten = ["A man plays a violin.", "Two cats run."]
    torch.testing.assert_close(teacher.vectors(rewritten, fixed_texts=False), teacher.compute_vectors(rewritten))
    assert (teacher.table.computed, teacher.table.reused) == (computed, 0)  # one batch, outside the table
    with pytest.raises(KeyError):
        teacher.vectors(rewritten, fixed_texts=True)  # not a row: a rewrite never enters the table
    teacher.vectors(TEXTS, fixed_texts=True)
    assert teacher.table.reused == 4
