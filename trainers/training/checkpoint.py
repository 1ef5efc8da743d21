"""Trial checkpoints: where a trial reports, and the directory it can resume from.

A checkpoint is a directory in one of two layouts, written and read only here:
while a trial trains, a :class:`~trainers.training.checkpoint.TrainingState` (everything
:func:`trainers.training.loop.train` needs to continue exactly); when it has ended, only
what it produced: its best-dev encoder and its
:class:`~trainers.training.checkpoint.FinalRecord`. Restoring opens the newest readable
checkpoint once (:func:`newest_checkpoint`).

Where checkpoints go is the :class:`TrialSession`'s business: inside a sweep
it is Ray Tune's (``tune.report(..., checkpoint=...)`` and
``tune.get_checkpoint()``, see :mod:`sweep.run.engine`); outside Ray a
:class:`LocalSession` keeps them under a local folder; a plain
:class:`TrialSession` reports to a function and keeps none.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

from trainers.training.durable import sync_directory, sync_files

# ---------------------------------------------------------------- the layout

TRAINING_STATE = "training_state.pt"
ENCODER_DIR = "encoder"
FINAL_RECORD = "trial.json"
CHECKPOINT_SEAL = "checkpoint.json"
"""Written last into either layout: every other file's size. A checkpoint without it, or whose files
differ from it, is incomplete (a write that stopped on a full disk, a copy cut short)."""
ENCODER_PREFIX = "encoder."
"""State-dict prefix of the encoder inside an objective's state."""
CHECKPOINT_PREFIX = "checkpoint_"
"""A trial's checkpoint folders are ``checkpoint_NNNNNN``, numbered in the order they were reported: Ray Tune
names them so, and a local session (:class:`trainers.training.checkpoint.LocalSession`) does the same."""


def checkpoint_folder(index: int) -> str:
    """The name of a trial's checkpoint folder number ``index``."""
    return f"{CHECKPOINT_PREFIX}{index:06d}"


def checkpoint_index(name: str) -> int | None:
    """The number of a checkpoint folder named ``checkpoint_NNNNNN`` (None for any other name)."""
    digits = name[len(CHECKPOINT_PREFIX):] if name.startswith(CHECKPOINT_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def checkpoint_uri(checkpoint) -> str:
    """Where a Ray checkpoint (``filesystem``, ``path``) lives, as a path (local storage) or a URI that pyarrow
    opens (s3://, gs://): what the tracker records, and what a warning about a remote checkpoint names (not
    the local folder it was downloaded to)."""
    kind = checkpoint.filesystem.type_name
    if kind == "local":
        return str(checkpoint.path)
    return f"{ {'gcs': 'gs'}.get(kind, kind)}://{checkpoint.path}"


def checkpoint_location(uri: str):
    """(pyarrow filesystem, path) of the checkpoint at a path or URI that :func:`checkpoint_uri` gave (what the
    tracker records); the sweep wraps it in Ray's ``Checkpoint`` (:func:`sweep.run.models.open_checkpoint`)."""
    import pyarrow.fs

    return pyarrow.fs.FileSystem.from_uri(uri if "://" in uri else str(Path(uri).resolve()))


def trial_folder(checkpoint) -> tuple[str, int | None]:
    """The folder of a Ray checkpoint's trial (the trial's own, or its PBT donor's), and the checkpoint's number
    in it (None for a folder not named ``checkpoint_NNNNNN``)."""
    folder, _, name = checkpoint.path.rstrip("/").rpartition("/")
    return folder, checkpoint_index(name)


def sibling_checkpoints(checkpoint) -> list[tuple[int, str]]:
    """(number, path) of the other checkpoints in a Ray checkpoint's trial folder, oldest first, on its filesystem
    (a local folder or a URI's); none for a checkpoint that is not a numbered folder of a trial."""
    import pyarrow.fs

    folder, index = trial_folder(checkpoint)
    if index is None or not folder:
        return []
    entries = checkpoint.filesystem.get_file_info(pyarrow.fs.FileSelector(folder, allow_not_found=True))
    return sorted((found, entry.path) for entry in entries if entry.type == pyarrow.fs.FileType.Directory
                  and (found := checkpoint_index(entry.base_name)) is not None and found != index)


@dataclass
class SelectionState:
    """Model selection on STS-B dev: the best score so far, its step, and its weights (None when they
    are the current weights of the encoder, so a checkpoint does not hold them twice); the evaluations patience
    has counted, the last score (what the 'drops' rule compares; None in checkpoints written before it) and the
    best score at an epoch's end (what the 'epoch_ends' rule compares; None in checkpoints written before it)."""

    best_score: float
    best_step: int
    evaluations_without_gain: int
    best_state: dict[str, Any] | None
    last_score: float | None = None
    epoch_best_score: float | None = None


@dataclass
class TrainingState:
    """Everything :func:`trainers.training.loop.train` needs to continue a stage exactly where it stopped."""

    objective: dict[str, Any]  # the objective's trained state (encoder, heads, queues, ...)
    optimizer: dict[str, Any]
    schedule: dict[str, Any]
    generator: Any  # the batch order's torch.Generator state
    selection: SelectionState
    timer: dict[str, Any]
    position: dict[str, Any]  # stage, step, stage step, evaluations, the epoch's batches and where in it
    rng: dict[str, Any]  # Python, NumPy, torch (and CUDA) RNG states
    config: dict[str, Any]  # the resolved config of the trial
    scaler: dict[str, Any] | None = None  # fp16's loss scaler (its scale and the steps since it last grew)

    @property
    def stage(self) -> int:
        return self.position["stage"]

    @property
    def step(self) -> int:
        return self.position["step"]

    def best_encoder_state(self) -> dict[str, Any]:
        """The best-dev encoder weights: the selection's copy, or the current ones when they are the best."""
        if self.selection.best_state is not None:
            return self.selection.best_state
        return {k[len(ENCODER_PREFIX):]: v for k, v in self.objective.items() if k.startswith(ENCODER_PREFIX)}

    def write(self, directory: Path) -> None:
        """Tensors, lists, dicts, strings and numbers only (the RNG states come so from
        :func:`trainers.training.rng.rng_states`), so that :meth:`read` never unpickles an object."""
        import torch  # here, not at the top: the sweep and reports read the layout without torch

        # Field by field, not dataclasses.asdict: that would deep-copy every tensor first.
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["selection"] = vars(self.selection)
        # As JSON, like trial.json: a sampled knob may be a NumPy number, which only unpickling reads.
        state["config"] = json.dumps(self.config, sort_keys=True)
        torch.save(state, Path(directory) / TRAINING_STATE)

    @classmethod
    def read(cls, directory: Path) -> TrainingState:
        """Raises whatever torch raises for an unreadable file (the caller falls back), and refuses one
        that holds anything but tensors and plain containers: checkpoints live in shared storage that
        others can write, and reading one must never run code from it."""
        import torch

        state = torch.load(Path(directory) / TRAINING_STATE, map_location="cpu", weights_only=True)
        return cls(**{**state, "selection": SelectionState(**state["selection"]),
                      "config": json.loads(state["config"])})


@dataclass
class FinalRecord:
    """A finished trial's ``trial.json``: its resolved config, final metrics, and whether it trained
    (an untuned trial saves no encoder; its config loads it again)."""

    config: dict[str, Any]
    metrics: dict[str, Any]
    trained: bool
    identity: dict[str, Any] = field(default_factory=dict)  # exports: sweep, row, seed, trial, spec, commit

    def write(self, directory: Path) -> None:
        record = asdict(self)
        if not self.identity:
            record.pop("identity")
        (Path(directory) / FINAL_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")

    @classmethod
    def read(cls, directory: Path) -> FinalRecord:
        return cls(**json.loads((Path(directory) / FINAL_RECORD).read_text(encoding="utf-8")))

    @staticmethod
    def exists(directory: Path) -> bool:
        return (Path(directory) / FINAL_RECORD).is_file()


Reporter = Callable[[dict[str, Any]], None]


class CheckpointWarning(UserWarning):
    """A checkpoint could not be read; the trial falls back to an older one or starts afresh."""


class TrialSession:
    """Reports a trial's metrics to a function and keeps no checkpoints (tests, scripts).

    ``may_pause``: a scheduler may stop the trial at any report and run it again later from the checkpoint that
    came with that report (PBT, HyperBand), so the last evaluation needs one too, though the final one follows.
    """

    keeps_checkpoints = False
    may_pause = False

    def __init__(self, reporter: Reporter | None = None):
        self.reporter = reporter

    def report(self, metrics: dict[str, Any], checkpoint: Path | None = None) -> None:
        if self.reporter is not None:
            self.reporter(metrics)

    def checkpoints(self) -> Iterator[Path]:
        """Checkpoint directories to resume from, newest first (none here)."""
        return iter(())

    def source(self, directory: Path) -> str:
        """Where checkpoint ``directory`` (one of :meth:`checkpoints`) is kept, for a warning to name: the
        directory itself here; a session that downloads its checkpoints names the stored one."""
        return str(directory)


class LocalSession(TrialSession):
    """Keeps the newest ``keep`` checkpoints under ``folder`` as ``checkpoint_NNNNNN`` (by report count).

    Each checkpoint is copied in under a temporary name, synced and renamed, so a killed process or a
    full disk never leaves a half-written directory under a final name; a copy that fails is removed and
    its error raised (the older checkpoints are untouched).
    """

    keeps_checkpoints = True

    def __init__(self, folder: str | Path, reporter: Reporter | None = None, keep: int = 2):
        super().__init__(reporter)
        self.folder = Path(folder)
        self.keep = keep

    def _existing(self) -> list[Path]:
        """The checkpoint folders kept, oldest first."""
        found = [path for path in self.folder.glob(f"{CHECKPOINT_PREFIX}*") if checkpoint_index(path.name) is not None]
        return sorted(found, key=lambda path: checkpoint_index(path.name))

    def report(self, metrics: dict[str, Any], checkpoint: Path | None = None) -> None:
        if checkpoint is not None:
            existing = self._existing()
            index = checkpoint_index(existing[-1].name) + 1 if existing else 0
            final = self.folder / checkpoint_folder(index)
            partial = self.folder / f".partial_{index:06d}"
            try:
                shutil.copytree(checkpoint, partial)
                sync_files(partial)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            partial.rename(final)
            sync_directory(self.folder)
            for old in self._existing()[: -self.keep]:
                shutil.rmtree(old)
        super().report(metrics)

    def checkpoints(self) -> Iterator[Path]:
        return iter(reversed(self._existing()))


def seal(directory: Path) -> None:
    """Mark a fully written checkpoint directory whole: its files synced, then :data:`CHECKPOINT_SEAL`
    listing their sizes, itself written by another name, synced and renamed. Copies of the directory
    (Ray's upload to storage, in any order) carry the seal; :func:`incomplete` checks them against it."""
    directory = Path(directory)
    files = sync_files(directory)
    sizes = {path.relative_to(directory).as_posix(): path.stat().st_size for path in files
             if path.name != CHECKPOINT_SEAL}
    partial = directory / f".{CHECKPOINT_SEAL}.partial"
    with partial.open("w", encoding="utf-8") as handle:
        json.dump({"files": sizes}, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    partial.rename(directory / CHECKPOINT_SEAL)
    sync_directory(directory)


def incomplete(directory: Path) -> str | None:
    """Why ``directory`` is not a whole checkpoint (None when it is): no seal, or a file missing or of
    another size than the seal says (a write or copy that stopped on a full disk or a lost node)."""
    directory = Path(directory)
    try:
        sizes = json.loads((directory / CHECKPOINT_SEAL).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{directory} has no readable {CHECKPOINT_SEAL}, so it may be half-written ({type(error).__name__})"
    for name, size in sizes.items():
        path = directory / name
        found = path.stat().st_size if path.is_file() else None
        if found != size:
            return f"{path} is {'missing' if found is None else f'{found} bytes'}, not the {size} bytes written"
    return None


def write_training_state(state: TrainingState) -> Path:
    """A new temporary checkpoint directory holding ``state``, sealed; the caller removes it once reported.
    A failed write (a full disk) leaves nothing behind and raises."""
    directory = Path(tempfile.mkdtemp(prefix="trial-checkpoint-"))
    try:
        state.write(directory)
        seal(directory)
    except BaseException:
        remove(directory)
        raise
    return directory


@dataclass
class FinishedCheckpoint:
    """A trial's final checkpoint, found where it would resume: its record and a copy of the directory
    (to report again; the caller removes it)."""

    record: FinalRecord
    directory: Path


class UnreadableCheckpoint(Exception):
    """Why a checkpoint directory is not read, in one line: incomplete, without its training state, or holding
    one that cannot be read."""


def read_checkpoint(directory: Path) -> FinalRecord | TrainingState:
    """What a checkpoint directory holds, its layout checked first: a finished trial's record, or the training
    state to continue from; :class:`UnreadableCheckpoint` says why neither can be read (and nothing in it ran)."""
    directory = Path(directory)
    problem = incomplete(directory)
    if problem:
        raise UnreadableCheckpoint(problem)
    if FinalRecord.exists(directory):
        return FinalRecord.read(directory)
    if not (directory / TRAINING_STATE).is_file():
        raise UnreadableCheckpoint(f"{directory} has no {TRAINING_STATE}")
    try:
        return TrainingState.read(directory)
    except Exception as error:  # any unreadable file: truncated, or holding what only unpickling would read
        raise UnreadableCheckpoint(f"{directory / TRAINING_STATE} cannot be read ({unreadable(error)})") from error


def newest_checkpoint(session: TrialSession) -> TrainingState | FinishedCheckpoint | None:
    """What the session's newest readable checkpoint holds, opened once: a training state to continue
    from, a finished trial's end, or None (start afresh).

    The end is found when Ray runs a trial again after it saved its end (a driver killed at that moment),
    or when a PBT exploit copies a trial that has just finished. An unreadable checkpoint (truncated,
    partial, from another version) is skipped with a :class:`CheckpointWarning` that names it, and the
    next older one is tried.
    """
    for directory in session.checkpoints():
        directory = Path(directory)
        try:
            found = read_checkpoint(directory)
        except UnreadableCheckpoint as problem:  # never crash the sweep: fall back
            source = session.source(directory)
            where = "" if source == str(directory) else f" (downloaded to {directory})"
            warnings.warn(f"checkpoint {source} is skipped{where}: {problem}; falling back to an older checkpoint "
                          "or a fresh start", CheckpointWarning)
            continue
        if isinstance(found, TrainingState):
            return found
        copy = Path(tempfile.mkdtemp(prefix="trial-final-")) / "checkpoint"
        shutil.copytree(directory, copy)
        return FinishedCheckpoint(FinalRecord.read(copy), copy)
    return None


def unreadable(error: Exception) -> str:
    """Why a checkpoint could not be read, in one line (torch's own refusal of an object ends with
    advice to load the file unsafely, which is not for a file in shared storage)."""
    if isinstance(error, pickle.UnpicklingError):
        return "it holds objects that only full unpickling reads, and unpickling can run code from the file"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def write_final_checkpoint(encoder, record: FinalRecord) -> Path:
    """The trial's product: its best encoder (when it trained one) and its record."""
    directory = Path(tempfile.mkdtemp(prefix="trial-final-"))
    try:
        if record.trained:
            encoder.model.save_pretrained(directory / ENCODER_DIR)
            encoder.tokenizer.save_pretrained(directory / ENCODER_DIR)
            encoder.save_after_pooling(directory / ENCODER_DIR)
        record.write(directory)
        seal(directory)
    except BaseException:
        remove(directory)
        raise
    return directory


def remove(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
