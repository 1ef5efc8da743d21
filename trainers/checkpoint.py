"""Trial checkpoints: where a trial reports, and the directory it can resume from.

A checkpoint is a directory. While a trial trains, it holds
``training_state.pt``: everything :func:`trainers.loop.train` needs to continue
exactly (the objective's trained state, optimizer, LR schedule, stage, step,
position in the epoch and the epoch's batch order, RNG states, and the model
selection state with the best encoder weights). When the trial ends, its last
checkpoint holds only what it produced: ``encoder/`` (the best-dev encoder as
a Hugging Face folder, model and tokenizer) and ``trial.json`` (the resolved
config and the final metrics); the resume state is gone.

Where checkpoints go is the :class:`TrialSession`'s business: inside a sweep
it is Ray Tune's (``tune.report(..., checkpoint=...)`` and
``tune.get_checkpoint()``, see :mod:`sweep.engine`); outside Ray a
:class:`LocalSession` keeps them under a local folder; a plain
:class:`TrialSession` reports to a function and keeps none.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch

TRAINING_STATE = "training_state.pt"
ENCODER_DIR = "encoder"
TRIAL_RECORD = "trial.json"

Reporter = Callable[[dict[str, Any]], None]


class CheckpointWarning(UserWarning):
    """A checkpoint could not be read; the trial falls back to an older one or starts afresh."""


class TrialSession:
    """Reports a trial's metrics to a function and keeps no checkpoints (tests, scripts)."""

    keeps_checkpoints = False

    def __init__(self, reporter: Reporter | None = None):
        self.reporter = reporter

    def report(self, metrics: dict[str, Any], checkpoint: Path | None = None) -> None:
        if self.reporter is not None:
            self.reporter(metrics)

    def checkpoints(self) -> Iterator[Path]:
        """Checkpoint directories to resume from, newest first (none here)."""
        return iter(())


class LocalSession(TrialSession):
    """Keeps the newest ``keep`` checkpoints under ``folder`` as ``checkpoint_NNNNNN`` (by report count).

    Each checkpoint is copied in under a temporary name and renamed, so a killed
    process never leaves a half-written directory under a final name.
    """

    keeps_checkpoints = True

    def __init__(self, folder: str | Path, reporter: Reporter | None = None, keep: int = 2):
        super().__init__(reporter)
        self.folder = Path(folder)
        self.keep = keep

    def _existing(self) -> list[Path]:
        return sorted(self.folder.glob("checkpoint_[0-9]*"))

    def report(self, metrics: dict[str, Any], checkpoint: Path | None = None) -> None:
        if checkpoint is not None:
            existing = self._existing()
            index = int(existing[-1].name.split("_")[1]) + 1 if existing else 0
            final = self.folder / f"checkpoint_{index:06d}"
            partial = self.folder / f".partial_{index:06d}"
            shutil.copytree(checkpoint, partial)
            partial.rename(final)
            for old in self._existing()[: -self.keep]:
                shutil.rmtree(old)
        super().report(metrics)

    def checkpoints(self) -> Iterator[Path]:
        return iter(reversed(self._existing()))


def rng_states() -> dict[str, Any]:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def write_training_state(state: Mapping[str, Any]) -> Path:
    """A new temporary checkpoint directory holding ``state``; the caller removes it once reported."""
    directory = Path(tempfile.mkdtemp(prefix="trial-checkpoint-"))
    torch.save(dict(state), directory / TRAINING_STATE)
    return directory


def read_training_state(session: TrialSession) -> dict[str, Any] | None:
    """The newest readable training state of ``session``, or None.

    An unreadable checkpoint (truncated, partial, from another version) is
    skipped with a :class:`CheckpointWarning` that names it; with none left,
    the trial starts afresh.
    """
    for directory in session.checkpoints():
        path = Path(directory) / TRAINING_STATE
        if not path.is_file():
            if not (Path(directory) / TRIAL_RECORD).is_file():
                warnings.warn(f"checkpoint {directory} has no {TRAINING_STATE}; it is skipped", CheckpointWarning)
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:  # any unreadable file: fall back, never crash the sweep
            warnings.warn(f"checkpoint {path} cannot be read ({type(error).__name__}: {error}); "
                          "falling back to an older checkpoint or a fresh start", CheckpointWarning)
    return None


def finished_trial(session: TrialSession) -> tuple[dict[str, Any], Path] | None:
    """When the session's newest checkpoint is a trial's final one (its record and best encoder), that
    record and a copy of the checkpoint: the trial has nothing left to train. This happens when Ray runs
    a trial again after it saved its end (a driver killed at that moment), or when a PBT exploit copies
    a trial that has just finished."""
    for directory in session.checkpoints():
        record = Path(directory) / TRIAL_RECORD
        if not record.is_file():
            return None
        copy = Path(tempfile.mkdtemp(prefix="trial-final-")) / "checkpoint"
        shutil.copytree(directory, copy)
        return json.loads(record.read_text(encoding="utf-8")), copy
    return None


def write_final_checkpoint(encoder, config: Mapping[str, Any], metrics: Mapping[str, Any], trained: bool) -> Path:
    """The trial's product: its best encoder (when it trained one) and its record."""
    directory = Path(tempfile.mkdtemp(prefix="trial-final-"))
    if trained:
        encoder.model.save_pretrained(directory / ENCODER_DIR)
        encoder.tokenizer.save_pretrained(directory / ENCODER_DIR)
    record = {"config": dict(config), "metrics": {k: v for k, v in metrics.items() if _is_scalar(v)}, "trained": trained}
    (directory / TRIAL_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return directory


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def remove(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
