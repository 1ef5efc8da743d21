"""WK pooling and BERT-flow through a real sweep: each row's export loads in sentence-transformers (its code
carried in the folder) and scores what the trial logged; with ``log_models``, each row's model logged to MLflow
loads too and scores the same."""

from __future__ import annotations

import pytest
import torch

from sweep.commands.cli import main
from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, spec_file
from tests.test_export import evaluate, logged_test_metrics

pytestmark = pytest.mark.slow
ROWS = [
    {"name": "wk", "set": {"method": "none", "pooling": "wk", "wk_layer_start": 0}},
    {"name": "flow", "set": {"method": "flow", "batch_size": 8, "eval_every": 2}},
]


def test_wk_and_flow_trials_export_and_log_models_that_score_as_logged(tmp_path, tracking_uri, tiny_bert, local_ray,
                                                                         monkeypatch):
    import mlflow.sentence_transformers
    from sentence_transformers import SentenceTransformer

    monkeypatch.chdir(tmp_path)  # MLflow keeps the logged models' artifacts under ./mlruns

    path = spec_file(tmp_path, tiny_bert, "baselines", rows=ROWS, seeds=[1], log_models=True)
    run(SweepOptions(str(path), {"eval_precision": "fp32"}, tracking_uri=tracking_uri, storage=f"file://{tmp_path}/ray"))
    for row in ROWS:
        folder = tmp_path / row["name"]
        assert main(["export", "baselines", "--row", row["name"], "--out", str(folder),
                     "--tracking-uri", tracking_uri]) == 0
        logged = logged_test_metrics(tracking_uri, "baselines", row["name"])
        model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
        scored = evaluate(lambda s: torch.from_numpy(model.encode(list(s), batch_size=64)))
        assert scored == pytest.approx(logged, abs=1e-6)
    trials = child_runs(tracking_uri, "baselines")
    # log_models: each row's kept trial (its only one) has its encoder logged to its run.
    model_uris = {trial.data.tags["sweep.row"]: trial.data.tags.get("sweep.model_uri") for trial in trials}
    assert sorted(model_uris) == sorted(row["name"] for row in ROWS) and all(model_uris.values()), model_uris
    mlflow.set_tracking_uri(tracking_uri)
    for row, uri in model_uris.items():
        loaded = mlflow.sentence_transformers.load_model(uri)
        scored = evaluate(lambda s: torch.from_numpy(loaded.encode(list(s), batch_size=64)))
        assert scored == pytest.approx(logged_test_metrics(tracking_uri, "baselines", row), abs=1e-6)
