"""Shared stages on a real Ray sweep of the tiny BERT: two BERT-flow target rows (ConSERT Table 3) run at once in
two Ray workers; one trains the NLI stage, the other waits on the node's lock and reads it, and MLflow holds the
same NLI-stage history for both, beside each one's own flow stage."""

from __future__ import annotations

import os

import pytest

import sweep.run.engine as engine
import trainers.data.nli_examples as nli
from results.record import Tag
from sweep.run.engine import SweepOptions, run
from sweep.tracking.store import open_client
from tests import ray_probes
from tests.conftest import child_runs, spec_file
from trainers.metrics import Metric
from trainers.training.shared_stages import ENVIRONMENT_FOLDER

pytestmark = pytest.mark.slow
NAME = "shared_nli"


def test_two_flow_rows_at_once_train_one_nli_stage(tmp_path, tiny_bert, local_ray, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    rows = [{"name": f"flow, {corpus}", "set": {"train_corpus": corpus}} for corpus in ("stsb_target", "sts12_target")]
    path = spec_file(tmp_path, tiny_bert, NAME, method="flow", rows=rows, seeds=[1], max_concurrent_trials=2,
                     base={"model": tiny_bert, "batch_size": 8, "train_limit": 40, "max_steps": 5, "eval_every": 1,
                           "nli_supervision": True, "nli_learning_rate": 1e-3})
    monkeypatch.setattr(nli, "hub_reachable", lambda: True)  # the driver's check; the workers read the fake set
    monkeypatch.setattr(engine, "run_sweep_trial", ray_probes.sweep_trial_on_fake_nli)
    run(SweepOptions(str(path), {}, tracking_uri=uri, storage=str(tmp_path / "ray")))

    runs = {r.data.tags[Tag.ROW]: r for r in child_runs(uri, NAME)}
    assert sorted(runs) == ["flow, sts12_target", "flow, stsb_target"]
    assert sorted(r.data.metrics[Metric.STAGES_REUSED] for r in runs.values()) == [0.0, 1.0]
    client = open_client(uri)

    def history(run_id: str, metric: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, metric))

    stages = [dict(history(r.info.run_id, Metric.STAGE)) for r in runs.values()]
    nli_steps = [step for step, stage in stages[0].items() if stage == 0]
    assert nli_steps and all({s for s, stage in per_run.items() if stage == 0} == set(nli_steps) for per_run in stages)
    nli_dev = [[(s, v) for s, v in history(r.info.run_id, Metric.DEV) if s in nli_steps] for r in runs.values()]
    assert nli_dev[0] == nli_dev[1] and len(nli_dev[0]) == len(nli_steps)
    assert len([p for p in os.listdir(os.environ[ENVIRONMENT_FOLDER]) if not p.endswith(".lock")]) == 1
