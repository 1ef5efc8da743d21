"""Writes to the tracking store that wait while it does not answer: a tracking server restarting, a
network partition.

The tracker turns each of Tune's callbacks into an event (plain JSON: a trial's report, its checkpoint,
its end) and hands it here. Events are applied in order. When applying one fails and the server does not
answer its health check, the events wait, in order, and the sweep's trials go on training. While they
wait they are also kept in a journal file beside the sweep's Ray state, so a driver that stops before
the server is back loses none: the next driver of the sweep (``sweep resume``) applies them first. Each
later event tries again, at most every :data:`PROBE_EVERY_S`, after a health check (MLflow's own retries of
a write can take minutes); the sweep's last event tries at once. A server that does not take the health
check's connection within :data:`PROBE_CONNECT_S` is down (stopped, or out of reach); one that takes it is
live and has :data:`PROBE_ANSWER_S` to answer, so that a server slowed by a loaded machine is not taken for
a gone one.

A store that is not a server (SQLite, a database URI) has no health check: its errors are raised as they
come, as before.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

OUTAGE_BOUND_ENV = "SWEEP_TRACKING_OUTAGE_S"
DEFAULT_OUTAGE_BOUND_S = 600.0
"""How long a sweep trains on without its tracking server before it stops the way Ctrl-C stops it."""
PROBE_EVERY_S = 5.0
PROBE_CONNECT_S = 3.0
PROBE_ANSWER_S = 60.0
EXIT_TRACKING_GONE = 75
"""EX_TEMPFAIL: a command stopped because its tracking server was gone too long; what it computed is kept, and
the same command run again writes it."""
JOURNAL = "tracking_journal.json"
"""The waiting events of a sweep whose tracking server did not answer, beside its Ray state."""

Event = dict[str, Any]
T = TypeVar("T")


def outage_bound_s() -> float:
    return float(os.environ.get(OUTAGE_BOUND_ENV, DEFAULT_OUTAGE_BOUND_S))


def is_server(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


def answers(tracking_uri: str) -> bool:
    """Whether the tracking server answers its health check (always True for a store that is no server)."""
    if not is_server(tracking_uri):
        return True
    import requests

    try:
        return requests.get(f"{tracking_uri.rstrip('/')}/health", timeout=(PROBE_CONNECT_S, PROBE_ANSWER_S)).ok
    except requests.RequestException:
        return False


class PendingWrites:
    """The events not yet written to the store, in order, and since when it has not answered."""

    def __init__(self, tracking_uri: str, journal: Path | None = None, note: Callable[[str], None] = print):
        self.tracking_uri = tracking_uri
        self.journal = journal
        self.note = note
        self.events: list[Event] = []
        if journal is not None and journal.is_file():
            self.events = json.loads(journal.read_text(encoding="utf-8"))
        self.down_since: float | None = None
        self._last_try = 0.0

    @property
    def down_for_s(self) -> float:
        """Seconds since the store stopped answering (0 while it answers)."""
        return 0.0 if self.down_since is None else time.monotonic() - self.down_since

    def add(self, event: Event, apply: Callable[[Event], None], at_once: bool = False) -> None:
        """Queue ``event`` and write what is waiting, if the store answers (see :meth:`deliver`)."""
        self.events.append(event)
        self.deliver(apply, at_once)

    def deliver(self, apply: Callable[[Event], None], at_once: bool = False) -> None:
        """Apply the waiting events in order; keep them (and journal them) when the store stops answering.
        While it does not answer, the store is tried again at most every :data:`PROBE_EVERY_S`, or now
        (``at_once``: the sweep's last chance to write them)."""
        if not self.events:
            return
        if self.down_since is not None:
            if (not at_once and time.monotonic() - self._last_try < PROBE_EVERY_S) or not self._answers():
                self._save()
                return
        while self.events:
            try:
                apply(self.events[0])
            except Exception:
                if self._answers():
                    raise  # the store answers: the write itself is wrong
                self._went_down()
                return
            self.events.pop(0)
        if self.down_since is not None:
            self.note(f"the tracking server {self.tracking_uri} answers again after {self.down_for_s:.0f} s: "
                      "what the trials reported meanwhile is written")
            self.down_since = None
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)

    def read(self, call: Callable[[], T], otherwise: T) -> T:
        """``call()``, a read of the store, or ``otherwise`` while the store does not answer: a read that fails
        with the server gone marks it gone, as a failed write does, so that the writes after it wait without
        MLflow's own retries (a read the live store refuses is raised)."""
        if self.down_since is not None:
            return otherwise
        try:
            return call()
        except Exception:
            if self._answers():
                raise  # the store answers: the read itself is wrong
            self._went_down()
            return otherwise

    def _answers(self) -> bool:
        self._last_try = time.monotonic()
        return answers(self.tracking_uri)

    def _went_down(self) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.note(f"the tracking server {self.tracking_uri} does not answer: the trials go on, and what they "
                      f"report is kept and written when it answers (the sweep stops after {outage_bound_s():.0f} s "
                      f"without it, ${OUTAGE_BOUND_ENV})")
        self._save()

    def _save(self) -> None:
        if self.journal is not None and not self.events:  # a failed read with nothing waiting: no journal
            self.journal.unlink(missing_ok=True)
        elif self.journal is not None:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            partial = self.journal.with_suffix(".partial")
            partial.write_text(json.dumps(self.events), encoding="utf-8")
            partial.replace(self.journal)
