"""Files flushed to the disk before they count as written: a full disk raises at the write, and a rename into a
directory survives a crash (the checkpoints' seal, :func:`trainers.training.checkpoint.seal`)."""

from __future__ import annotations

import os
from pathlib import Path


def sync_files(directory: Path) -> list[Path]:
    """Flush every file under ``directory`` to the disk (a full disk raises here, not later); return them."""
    files = sorted(path for path in Path(directory).rglob("*") if path.is_file())
    for path in files:
        with path.open("rb") as handle:
            os.fsync(handle.fileno())
    return files


def sync_directory(directory: Path) -> None:
    """Flush a directory's entries (a rename into it) to the disk, where the platform allows it."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:  # some filesystems cannot sync a directory; the rename itself is still atomic
        pass
    finally:
        os.close(handle)
