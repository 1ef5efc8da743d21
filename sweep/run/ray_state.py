"""Ray's experiment state kept whole when the driver is killed while Ray writes it.

On local storage Ray writes ``experiment_state-*.json`` in place (``TuneController.save_to_dir`` opens
it with ``"w"``), so a driver killed during that write leaves it cut short, and ``Tuner.restore`` then
starts the experiment again with trials that have no config. :class:`WholeRayState` keeps a copy of each
state Ray finished writing, replaced atomically; :func:`mend` puts it back before a resume. The copy may
be one save older than the state that was cut (Ray saves every few seconds): the trials then continue
from the checkpoints that copy names, and lose no finished work. Storage that is a URI is not concerned:
there Ray writes the state in a local folder and uploads it whole.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ray.tune import Callback

STATE_FILES = "experiment_state-*.json"
WHOLE_SUFFIX = ".whole"


def newest_state(folder: Path) -> Path | None:
    """Ray's newest experiment state in ``folder`` (Ray names each by its session's start, and restores the
    newest)."""
    states = sorted(folder.glob(STATE_FILES))
    return states[-1] if states else None


class WholeRayState(Callback):
    """Copies Ray's experiment state once Ray has written it: Ray asks its callbacks for their own state
    (``get_state``) right after it wrote the experiment's, so the file is whole at that moment."""

    def __init__(self, experiment_dir: str):
        self.folder = None if "://" in experiment_dir else Path(experiment_dir)

    def get_state(self) -> None:
        state = newest_state(self.folder) if self.folder else None
        if state is not None:
            copy = state.with_name(state.name + WHOLE_SUFFIX)
            partial = copy.with_name(copy.name + ".tmp")
            shutil.copyfile(state, partial)
            os.replace(partial, copy)
        return None  # nothing of its own for Ray to keep


def mend(experiment_dir: str) -> Path | None:
    """Put back the last whole copy of Ray's newest experiment state if that state was cut short; returns
    the state mended (None when there was nothing to mend)."""
    if "://" in experiment_dir:
        return None
    state = newest_state(Path(experiment_dir))
    if state is None:
        return None
    try:
        json.loads(state.read_text(encoding="utf-8"))
        return None
    except ValueError:
        copy = state.with_name(state.name + WHOLE_SUFFIX)
        if not copy.is_file():
            return None
        shutil.copyfile(copy, state)
        return state
