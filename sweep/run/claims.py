"""Trials that two sweeps running at once would both train: the first sweep to claim a trial key trains it,
the other waits for its run and reuses it.

A claim is a registered model named ``sweep-claim-KEY`` in the tracking store's model registry, tagged with
the parent run of the sweep that holds it. Creating a registered model whose name exists fails in every
MLflow store (a unique name in the database, or the tracking server's check), so two drivers sharing a
store cannot both claim a key. A sweep claims the keys it will train when it starts (:func:`claim_trials`)
and releases them when its Tune run ends (:func:`release`); a claim whose sweep's parent run is no longer
RUNNING was left by a driver that died, and is taken over.

The waiting trial's worker reads the store (:func:`wait_for_run`): when the owner's run of the key is
FINISHED, the trial reports that run's metrics and the tags of a reused trial, as :mod:`sweep.run.reuse` does
before a sweep starts; when the owner stopped without finishing it, the trial trains.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

from results.record import TRIAL_FILTER, Tag
from trainers.metrics import Metric

PREFIX = "sweep-claim-"
OWNER = "sweep.claim_owner"
"""Tag of a claim: the parent run id of the sweep that holds it."""
SWEEP = "sweep.claim_sweep"
POLL_S = 2.0


def _exists(error: Exception) -> bool:
    return getattr(error, "error_code", "") == "RESOURCE_ALREADY_EXISTS"


def _running(client, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.status == "RUNNING"
    except Exception:  # noqa: BLE001 - a parent run that is gone holds nothing
        return False


def claim(client, key: str, parent_run_id: str, sweep: str) -> str | None:
    """Claim ``key`` for the sweep of ``parent_run_id``: None when it holds the claim now (also when it held it
    already, a resumed sweep), else the parent run id of the running sweep that holds it."""
    name = PREFIX + key
    for _ in range(3):
        try:
            client.create_registered_model(name, tags={OWNER: parent_run_id, SWEEP: sweep},
                                           description=f"sweep {sweep} trains the trial of key {key}")
            return None
        except Exception as error:  # noqa: BLE001 - MLflow raises its own exception, a server a REST one
            if not _exists(error):
                raise
        owner = client.get_registered_model(name).tags.get(OWNER, "")
        if owner == parent_run_id:
            return None
        if _running(client, owner):
            return owner
        client.delete_registered_model(name)  # its sweep stopped: take it over
    return owner


@dataclass(frozen=True)
class Awaited:
    """A trial another running sweep trains: its key and that sweep's parent run."""

    key: str
    owner: str


def claim_trials(client, keys: Mapping[int, str], parent_run_id: str, sweep: str) -> dict[int, Awaited]:
    """Claim the key of each trial the sweep would train (index in the spec -> key); the trials whose key a
    running sweep holds, to wait for."""
    awaited = {}
    for index, key in keys.items():
        owner = claim(client, key, parent_run_id, sweep)
        if owner is not None:
            awaited[index] = Awaited(key, owner)
    return awaited


def release(client, keys: Mapping[int, str], parent_run_id: str) -> None:
    """Delete the claims the sweep of ``parent_run_id`` holds among ``keys``."""
    for key in set(keys.values()):
        name = PREFIX + key
        try:
            if client.get_registered_model(name).tags.get(OWNER) == parent_run_id:
                client.delete_registered_model(name)
        except Exception:  # noqa: BLE001 - already gone, or taken over by another sweep
            continue


def wait_for_run(tracking_uri: str, awaited: Awaited, poll_s: float = POLL_S) -> dict[str, Any] | None:
    """The owner's FINISHED run of the key, once it is (``{"metrics", "tags"}``: the run's metrics and the tags
    a reused trial takes from it), or None when the owner's sweep stopped without finishing it."""
    from mlflow import MlflowClient

    from sweep.run.reuse import source_of

    client = MlflowClient(tracking_uri)
    query = (f"{TRIAL_FILTER} and tags.`{Tag.TRIAL_KEY}` = '{awaited.key}' "
             f"and tags.`{Tag.PARENT_RUN_ID}` = '{awaited.owner}'")
    experiment = client.get_run(awaited.owner).info.experiment_id
    while True:
        found = client.search_runs([experiment], query, max_results=10)
        done = [run for run in found if run.info.status == "FINISHED" and Metric.is_final(run.data.metrics)]
        if done:
            source = source_of(done[0])
            return {"metrics": dict(source.metrics), "tags": source.run_tags()}
        if not _running(client, awaited.owner) or any(run.info.status in ("FAILED", "KILLED") for run in found):
            return None
        time.sleep(poll_s)
