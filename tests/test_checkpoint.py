"""Resume exactness: a trial stopped after a checkpoint and resumed from it computes what the
uninterrupted trial computes (same losses, same dev scores, same test metrics), for every trained
method, on the tiny BERT."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import trainers.data.nli_examples as nli
from trainers.metrics import Metric
from trainers.training.checkpoint import TRAINING_STATE, CheckpointWarning, LocalSession, TrialSession, seal
from trainers.training.loop import run_trial

# Not results: how long things took, and how much the shared frozen-output cache (warm in the
# resumed process) and the shared stages saved.
TIMINGS = (*Metric.TIMINGS, Metric.FROZEN_OUTPUTS_COMPUTED, Metric.FROZEN_OUTPUTS_REUSED, Metric.STAGES_REUSED)
NLI = [
    ("A man plays guitar.", "A person makes music.", 0), ("A dog runs.", "A cat sleeps.", 2),
    ("Kids play outside.", "Children are indoors.", 2), ("She cooks dinner.", "Someone prepares food.", 0),
    ("The market fell.", "Stocks went up.", 1), ("Two men talk.", "People speak.", 0),
]


class Interrupted(Exception):
    """Stands in for a killed process."""


class StopAfterCheckpoint(LocalSession):
    """Keeps checkpoints like a sweep would, and stops the trial right after it reports ``step``."""

    def __init__(self, folder, step: int, reports: list):
        super().__init__(folder, reports.append)
        self.step = step

    def report(self, metrics, checkpoint=None):
        super().report(metrics, checkpoint)
        if metrics.get("step") == self.step and "test_avg_spearman" not in metrics:
            raise Interrupted


def comparable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in TIMINGS and k != "resumed_from_step"}


def interrupted_and_resumed(config: dict, stop_at: int, folder) -> tuple[list[dict], dict]:
    before: list[dict] = []
    with pytest.raises(Interrupted):
        run_trial(config, StopAfterCheckpoint(folder, stop_at, before))
    after: list[dict] = []
    final = run_trial(config, LocalSession(folder, after.append))
    return before + after, final


def assert_resumes_exactly(config: dict, folder, stop_at: int = 3) -> None:
    """A trial stopped after its checkpoint at ``stop_at`` and resumed reports what the uninterrupted trial
    reports: the same losses, learning rates and dev scores at every step, and the same final test metrics."""
    reference: list[dict] = []
    expected = run_trial(config, reference.append)
    reports, final = interrupted_and_resumed(config, stop_at, folder)
    assert final["resumed_from_step"] == stop_at
    assert [comparable(r) for r in reports[:-1]] == [comparable(r) for r in reference[:-1]]
    assert comparable(final) == comparable(expected)


@pytest.fixture
def fake_nli(monkeypatch):
    monkeypatch.setattr(nli, "load_nli_pairs", lambda pair_set: list(NLI))


BASE = {"batch_size": 4, "train_limit": 24, "max_steps": 6, "eval_every": 1, "learning_rate": 1e-3}
CASES = {
    "simcse": {"method": "simcse"},
    # Its steps after the warm-up replay one recorded step on copied inputs; the rate lives in a tensor.
    "simcse-cuda-graph": {"method": "simcse", "pad_to_max_length": True, "cuda_graph": True, "max_steps": 9},
    "sg": {"method": "sg", "loss": "sg", "projection_hidden": 16},
    "sg-opt1": {"method": "sg", "loss": "opt1", "projection_hidden": 16},
    "sg-opt2": {"method": "sg", "loss": "opt2", "projection_hidden": 16},
    # BERT_F's dropout (bert_f_dropout, the default) draws its views anew each step from torch's generator, which
    # the checkpoint keeps; without it the steps read a table of views computed before training.
    "sg-opt3": {"method": "sg", "loss": "opt3", "projection_hidden": 16, "checkpoint_every": 2,
                "bert_f_dropout": True},
    "sg-opt3-views-table": {"method": "sg", "loss": "opt3", "projection_hidden": 16, "bert_f_dropout": False},
    "sg-opt1-cuda-graph": {"method": "sg", "loss": "opt1", "projection_hidden": 16, "pad_to_max_length": True,
                           "cuda_graph": True, "max_steps": 9, "bert_f_dropout": True},
    "consert": {"method": "consert", "aug1": "token_cutoff", "aug2": "dropout"},
    # Stopped in their first stage, which they train themselves (share_stages off: the uninterrupted trial's would
    # be read, tests/test_shared_stages.py).
    "consert-sup-unsup": {"method": "consert", "supervision": "sup-unsup", "max_steps": 3, "share_stages": False},
    "consert-joint-unsup-adversarial": {"method": "consert", "supervision": "joint-unsup", "max_steps": 3,
                                        "nli_augmentation": "adversarial", "share_stages": False},
    "consert-joint": {"method": "consert", "supervision": "joint"},
    "sct": {"method": "sct", "queue_size": 10, "projector_expansion": 2},
    "sct-momentum-one-queue": {"method": "sct", "queue_size": 10, "projector_expansion": 2, "reference": "momentum",
                               "queues": "one", "momentum": 0.9},
    "sct-frozen": {"method": "sct", "queue_size": 10, "projector_expansion": 2, "reference": "frozen"},
    # fp16 autocast with a loss scaler, whose state the checkpoint keeps (the authors' precision).
    "consert-fp16": {"method": "consert", "aug1": "token_cutoff", "aug2": "dropout", "train_precision": "fp16"},
    "sct-fp16": {"method": "sct", "queue_size": 10, "projector_expansion": 2, "train_precision": "fp16"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_resumed_trial_equals_the_uninterrupted_one(case, tiny_bert, use_tiny_sts, fake_nli, tmp_path):
    config = {**BASE, "model": tiny_bert, **CASES[case]}
    reference: list[dict] = []
    expected = run_trial(config, reference.append)
    stop_at = 2 if config["max_steps"] == 3 else 3  # the two-stage cases stop in their first stage, at step 2
    reports, final = interrupted_and_resumed(config, stop_at, tmp_path / "checkpoints")

    # sg-opt3 checkpoints every second evaluation: it resumes from step 2 and computes step 3 again.
    assert final["resumed_from_step"] == (2 if case == "sg-opt3" else stop_at)
    expected_by_step = {r["step"]: comparable(r) for r in reference[:-1]}
    assert sorted({r["step"] for r in reports[:-1]}) == sorted(expected_by_step)
    for report in reports[:-1]:  # equal losses, learning rates and dev scores at every step, repeats included
        assert comparable(report) == expected_by_step[report["step"]]
    assert comparable(final) == comparable(expected)  # equal test metrics of the best state


@pytest.mark.parametrize("rewrite_views", ["once", "per_step"])
def test_distillation_and_mlm_views_resume_exactly(rewrite_views, tiny_bert, tiny_teacher, tiny_masked_lm,
                                                   use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "sct", "queue_size": 10, "projector_expansion": 2,
              "distillation": "cd", "teacher": tiny_teacher, "view1": "mlm", "mlm_model": tiny_masked_lm,
              "rewrite_views": rewrite_views}
    assert_resumes_exactly(config, tmp_path / "checkpoints")


def test_checkpoint_leaves_out_what_the_config_rebuilds(tiny_bert, tiny_teacher, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "sct", "queue_size": 10, "projector_expansion": 2,
              "distillation": "cd", "teacher": tiny_teacher, "reference": "frozen"}
    with pytest.raises(Interrupted):
        run_trial(config, StopAfterCheckpoint(tmp_path, 1, []))
    (newest,) = [p for p in sorted(tmp_path.glob("checkpoint_*"))][-1:]
    state = torch.load(newest / TRAINING_STATE, weights_only=True)
    keys = set(state["objective"])
    assert not any(k.startswith(("reference.", "teacher.encoder.")) for k in keys)
    # the student's map into the teacher's space (distillation_map 'encoder') is the encoder's, and trained
    assert {"teacher.queue_list.0.vectors", "queue_list.1.pointer", "encoder.after_pooling.linear.weight"} <= keys
    assert any(k.startswith("encoder.model.") for k in keys) and any(k.startswith("head.") for k in keys)
    assert {"optimizer", "schedule", "generator", "rng", "selection", "position", "timer"} <= set(state)


def assert_a_damaged_newest_checkpoint_falls_back(tiny_bert: str, folder: Path, damage) -> None:
    """A trial stopped after its 4th checkpoint, whose newest training state ``damage`` then spoils, resumes from
    the previous checkpoint with a warning naming the spoilt file, and ends as an uninterrupted trial."""
    config = {**BASE, "model": tiny_bert, "method": "simcse"}
    expected = run_trial(config)
    with pytest.raises(Interrupted):
        run_trial(config, StopAfterCheckpoint(folder, 4, []))
    newest = sorted(folder.glob("checkpoint_*"))[-1] / TRAINING_STATE
    damage(newest)
    with pytest.warns(CheckpointWarning, match=str(newest)):
        final = run_trial(config, LocalSession(folder))
    assert final["resumed_from_step"] == 3  # the previous checkpoint
    assert comparable(final) == comparable(expected)


def test_a_truncated_checkpoint_falls_back_to_the_previous_one_with_a_warning(tiny_bert, use_tiny_sts, tmp_path):
    assert_a_damaged_newest_checkpoint_falls_back(
        tiny_bert, tmp_path, lambda state: state.write_bytes(state.read_bytes()[: state.stat().st_size // 2]))


class WritesMarker:
    """Unpickled, it opens ``marker`` for writing: a stand-in for code planted in a shared checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def plant_payload(state_file: Path, marker: Path) -> None:
    """Rewrite a checkpoint's training state with an object whose unpickling would create ``marker``."""
    state = torch.load(state_file, weights_only=True)
    state["rng"]["planted"] = WritesMarker(marker)  # where a trusting reader would not notice it
    torch.save(state, state_file)
    seal(state_file.parent)  # whoever can write the file can write its seal


def test_a_checkpoint_that_would_run_code_is_refused_and_the_trial_falls_back(tiny_bert, use_tiny_sts, tmp_path):
    marker = tmp_path / "marker"
    assert_a_damaged_newest_checkpoint_falls_back(tiny_bert, tmp_path, lambda state: plant_payload(state, marker))
    assert not marker.exists()  # nothing in the file ran


def test_export_refuses_a_checkpoint_that_would_run_code_in_one_line(tiny_bert, use_tiny_sts, tmp_path,
                                                                       monkeypatch, capsys):
    """`sweep export` (and `sweep evaluate`, through the same reader) of a trial stopped before its end reads
    its training state: a planted one is refused, exit 2, one line, and nothing in it runs."""
    import sweep.commands.export
    from sweep.commands.cli import main

    with pytest.raises(Interrupted):
        run_trial({**BASE, "model": tiny_bert, "method": "simcse"}, StopAfterCheckpoint(tmp_path / "ray", 2, []))
    checkpoint = sorted((tmp_path / "ray").glob("checkpoint_*"))[-1]
    marker = tmp_path / "marker"
    plant_payload(checkpoint / TRAINING_STATE, marker)
    # The trial as MLflow holds it: its checkpoint tag names the folder in Ray's storage.
    run = SimpleNamespace(data=SimpleNamespace(tags={"sweep.checkpoint": str(checkpoint), "sweep.trial_id": "t_00000"},
                                               params={}, metrics={}))
    monkeypatch.setattr(sweep.commands.export, "chosen_trial", lambda *args: run)
    capsys.readouterr()
    assert main(["export", "planted", "--out", str(tmp_path / "out"),
                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 2
    err = capsys.readouterr().err
    assert not marker.exists()
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"checkpoint {checkpoint} is refused" in err and "unpickling" in err
    assert not (tmp_path / "out").exists()


def enospc(path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


class DiskFullsAt(LocalSession):
    """Keeps checkpoints like a sweep would, until the disk fills while the checkpoint of ``step`` is
    copied in: half of its training state is written, then the write fails with ENOSPC."""

    def __init__(self, folder, step: int):
        super().__init__(folder)
        self.step = step

    def report(self, metrics, checkpoint=None):
        if metrics.get("step") != self.step:
            return super().report(metrics, checkpoint)
        copytree = shutil.copytree

        def half_then_full(source, target, *args, **kwargs):
            if Path(source).name != TRAINING_STATE:
                return shutil.copy2(source, target, *args, **kwargs)
            data = Path(source).read_bytes()
            Path(target).write_bytes(data[: len(data) // 2])
            raise enospc(target)

        shutil.copytree = lambda source, target, **kwargs: copytree(source, target, copy_function=half_then_full)
        try:
            super().report(metrics, checkpoint)
        finally:
            shutil.copytree = copytree


def test_a_full_disk_while_a_checkpoint_is_stored_keeps_the_older_one_in_use(tiny_bert, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "simcse"}
    expected = run_trial(config)
    with pytest.raises(OSError, match="No space left on device"):  # the trial fails, saying why
        run_trial(config, DiskFullsAt(tmp_path, 4))
    # Nothing half-written is left under any name; the checkpoints of steps 2 and 3 are as they were.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_000001", "checkpoint_000002"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # nothing is skipped: the newest whole one is used
        final = run_trial(config, LocalSession(tmp_path))
    assert final["resumed_from_step"] == 3
    assert comparable(final) == comparable(expected)


def test_a_full_disk_while_a_checkpoint_is_written_leaves_nothing_and_fails_the_trial(tiny_bert, use_tiny_sts,
                                                                                      tmp_path, monkeypatch):
    """The loop's own temporary copy: the disk fills while torch writes it (half the bytes are out)."""
    config = {**BASE, "model": tiny_bert, "method": "simcse"}
    temporary = tmp_path / "temp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    save, reports = torch.save, []

    def half_then_full(state, path, *args, **kwargs):
        if len(reports) < 3:
            return save(state, path, *args, **kwargs)
        save(state, path, *args, **kwargs)
        Path(path).write_bytes(Path(path).read_bytes()[: Path(path).stat().st_size // 2])
        raise enospc(path)

    monkeypatch.setattr(torch, "save", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        run_trial(config, LocalSession(tmp_path / "kept", reports.append))
    monkeypatch.undo()
    assert [r["step"] for r in reports] == [1, 2, 3] and list(temporary.iterdir()) == []
    final = run_trial(config, LocalSession(tmp_path / "kept"))
    assert final["resumed_from_step"] == 3


def test_a_final_checkpoint_cut_short_is_not_taken_for_the_trials_end(tiny_bert, use_tiny_sts, tmp_path):
    """Its trial.json is whole but its encoder is not (a copy that stopped on a full disk): its seal
    says so, and the trial continues from the training state before it instead of reporting a broken end."""
    config = {**BASE, "model": tiny_bert, "method": "simcse", "max_steps": 4}
    first = run_trial(config, LocalSession(tmp_path, keep=3))
    final_checkpoint = sorted(tmp_path.glob("checkpoint_*"))[-1]
    (weights,) = (final_checkpoint / "encoder").glob("model.safetensors")
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.warns(CheckpointWarning, match=str(weights)):
        again = run_trial(config, LocalSession(tmp_path, keep=3))
    assert again["resumed_from_step"] == 3  # the training state of step 3, not the broken end
    assert comparable(again) == comparable(first)


def test_with_no_readable_checkpoint_the_trial_starts_afresh(tiny_bert, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "simcse", "max_steps": 3}
    expected = run_trial(config)
    with pytest.raises(Interrupted):
        run_trial(config, StopAfterCheckpoint(tmp_path, 1, []))
    for state in tmp_path.glob("checkpoint_*/" + TRAINING_STATE):
        state.write_bytes(b"not a checkpoint")
    with pytest.warns(CheckpointWarning):
        final = run_trial(config, LocalSession(tmp_path))
    assert "resumed_from_step" not in final and comparable(final) == comparable(expected)


def test_final_checkpoint_holds_the_best_encoder_and_the_record(tiny_bert, use_tiny_sts, tmp_path):
    """The kept encoder is the best dev state's, not the last one's: loaded again from the checkpoint, it
    scores on STS-B dev what the best evaluation reported (this config's best step is not its last)."""
    import json

    from transformers import AutoModel

    from trainers.models.encoder import SentenceEncoder
    from trainers.suites.sts import STSEvaluator
    from trainers.training.encoding import encode_fn

    config = {**BASE, "model": tiny_bert, "method": "simcse", "max_steps": 4, "learning_rate": 1e-2}  # too fast
    reports: list[dict] = []
    final = run_trial(config, LocalSession(tmp_path, reports.append, keep=1))
    (last,) = sorted(tmp_path.glob("checkpoint_*"))
    assert not (last / TRAINING_STATE).exists()  # resume state is gone once the trial ends
    record = json.loads((last / "trial.json").read_text())
    assert record["metrics"]["test_avg_spearman"] == final["test_avg_spearman"] and record["config"]["seed"] == 42
    model = AutoModel.from_pretrained(last / "encoder")
    assert model.config.num_hidden_layers == 2

    dev = {r[Metric.STEP]: r[Metric.DEV] for r in reports if Metric.DEV in r and not Metric.is_final(r)}
    best_step = max(dev, key=dev.get)
    assert best_step == final[Metric.BEST_STEP] < max(dev) and dev[best_step] != dev[max(dev)], dev
    kept = SentenceEncoder.from_config(record["config"], weights=str(last / "encoder"))
    scored = STSEvaluator.of_trial(record["config"]).dev(encode_fn(kept, record["config"]))[Metric.DEV]
    assert scored == pytest.approx(dev[best_step], abs=1e-6)


class RecordingSession(TrialSession):
    """Records, for each report, whether it came with a checkpoint folder (None: no checkpoint)."""

    def __init__(self, keeps_checkpoints: bool, may_pause: bool = False):
        super().__init__()
        self.keeps_checkpoints = keeps_checkpoints
        self.may_pause = may_pause
        self.checkpoints_given: list[bool | None] = []

    def report(self, metrics, checkpoint=None):
        self.checkpoints_given.append(None if checkpoint is None else Path(checkpoint).is_dir())
        super().report(metrics, checkpoint)


@pytest.mark.parametrize("keeps, may_pause, given", [
    (False, False, [None, None, None]),
    (False, True, [None, None, None]),
    # control: step 1 checkpoints, step 2 is the last evaluation (its final checkpoint follows), then the end
    (True, False, [True, None, True]),
    # a scheduler may pause the trial at its last evaluation, before the final checkpoint: that one needs its own
    (True, True, [True, True, True]),
])
def test_no_checkpoints_without_a_session_that_keeps_them(tiny_bert, use_tiny_sts, tmp_path, monkeypatch, keeps,
                                                         may_pause, given):
    """A session that keeps no checkpoints is handed none, one that keeps them gets one at the last evaluation only
    where a scheduler may pause the trial there, and nothing is left in the temporary folder either way (the loop's
    own copies are removed once reported)."""
    temporary = tmp_path / "temp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    session = RecordingSession(keeps, may_pause)
    run_trial({**BASE, "model": tiny_bert, "method": "simcse", "max_steps": 2}, session)
    assert session.checkpoints_given == given
    assert list(temporary.iterdir()) == []


def test_a_trial_paused_at_its_last_evaluation_ends_as_the_uninterrupted_one(tiny_bert, use_tiny_sts, tmp_path):
    """What PBT or HyperBand may do at a trial's last evaluation: stop the trial after that report and run it again
    from that report's checkpoint. It trains no step again (it reports only its end) and ends as the trial that
    never stopped."""
    config = {**BASE, "model": tiny_bert, "method": "simcse"}
    expected = run_trial(config)
    paused = StopAfterCheckpoint(tmp_path, BASE["max_steps"], [])
    paused.may_pause = True
    with pytest.raises(Interrupted):
        run_trial(config, paused)
    after: list[dict] = []
    final = run_trial(config, LocalSession(tmp_path, after.append))
    assert final["resumed_from_step"] == BASE["max_steps"] and len(after) == 1
    assert comparable(final) == comparable(expected)


def test_checkpoint_every_zero_writes_none(tiny_bert, use_tiny_sts, tmp_path):
    run_trial({**BASE, "model": tiny_bert, "method": "simcse", "checkpoint_every": 0}, LocalSession(tmp_path, keep=10))
    assert len(list(tmp_path.glob("checkpoint_*"))) == 1  # only the final one


def test_restored_optimizer_takes_the_configs_learning_rate(tiny_bert, use_tiny_sts, tmp_path):
    """What a PBT exploit does: resume a checkpoint under a mutated learning rate."""
    config = {**BASE, "model": tiny_bert, "method": "simcse", "lr_schedule": "constant"}
    with pytest.raises(Interrupted):
        run_trial(config, StopAfterCheckpoint(tmp_path, 2, []))
    reports: list[dict] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_trial({**config, "learning_rate": 5e-4}, LocalSession(tmp_path, reports.append))
    assert [r["lr"] for r in reports[:-1]] == pytest.approx([5e-4] * 4)


def test_a_trial_whose_last_checkpoint_is_its_end_reports_that_end_again(tiny_bert, use_tiny_sts, tmp_path):
    """Ray may run a trial again after it saved its final checkpoint (a killed driver, a PBT exploit of a
    trial that just finished): nothing is trained again, and the same end and encoder are reported."""
    config = {**BASE, "model": tiny_bert, "method": "simcse", "max_steps": 3}
    first = run_trial(config, LocalSession(tmp_path / "a"))
    again: list[dict] = []
    final = run_trial(config, LocalSession(tmp_path / "a", again.append))
    assert len(again) == 1 and final["resumed_from_step"] == 3
    assert comparable(final) == comparable(first)
    kept = sorted((tmp_path / "a").glob("checkpoint_*"))
    assert (kept[-1] / "encoder").is_dir() and (kept[-1] / "trial.json").is_file()


def test_fp16s_loss_scale_resumes_where_it_stood(tiny_bert, use_tiny_sts, tmp_path, monkeypatch):
    """The loss scaler's state is in the checkpoint: with a scale that doubles after every step (a growth
    interval of 1), the resumed trial's scaler ends at the uninterrupted one's 2^8 x 2^6, not at 2^8 x 2^3 as a
    scaler started afresh at step 3 would, and the trials report alike."""
    from trainers.training import precision

    scalers = []

    def doubling(used, device):
        scalers.append(torch.amp.GradScaler(device.type, init_scale=2.0**8, growth_interval=1))
        return scalers[-1]

    monkeypatch.setattr(precision, "loss_scaler", doubling)
    config = {**BASE, "model": tiny_bert, "method": "simcse", "train_precision": "fp16"}
    assert_resumes_exactly(config, tmp_path / "checkpoints")
    uninterrupted, *_, resumed = scalers
    assert uninterrupted.get_scale() == resumed.get_scale() == 2.0 ** (8 + 6)
