"""Tune callbacks that belong to one driver process, also when Ray restores a sweep.

Ray pickles the run config, callbacks included, into the experiment's ``tuner.pkl`` and, when
``Tuner.restore`` continues the experiment, calls the callbacks it unpickles, not the ones the new
driver made. The sweep's callbacks hold what only the new driver has (its MLflow client, its console)
and tell it how the sweep ended, so they pickle as a reference: unpickled in a driver that made one
under the same key, they are that one; anywhere else, an inert Callback.
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

_LIVE: dict[str, Callback] = {}


def _live(key: str) -> Callback:
    return _LIVE.get(key) or Callback()


class DriverLocal(Callback):
    """A Tune callback that pickles as a reference to this driver's callback of the same key."""

    def __init__(self, key: str):
        self._key = key
        _LIVE[key] = self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _live, (self._key,)
