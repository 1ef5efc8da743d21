"""Ray's experiment and searcher states kept whole when the driver is killed while Ray writes them.

On local storage Ray writes ``experiment_state-*.json`` in place (``TuneController.save_to_dir`` opens
it with ``"w"``), so a driver killed during that write leaves it cut short, and ``Tuner.restore`` then
starts the experiment again with trials that have no config. :class:`WholeRayState` keeps a copy of each
state Ray finished writing, replaced atomically; :func:`mend` puts it back before a resume. The copy may
be one save older than the state that was cut (Ray saves every few seconds; a few saves, for a state slow to read
back): the trials then continue
from the checkpoints that copy names, and lose no finished work. Storage that is a URI is not concerned:
there Ray writes the state in a local folder and uploads it whole.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from pathlib import Path

from ray.tune import Callback
from ray.tune.search import Searcher
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.search_generator import SearchGenerator

STATE_FILES = "experiment_state-*.json"
SEARCHER_STATE_FILES = tuple(template.format("*") for template in (
    BasicVariantGenerator.CKPT_FILE_TMPL, SearchGenerator.CKPT_FILE_TMPL, Searcher.CKPT_FILE_TMPL))
"""The search algorithm's state, which Ray saves beside the experiment's (cloudpickle) and restores first, and a
searcher's own (Optuna's study, HyperOpt's trials): one cut short (EOFError) makes Ray start the experiment again."""
WHOLE_SUFFIX = ".whole"
CHECK_SHARE = 0.02
"""The most of the driver's time that reading a state back may take: a state whose check took t seconds is checked
again t / CHECK_SHARE later, not at each of Ray's saves (an Optuna searcher's state of 3,000 trials, 1.8 MB, takes
0.15 s to unpickle on a 2-core EPYC: every 7.7 s; a JSON state of a few trials, every save)."""


def newest_state(folder: Path, pattern: str = STATE_FILES) -> Path | None:
    """Ray's newest state file of ``pattern`` in ``folder`` (Ray names each by its session's start, and restores
    the newest)."""
    states = sorted(folder.glob(pattern))
    return states[-1] if states else None


def is_whole(state: Path) -> bool:
    """Whether Ray can read ``state`` back: JSON for the experiment's, a pickle for the searcher's."""
    try:
        if state.name.startswith(STATE_FILES.split("*")[0]):
            json.loads(state.read_text(encoding="utf-8"))
        else:
            with state.open("rb") as file:
                pickle.load(file)
        return True
    except (ValueError, EOFError, pickle.UnpicklingError):
        return False
    except Exception:  # noqa: BLE001 - whole but not readable here (a class this process lacks): Ray's to read
        return True


class WholeRayState(Callback):
    """Copies Ray's experiment and searcher states once Ray has written them: Ray asks its callbacks for their
    own state (``get_state``) right after it wrote those, so the files are whole at that moment (a file that
    is not, the sync of an earlier save still copying it, is left for the next save). A state that takes long
    to read back is checked and copied less often (:data:`CHECK_SHARE`): its copy may then be a few saves old."""

    def __init__(self, experiment_dir: str):
        self.folder = None if "://" in experiment_dir else Path(experiment_dir)
        self.due: dict[str, float] = {}  # pattern -> when (time.monotonic()) its state is checked next

    def get_state(self) -> None:
        for pattern in (STATE_FILES, *SEARCHER_STATE_FILES) if self.folder else ():
            if time.monotonic() < self.due.get(pattern, 0.0):
                continue
            state = newest_state(self.folder, pattern)
            if state is None:
                continue
            started = time.monotonic()
            whole = is_whole(state)
            self.due[pattern] = started + (time.monotonic() - started) / CHECK_SHARE
            if whole:
                copy = state.with_name(state.name + WHOLE_SUFFIX)
                partial = copy.with_name(copy.name + ".tmp")
                shutil.copyfile(state, partial)
                os.replace(partial, copy)
        return None  # nothing of its own for Ray to keep


def mend(experiment_dir: str) -> list[Path]:
    """Put back the last whole copy of each of Ray's newest states (the experiment's, the searcher's) that was
    cut short; returns the states mended."""
    if "://" in experiment_dir:
        return []
    mended = []
    for pattern in (STATE_FILES, *SEARCHER_STATE_FILES):
        state = newest_state(Path(experiment_dir), pattern)
        if state is None or is_whole(state):
            continue
        copy = state.with_name(state.name + WHOLE_SUFFIX)
        if copy.is_file():
            shutil.copyfile(copy, state)
            mended.append(state)
    return mended
