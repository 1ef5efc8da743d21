"""``python -m sweep evaluate NAME --suite SUITE``: the kept best encoders of a finished sweep on another
evaluation suite, without training again.

Each chosen trial's best-dev encoder is read from its checkpoint (:func:`sweep.run.models.trial_encoder`, as
``sweep export`` reads it), encoded as every evaluation of the trial encodes
(:func:`trainers.training.encoding.encode_fn`) and evaluated by the suite's own entry point
(:func:`trainers.suites.evaluate_suite`, the end-of-trial path). The metrics go into the trial's
existing MLflow run, at the step of its final report, so ``reports.collect`` and the tables read them as
any trial metric; the run's tag ``sweep.evaluated_later`` lists the suites added this way.

An evaluation is keyed by the trial's key, the suite with its options (the protocol) and the suite's data
by content (:func:`evaluation_key`); the run keeps its keys with the metrics each gave
(``sweep.evaluation_keys``). An evaluation whose key this run, or any run of the same trial key (a reused
trial and its source, in any sweep), already holds is not computed again: its metrics are copied.

Every refusal comes before anything is evaluated, with exit 2 (docs/specs.md, "Exit codes"): a suite
that is unknown, has a bad option, or whose data this machine lacks; a sweep, row, seed or trial that
matches nothing; a chosen trial whose encoder was not kept. Torch is imported only to evaluate.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from results.names import UsageError
from results.reader import existing_store_uri, run_identity, trial_tags
from results.record import Tag
from sweep.run.models import encoder_problem, finished_runs, matching_runs, trial_encoder
from sweep.tracking.journal import EXIT_TRACKING_GONE, PendingWrites
from sweep.tracking.store import open_client
from trainers.metrics import Metric, SuiteName
from trainers.suites import SUITES, parse_evaluations

EVALUATIONS_DIR_ENV = "SWEEP_EVALUATIONS_DIR"
"""Where evaluations computed while the tracking server was gone wait for it (:func:`pending_evaluations`)."""


def parse_suite(text: str) -> dict[str, Any]:
    """``--suite``'s value, a suite entry as a spec writes one (``senteval`` or ``{senteval: {kfold: 5}}``)
    -> ``{"suite": name, **options}``; a refusal names the suites and options there are."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    chosen, problems = parse_evaluations([value])
    if problems:
        raise UsageError("; ".join(f"--suite{' ' + key[len('[0].'):] if key.startswith('[0].') else ''}: {message}"
                                   for key, message in problems))
    others = [entry for entry in chosen if entry["suite"] != SuiteName.STS]
    if not others:
        raise UsageError(f"--suite: sts is every trial's own evaluation (already logged); expected one of "
                         f"{[name for name in SUITES if name != SuiteName.STS]}")
    return others[0]


def chosen_runs(name: str, tracking_uri: str, row: str | None, seed: int | None, trial: str | None) -> list:
    """Every finished trial of sweep ``name`` that matches, each with its encoder kept (or refused)."""
    runs = matching_runs(finished_runs(name, tracking_uri), row, seed, trial)
    problems = [problem for run in runs if (problem := encoder_problem(run))]
    if problems:
        kept = [trial_tags(run).trial_id for run in runs if encoder_problem(run) is None]
        raise UsageError(f"{'; '.join(problems)}: nothing evaluated; trials whose encoder was kept: {kept} "
                         "(choose them with --trial, --row or --seed)")
    return runs


def evaluate_run(run, suite: dict[str, Any]) -> dict[str, float]:
    """The suite's metrics of ``run``'s kept best encoder, as its sweep would have computed them."""
    from trainers.models.encoder import pick_device
    from trainers.suites import evaluate_suites
    from trainers.training.encoding import encode_fn

    encoder, record = trial_encoder(run)
    config = record.config
    encoder.to(pick_device(config["device"]))
    return evaluate_suites([suite], encode_fn(encoder, config), config)


def evaluation_key(run, suite: dict[str, Any]) -> str | None:
    """The key of ``suite`` on ``run``'s encoder: its trial key, the suite and its options, and the suite's data
    folder by content (the hub's copy by name); None for a run recorded before trial keys."""
    from sweep.spec.trial_key import suite_data_digest

    trial = trial_tags(run).trial_key
    if not trial:
        return None
    data = suite_data_digest(suite["suite"]) or "hub"
    text = json.dumps({"trial": trial, "suite": suite, "data": data}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stored_evaluation(client, run, key: str | None) -> tuple[str, dict[str, float]] | None:
    """(the run that holds it, its metrics) of the evaluation ``key``: ``run`` itself first, then any run of the
    same trial key in the store; None when none holds it."""
    if key is None:
        return None
    experiments = [e.experiment_id for e in client.search_experiments()]
    same_trial = client.search_runs(experiments, f"tags.`{Tag.TRIAL_KEY}` = '{trial_tags(run).trial_key}'",
                                    max_results=1000)
    for holder in sorted(same_trial, key=lambda other: other.info.run_id != run.info.run_id):
        names = trial_tags(holder).evaluation_keys.get(key)
        if names is not None and all(name in holder.data.metrics for name in names):
            return holder.info.run_id, {name: holder.data.metrics[name] for name in names}
    return None


def log_into_run(client, run, suite: dict[str, Any], metrics: dict[str, float], key: str | None) -> None:
    """Log ``metrics`` into ``run`` at the step of its final report (a later value of the same metric
    then wins, as in any MLflow run), add ``suite`` to its ``sweep.evaluated_later`` tag and ``key`` to its
    evaluation keys."""
    from mlflow.entities import Metric as MlflowMetric
    from mlflow.entities import RunTag

    step = int(run.data.metrics.get(Metric.STEPS, 0))
    now = int(time.time() * 1000)
    tags = trial_tags(run)
    added = [entry for entry in tags.evaluated_later if entry["suite"] != suite["suite"]] + [suite]
    keys = {**tags.evaluation_keys, **({key: sorted(metrics)} if key else {})}
    client.log_batch(run.info.run_id, metrics=[MlflowMetric(k, float(v), now, step) for k, v in metrics.items()],
                     tags=[RunTag(Tag.EVALUATED_LATER, json.dumps(added, sort_keys=True)),
                           RunTag(Tag.EVALUATION_KEYS, json.dumps(keys, sort_keys=True))])


def pending_evaluations(name: str, tracking_uri: str) -> PendingWrites:
    """The evaluations of sweep ``name`` computed but not yet in its store: they wait, in a journal of their
    own, while its tracking server does not answer, and the next ``sweep evaluate`` of the sweep writes them
    first, computing nothing again. The journal is ``$SWEEP_EVALUATIONS_DIR`` (else ``~/.cache/sweep/
    evaluations``)/<the store and the sweep's digest>.json."""
    folder = Path(os.environ.get(EVALUATIONS_DIR_ENV) or Path.home() / ".cache" / "sweep" / "evaluations")
    digest = hashlib.sha256(json.dumps([tracking_uri, name]).encode()).hexdigest()[:16]
    # The command's own lines say what waits (the journal's notes speak of a sweep's trials).
    return PendingWrites(tracking_uri, folder / f"{digest}.json", note=lambda line: None)


def evaluate_command(name: str, suite_text: str, tracking_uri: str, row: str | None, seed: int | None,
                     trial: str | None) -> int:
    """Evaluate the chosen trials and log each one's metrics into its run; 0, or :data:`EXIT_TRACKING_GONE`
    when the tracking server stopped answering and what was computed waits in the journal."""
    suite = parse_suite(suite_text)
    runs = chosen_runs(name, tracking_uri, row, seed, trial)
    problem = SUITES[suite["suite"]].data_problem()
    if problem:
        raise UsageError(f"--suite {suite['suite']}: {problem}")
    uri = existing_store_uri(tracking_uri)
    client = open_client(uri)
    pending = pending_evaluations(name, uri)

    def log(event: dict[str, Any]) -> None:  # the run read again: its evaluation tags as they are now
        log_into_run(client, client.get_run(event["run_id"]), event["suite"], event["metrics"], event["key"])

    pending.deliver(log, at_once=True)  # what an earlier call computed while the server was gone
    for run in runs:
        key = evaluation_key(run, suite)
        # While the server does not answer, no run can be asked what it holds: the evaluation is computed.
        held = pending.read(lambda: stored_evaluation(client, run, key), None)
        identity = run_identity(run)
        said = f"trial {trial_tags(run).trial_id} (row {identity.row!r}, seed {identity.seed})"
        if held is not None and held[0] == run.info.run_id:
            print(f"{said}: evaluated before with the same key (trial, suite, options, data): not computed again")
            continue
        metrics = held[1] if held is not None else evaluate_run(run, suite)
        pending.add({"run_id": run.info.run_id, "suite": suite, "metrics": metrics, "key": key}, log)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in metrics.items() if f"_{SuiteName.AVG}_" in k)
        source = f" (taken from run {held[0]}, the same evaluation of the same trial)" if held else ""
        where = "kept until the server answers" if pending.events else f"logged into MLflow run {run.info.run_id}"
        print(f"{said}: {shown}, {where}{source}", flush=True)
    pending.deliver(log, at_once=True)
    if pending.events:
        print(f"stopped: the tracking server {tracking_uri} does not answer: {len(pending.events)} evaluations are "
              f"kept in {pending.journal}; when it answers, run the same `sweep evaluate` again to log them "
              "(nothing is computed again)")
        return EXIT_TRACKING_GONE
    print(f"{len(runs)} trials of {name} evaluated on {suite['suite']}; `python -m reports.collect` then "
          "`python -m reports.tables` show them")
    return 0

