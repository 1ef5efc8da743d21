"""Node-local folders that the trials of a node share: one subfolder per key digest, written whole under
another name and then renamed (a reader never sees half of one), made room for by deleting the least recently
used others past a bound. The frozen outputs' tables (:mod:`trainers.models.frozen_outputs`) and the shared
stages (:mod:`trainers.training.shared_stages`) live in such folders."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def node_folder(configured: str | Path | None, environment: str, name: str) -> Path:
    """``configured`` (a knob's value), else ``$<environment>``, else ``<system temp folder>/<name>``."""
    return Path(configured or os.environ.get(environment) or Path(tempfile.gettempdir()) / name)


def write_whole(folder: Path, write: Callable[[Path], None]) -> None:
    """``write`` the files of ``folder`` into a partial folder beside it, then rename that to ``folder``."""
    partial = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        write(partial)
        os.replace(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def make_room(root: Path, keep: Path, size: int, max_bytes: int) -> bool:
    """Whether ``size`` more bytes fit under ``max_bytes`` in ``root``, deleting the least recently used
    subfolders but ``keep`` (a folder's time is its last use: readers touch it)."""
    folders = [f for f in root.iterdir() if f.is_dir() and f != keep and not f.name.startswith(".")]
    used = {f: sum(p.stat().st_size for p in f.rglob("*") if p.is_file()) for f in folders}
    total = sum(used.values())
    for folder in sorted(folders, key=lambda f: f.stat().st_mtime):
        if total + size <= max_bytes:
            break
        shutil.rmtree(folder, ignore_errors=True)
        total -= used[folder]
    return total + size <= max_bytes
