"""Where a sweep driver's output goes: the progress view to the console, everything else to a log.

Ray's INFO lines, its trial tables, the lines the workers print (one per checkpoint, the libraries'
warnings) and any other output reach the driver's stdout and stderr from many places: Python loggers,
Ray's log monitor thread, C++ code. Redirecting the two file descriptors catches them all; the progress
view writes to a duplicate of the console's descriptor, taken first.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

LOG_NAME = "sweep.log"


@contextmanager
def console_and_log(log: Path | None) -> Iterator[TextIO]:
    """Yield a stream to the console. While inside, file descriptors 1 and 2 (and so ``print``,
    loggers, Ray's and its workers' output) append to ``log``; nothing is redirected when ``log`` is
    None (``--verbose``)."""
    console = _console_stream()
    try:
        if log is None:
            yield console
            return
        log.parent.mkdir(parents=True, exist_ok=True)
        with _descriptors_to(log):
            yield console
    finally:
        if console is not sys.stdout:
            console.close()


def _console_stream() -> TextIO:
    """A duplicate of stdout's descriptor, which stays on the console when descriptor 1 is redirected;
    stdout itself when it has no descriptor (pytest's capture)."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stdout
    return os.fdopen(os.dup(descriptor), "w", buffering=1, encoding=sys.stdout.encoding or "utf-8",
                     errors="replace")


@contextmanager
def _descriptors_to(log: Path) -> Iterator[None]:
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    sys.stdout.flush()
    sys.stderr.flush()
    with log.open("a", encoding="utf-8") as target:
        for fd in saved:
            os.dup2(target.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
