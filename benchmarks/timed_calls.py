"""Time every call of a function that the code under measurement looks up by name."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def timed_calls(owner: Any, name: str, seconds: list[float]) -> Iterator[None]:
    """While in the block, ``owner.name`` (a module's function or a class's method) appends the seconds of
    each of its calls to ``seconds``."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)
