"""The tracking journal (``sweep/tracking/journal.py``) on its own: what a sweep reports while its tracking server
does not answer is written after it answers again, in order and once, and a driver that stops meanwhile
leaves it in the journal for the next one."""

from __future__ import annotations

import json

import pytest

from sweep.tracking import journal as pending_writes
from sweep.tracking.journal import PendingWrites

SERVER = "http://127.0.0.1:9"


class Store:
    """A tracking server that can be down: a write while it is down fails, as does its health check."""

    def __init__(self) -> None:
        self.up = True
        self.written: list[dict] = []

    def apply(self, event: dict) -> None:
        if not self.up:
            raise ConnectionError("the server does not answer")
        self.written.append(event)


@pytest.fixture
def store(monkeypatch) -> Store:
    store = Store()
    monkeypatch.setattr(pending_writes, "answers", lambda uri: store.up)
    monkeypatch.setattr(pending_writes, "PROBE_EVERY_S", 0.0)  # every event tries again at once
    return store


def events(*numbers: int) -> list[dict]:
    return [{"trial": "t", "step": n} for n in numbers]


def test_what_waits_through_an_outage_is_written_after_it_in_order_and_once(store, tmp_path):
    journal = tmp_path / "tracking_journal.json"
    notes: list[str] = []
    pending = PendingWrites(SERVER, journal, notes.append)
    pending.add(events(1)[0], store.apply)
    store.up = False
    for event in events(2, 3, 4):
        pending.add(event, store.apply)
    assert store.written == events(1) and pending.down_for_s >= 0 and "does not answer" in notes[-1]
    assert json.loads(journal.read_text()) == events(2, 3, 4)  # kept on disk while it waits
    store.up = True
    pending.add(events(5)[0], store.apply)
    assert store.written == events(1, 2, 3, 4, 5)
    assert pending.events == [] and not journal.exists() and "answers again" in notes[-1]
    pending.add(events(6)[0], store.apply)
    assert store.written == events(1, 2, 3, 4, 5, 6)


def test_a_driver_that_stops_during_the_outage_loses_nothing(store, tmp_path):
    """The next driver of the sweep (sweep resume) reads the journal and writes it first."""
    journal = tmp_path / "tracking_journal.json"
    first = PendingWrites(SERVER, journal, lambda note: None)
    store.up = False
    for event in events(1, 2, 3):
        first.add(event, store.apply)
    del first  # the driver stops here
    store.up = True
    second = PendingWrites(SERVER, journal, lambda note: None)
    assert second.events == events(1, 2, 3)
    second.add(events(4)[0], store.apply)
    assert store.written == events(1, 2, 3, 4) and not journal.exists()


def test_a_driver_that_stops_between_two_writes_loses_none(store, tmp_path):
    """The server answers again and the driver dies after the first waiting event is written: the journal
    still holds every event not known to be written (at least once: the written one may come again)."""
    journal = tmp_path / "tracking_journal.json"
    pending = PendingWrites(SERVER, journal, lambda note: None)
    store.up = False
    for event in events(1, 2, 3):
        pending.add(event, store.apply)
    store.up = True

    def dies_after_one(event: dict) -> None:
        if store.written:
            raise SystemExit("the driver is killed")
        store.apply(event)

    with pytest.raises(SystemExit):
        pending.deliver(dies_after_one)
    lost = [event for event in events(1, 2, 3)
            if event not in store.written and event not in json.loads(journal.read_text())]
    assert lost == []
    resumed = PendingWrites(SERVER, journal, lambda note: None)
    resumed.deliver(store.apply)
    assert [e for e in store.written if e != events(1)[0]] == events(2, 3)


def test_a_write_the_live_server_refuses_is_raised_not_kept(store, tmp_path):
    pending = PendingWrites(SERVER, tmp_path / "journal.json", lambda note: None)

    def refuses(event: dict) -> None:
        raise ValueError("a bad metric name")

    with pytest.raises(ValueError, match="bad metric"):
        pending.add(events(1)[0], refuses)
    assert pending.down_since is None and not (tmp_path / "journal.json").exists()


def test_a_read_while_the_server_is_gone_gives_the_fallback_and_the_writes_after_it_wait(store, tmp_path):
    """``read``: the store's answer while it answers; with the server gone, the fallback, the server marked gone
    (the reads after it are not tried, and the writes wait), and no journal while nothing waits."""
    journal = tmp_path / "journal.json"
    pending = PendingWrites(SERVER, journal, lambda line: None)
    tried: list[int] = []

    def lookup() -> str:
        tried.append(1)
        if not store.up:
            raise ConnectionError("the server does not answer")
        return "held"

    assert pending.read(lookup, None) == "held"
    store.up = False
    assert pending.read(lookup, None) is None and pending.down_since is not None and not journal.exists()
    assert pending.read(lookup, "fallback") == "fallback" and len(tried) == 2  # not tried while it is gone
    pending.add(events(1)[0], store.apply)
    assert store.written == [] and json.loads(journal.read_text()) == events(1)
    store.up = True
    pending.deliver(store.apply, at_once=True)
    assert store.written == events(1) and pending.read(lookup, None) == "held"


def test_a_read_the_live_server_refuses_is_raised(store, tmp_path):
    pending = PendingWrites(SERVER, tmp_path / "journal.json", lambda line: None)

    def refused() -> None:
        raise ValueError("no such run")

    with pytest.raises(ValueError, match="no such run"):
        pending.read(refused, None)
    assert pending.down_since is None
