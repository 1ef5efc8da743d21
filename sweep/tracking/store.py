"""Opening an MLflow store that several processes share: two drivers, a driver and ``sweep status``.

A new SQLite store is created by the first :class:`~mlflow.MlflowClient` that opens it (MLflow runs
its schema migrations then); two processes doing so at once collide inside the migrations
(``duplicate column name``, ``table _alembic_tmp_experiments already exists``). So a store is opened
under a file lock beside it (:func:`~results.reader.creation_lock`), which makes its creation happen once. Once created,
SQLite serialises writers itself; a writer that still finds it busy past MLflow's own busy timeout
gets ``database is locked``, which MLflow reports as TEMPORARILY_UNAVAILABLE: such a call is retried,
a bounded number of times, as MLflow's guidance for SQLite suggests. Stores other than SQLite (a
tracking server, a database server) are opened as they are.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE, ErrorCode

from results.reader import creation_lock, sqlite_path

LOCKED_RETRIES = 5
LOCKED_BACKOFF_S = 0.5


def is_transient(error: Exception) -> bool:
    """SQLite's ``database is locked`` as MLflow raises it: another writer held the file too long."""
    return (isinstance(error, MlflowException) and error.error_code == ErrorCode.Name(TEMPORARILY_UNAVAILABLE)
            and "locked" in str(error))


def retrying(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` retried on :func:`is_transient` errors, with a growing pause, at most LOCKED_RETRIES times."""

    @functools.wraps(call)
    def retried(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(LOCKED_RETRIES + 1):
            try:
                return call(*args, **kwargs)
            except MlflowException as error:
                if attempt == LOCKED_RETRIES or not is_transient(error):
                    raise
                time.sleep(LOCKED_BACKOFF_S * 2**attempt)

    return retried


class SharedStoreClient:
    """An :class:`~mlflow.MlflowClient` whose calls are retried on SQLite's transient lock errors; the
    rest of its interface is MlflowClient's own."""

    def __init__(self, client: MlflowClient):
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        return retrying(attribute) if callable(attribute) else attribute


def open_client(uri: str) -> SharedStoreClient:
    """A client of the store at ``uri``; a SQLite store is opened (and so created, if new) under its lock."""
    path = sqlite_path(uri)
    if path is None:
        return SharedStoreClient(MlflowClient(uri))
    path.parent.mkdir(parents=True, exist_ok=True)
    with creation_lock(path):
        return SharedStoreClient(retrying(MlflowClient)(uri))
