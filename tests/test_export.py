"""Trained encoders out of a real sweep: export, load in sentence-transformers and transformers, the
same scores as logged; keep_models; the best trial's model in MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from transformers import AutoModel, AutoTokenizer

from sweep.commands.cli import main
from sweep.commands.status import trial_rows
from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, spec_file
from trainers.data.sources import TEST_SETS, evaluation_names, load_sts
from trainers.models.encoder import SentenceEncoder
from trainers.suites.sts import STSEvaluator

pytestmark = pytest.mark.slow
ROWS = [
    {"name": "untuned layer 1", "set": {"method": "none", "pooling": "mean", "pooling_layer": 1}},
    {"name": "simcse last2avg", "set": {"pooling": "last2avg"}},
    {"name": "simcse cls", "set": {}},
]


def logged_test_metrics(uri: str, name: str, row: str) -> dict[str, float]:
    (run,) = [r for r in child_runs(uri, name) if r.data.tags["sweep.row"] == row]
    return {k: v for k, v in run.data.metrics.items() if k.startswith("test_") and k.endswith("_spearman")}


def evaluate(encode) -> dict[str, float]:
    tested = STSEvaluator(load_sts("local", evaluation_names())).test(encode)
    return {f"test_{k}": v for k, v in tested.items() if k.endswith("_spearman")}


def test_exported_encoders_load_everywhere_and_score_as_logged(tmp_path, tracking_uri, tiny_bert, local_ray):
    from sentence_transformers import SentenceTransformer

    path = spec_file(tmp_path, tiny_bert, "exports", rows=ROWS, seeds=[1])
    # fp32 evaluation, as sentence-transformers encodes by default ('auto' takes bf16 on a CPU with AMX).
    run(SweepOptions(str(path), {"eval_precision": "fp32"}, tracking_uri=tracking_uri, storage=f"file://{tmp_path}/ray"))
    assert {r["export"] for r in trial_rows("exports", tracking_uri)} == {"yes", "yes (untuned)"}
    for trial in child_runs(tracking_uri, "exports"):  # only the final checkpoint is left: the resume states are gone
        final = Path(trial.data.tags["sweep.checkpoint"])
        assert [p.name for p in final.parent.glob("checkpoint_*")] == [final.name]
        assert (final / "trial.json").is_file() and not (final / "training_state.pt").exists()

    for row in ROWS:
        folder = tmp_path / row["name"].replace(" ", "-")
        assert main(["export", "exports", "--row", row["name"], "--out", str(folder),
                     "--tracking-uri", tracking_uri]) == 0
        logged = logged_test_metrics(tracking_uri, "exports", row["name"])
        assert len(logged) >= len(TEST_SETS) + 1

        model = SentenceTransformer(str(folder), device="cpu")
        by_sentence_transformers = evaluate(lambda s: torch.from_numpy(model.encode(list(s), batch_size=64)))
        exported = SentenceEncoder.from_exported(folder)
        by_project = evaluate(lambda s: exported.encode(s))
        record = json.loads((folder / "trial.json").read_text())["config"]
        by_transformers = evaluate(lambda s: SentenceEncoder(
            AutoModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder), record["pooling"],
            record["pooling_layer"]).encode(s))
        for scores in (by_sentence_transformers, by_project, by_transformers):
            for key in ("test_avg_spearman", *(f"test_{n}_spearman" for n in TEST_SETS)):
                assert scores[key] == pytest.approx(logged[key], abs=0.01), (row["name"], key)
        card = (folder / "README.md").read_text()
        assert row["name"] in card and "spec hash" in card and f"{logged['test_avg_spearman']:.2f}" in card
        assert not any(name.startswith("head") for name in AutoModel.from_pretrained(folder).state_dict())

    # The best trial's model was logged to its MLflow run with the sentence-transformers flavour.
    import mlflow.sentence_transformers

    runs = child_runs(tracking_uri, "exports")
    with_model = [r for r in runs if "sweep.model_uri" in r.data.tags]
    assert len(with_model) == 1
    best = max(runs, key=lambda r: r.data.metrics["best_dev_spearman"])
    assert with_model[0].info.run_id == best.info.run_id and best.info.status == "FINISHED"
    loaded = mlflow.sentence_transformers.load_model(best.data.tags["sweep.model_uri"])
    assert loaded.encode(["a sentence"]).shape == (1, 32)


def test_export_refuses_what_does_not_exist(tmp_path, tracking_uri, tiny_bert, local_ray, capsys):
    path = spec_file(tmp_path, tiny_bert, "keeping", rows=[{"name": "simcse", "set": {}}], seeds=[1, 2, 3],
                     keep_models="best", max_concurrent_trials=1)
    run(SweepOptions(str(path), {}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray"), register="keeping-best"))
    states = {r["seed"]: r["export"] for r in trial_rows("keeping", tracking_uri)}
    assert sorted(states.values()) == ["deleted", "deleted", "yes"]
    deleted_seed = next(seed for seed, state in states.items() if state == "deleted")
    capsys.readouterr()  # the sweep's own output

    for argv, expected in [
        (["export", "keeping", "--seed", deleted_seed], "was not kept (keep_models)"),
        (["export", "keeping", "--row", "nope"], "rows: ['simcse'], seeds: [1, 2, 3]"),
        (["export", "nothing-here"], "no MLflow experiment named 'nothing-here'"),
    ]:
        assert main([*argv, "--out", str(tmp_path / "out"), "--tracking-uri", tracking_uri]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["export", "keeping", "--out", str(tmp_path / "best"), "--tracking-uri", tracking_uri]) == 0

    client = MlflowClient(tracking_uri)
    (version,) = client.search_model_versions("name = 'keeping-best'")
    best = max(child_runs(tracking_uri, "keeping"), key=lambda r: r.data.metrics["best_dev_spearman"])
    assert version.run_id == best.info.run_id
