"""A trial run's life and its checkpoint, each in one place: the run written by its one owner
(:mod:`sweep.tracking.trial_run`), read back through its typed identity (:func:`results.reader.run_identity`)
and its typed data tags (:func:`results.reader.trial_tags`), its checkpoint's layout read by
:mod:`trainers.training.checkpoint` only. Read from the source, as the layers' test reads imports."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lines_matching(pattern: str, folders: tuple[str, ...], but: frozenset[str] = frozenset()) -> list[str]:
    """``path:line: text`` of every line of the Python files under ``folders`` (but those of ``but``) that
    ``pattern`` matches."""
    found = re.compile(pattern)
    return [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))
            if path.relative_to(ROOT).as_posix() not in but
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if found.search(line)]


def test_no_ui_tag_is_read_as_data():
    """A trial's row, seed(s), method, axes and identity JSON are read from its typed identity, decoded in
    results.reader alone; the readable tags beside it are written (results.record) for the MLflow UI."""
    assert lines_matching(r"Tag\.(ROW|SEED|SEEDS|METHOD|AXES|IDENTITY)\b", ("sweep", "reports", "results"),
                          frozenset({"results/record.py", "results/reader.py"})) == []


def test_a_trial_runs_data_tags_are_read_through_their_typed_view():
    """A trial run's checkpoint, model state, trial key, reuse marks, evaluation keys and the rest are read
    (and their JSON and "true" decoded) in results.reader alone (trial_tags); everywhere else reads the typed
    view. The data tags are those trial_tags reads; writing them (``tags[Tag.X] = ...``) is the writers' and is
    not matched."""
    from results.reader import trial_tags

    data_tags = sorted(set(re.findall(r"\bTag\.(\w+)", inspect.getsource(trial_tags))))
    assert {"CHECKPOINT", "MODEL", "TRIAL_KEY", "REUSED_FROM", "EVALUATION_KEYS"} <= set(data_tags)
    names = "|".join(data_tags)
    read = rf"tags(\.get\(|\[)Tag\.({names})\b(?!\]\s*=[^=])|\bTag\.({names})\s+(not\s+)?in\b"
    assert lines_matching(read, ("sweep", "reports", "results"), frozenset({"results/reader.py"})) == []


def test_the_tracker_and_glue_write_trial_runs_through_their_owner():
    """Logging to a trial run and ending it is sweep.tracking.trial_run's: the Tune callback and GLUE hand it
    events (which wait in the journal while a tracking server does not answer), never the store."""
    assert lines_matching(r"\.(log_batch|set_terminated|log_metric)\(",
                          ("sweep/tracking", "sweep/run"), frozenset({"sweep/tracking/trial_run.py",
                                                                      "sweep/run/retention.py"})) == []


def test_a_checkpoints_layout_and_its_trial_folder_are_read_in_one_module():
    """Whether a checkpoint is whole, what it holds and which checkpoints lie beside it are worked out by
    trainers.training.checkpoint (read_checkpoint, sibling_checkpoints), for the resume and the export alike."""
    assert lines_matching(r"\b(incomplete|checkpoint_index|TrainingState\.read|FileSystem\.from_uri)\(",
                          ("sweep", "trainers", "reports", "results"),
                          frozenset({"trainers/training/checkpoint.py", "sweep/spec/variants.py"})) == []


def test_an_encoders_fate_at_a_sweeps_end_is_written_by_the_owner_and_waits_while_the_store_is_down(
        tmp_path, monkeypatch):
    """keep_models' kept/deleted tag goes through the run's owner: journalled while the tracking server does not
    answer, written in order once it does."""
    import json
    from types import SimpleNamespace

    from results.record import ModelState, Tag
    from sweep.tracking import journal
    from sweep.tracking.trial_run import TrialRuns

    up, written = {"now": False}, []

    def set_tag(run_id: str, key: str, value: str) -> None:
        if not up["now"]:
            raise ConnectionError("the tracking server does not answer")
        written.append((run_id, key, value))

    monkeypatch.setattr(journal.PendingWrites, "_answers", lambda self: up["now"])
    runs = TrialRuns(SimpleNamespace(set_tag=set_tag), "1", "parent", {}, "http://127.0.0.1:9",
                     tmp_path / "journal.json", note=lambda line: None)
    runs.model_state("run-1", ModelState.KEPT)
    assert written == [] and runs.waiting == 1
    assert "run-1" in json.dumps(json.loads((tmp_path / "journal.json").read_text(encoding="utf-8")))
    up["now"] = True
    runs.model_state("run-2", ModelState.DELETED)
    runs.record({"kind": "model", "run": "run-3", "state": ModelState.UNTRAINED}, at_once=True)
    assert written == [("run-1", Tag.MODEL, ModelState.KEPT), ("run-2", Tag.MODEL, ModelState.DELETED),
                       ("run-3", Tag.MODEL, ModelState.UNTRAINED)]
