"""Reruns as variants, the end-of-sweep summary, and the parent run's metrics and artifacts, through
the command line on a real local Ray (tiny BERT, tiny STS files)."""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from results.record import runs_view_tag
from sweep.commands.cli import main
from tests.conftest import write_spec

pytestmark = pytest.mark.slow


def variants_spec(folder: Path, tiny_bert: str) -> Path:
    return write_spec(folder, {
        "name": "variants",
        "method": "simcse",
        "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 24, "max_steps": 2, "eval_every": 1},
        "rows": [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}}, {"name": "simcse", "set": {}}],
        "seeds": [1, 2],
        "resources": {"cpu": 1},
        "max_concurrent_trials": 2,
    })


def digest(paths) -> dict[str, str]:
    """Content hash of every file under ``paths`` (the stores that must stay unchanged)."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def test_rerun_with_another_set_is_a_variant_and_nothing_trains_twice(tmp_path, tracking_uri, tiny_bert, local_ray,
                                                                       capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root (./mlruns) lands here
    storage = tmp_path / "ray"
    command = ["run", str(variants_spec(tmp_path, tiny_bert)), "--tracking-uri", tracking_uri,
               "--storage", str(storage)]

    assert main(command) == 0
    first_out = capsys.readouterr().out
    assert main(command + ["--set", "learning_rate=0.0001"]) == 0
    capsys.readouterr()
    assert main(command) == 0  # the first variant again: restored, nothing runs
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("variants")
    parents = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'parent'")
    children = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'")
    assert len(parents) == 2 and len({p.data.tags["sweep.spec_hash"] for p in parents}) == 2
    # Per variant: the untuned row once (seed-free) and simcse for each of its 2 seeds.
    assert len(children) == 6 and len({c.data.tags["sweep.trial_id"] for c in children}) == 6
    for child in children:  # each trial trained and logged its final test exactly once
        assert len(client.get_metric_history(child.info.run_id, "test_avg_spearman")) == 1
    folders = sorted(f.name for f in storage.iterdir())
    assert folders == sorted(f"variants-{p.data.tags['sweep.spec_hash']}" for p in parents)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"

    # The summary: a line per row with its seeds, and the next steps with the real names.
    # The untuned row is seed-free: one run stands for both seeds.
    assert "| untuned | 1 | 0 |" in first_out and "| simcse | 2 | 0 |" in first_out
    assert "python -m sweep status variants" in first_out
    assert "python -m reports.tables --sweep variants" in first_out
    assert (f"#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning&viewStateShareKey="
            in first_out)
    view, state = runs_view_tag()
    assert experiment.tags[view] == state  # the view that URL opens, on the experiment

    # Parent run: metrics, best-trial tags and artifacts that match its children.
    first_hash = next(f.split("-", 1)[1] for f in folders
                      if '"learning_rate"' not in (storage / f / "sweep.json").read_text())
    parent = next(p for p in parents if p.data.tags["sweep.spec_hash"] == first_hash)
    own = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent.info.run_id]
    assert parent.data.metrics["trials_finished"] == 3 and parent.data.metrics["trials_failed"] == 0
    best = max(own, key=lambda c: c.data.metrics["best_dev_spearman"])
    assert parent.data.metrics["best_trial_best_dev_spearman"] == best.data.metrics["best_dev_spearman"]
    assert parent.data.metrics["best_trial_test_avg_spearman"] == best.data.metrics["test_avg_spearman"]
    assert (parent.data.tags["sweep.best_row"], parent.data.tags["sweep.best_seed"]) == (
        best.data.tags["sweep.row"], best.data.tags["sweep.seed"])
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "summary.md", "summary.csv", "plots"} <= artifacts
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "plots")} == {"plots/variants_dev_curves.png"}
    summary_csv = Path(client.download_artifacts(parent.info.run_id, "summary.csv", str(tmp_path)))
    lines = summary_csv.read_text().splitlines()
    untuned = [c.data.metrics["test_avg_spearman"] for c in own if c.data.tags["sweep.row"] == "untuned"]
    assert lines[1].startswith("untuned,1,0,") and f"{statistics.mean(untuned)}" in lines[1]
    resolved = yaml.safe_load(
        Path(client.download_artifacts(parent.info.run_id, "spec.yaml", str(tmp_path))).read_text())
    assert resolved["spec_hash"] == first_hash and resolved["seeds"] == [1, 2]
    # MLflow's own columns: source, version (commit) and user on every run; the spec file relative where it can be.
    for run in [*parents, *children]:
        assert {"mlflow.source.name", "mlflow.source.git.commit", "mlflow.user"} <= set(run.data.tags)

    # One variant by NAME-HASH (a hash prefix is enough): its status, and a resume that has nothing to run.
    assert main(["status", f"variants-{first_hash[:6]}", "--tracking-uri", tracking_uri]) == 0
    assert capsys.readouterr().out.count("FINISHED") == 3
    assert main(["resume", f"variants-{first_hash[:6]}", "--storage", str(storage)]) == 0
    assert "| simcse | 2 | 0 |" in capsys.readouterr().out
    assert len(client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'")) == 6

    # Refusals (exit 2) leave the stores exactly as they were.
    stores = digest([tmp_path / "mlflow.db", storage])
    # By NAME alone the two variants are ambiguous: both are listed, with their options.
    assert main(["status", "variants", "--tracking-uri", tracking_uri]) == 2
    assert main(["resume", "variants", "--storage", str(storage)]) == 2
    err = capsys.readouterr().err
    assert err.count(f"variants-{first_hash}") == 2 and "--set learning_rate=0.0001" in err
    assert main(command + ["--set", "model=/nonexistent"]) == 2
    assert "--set model=/nonexistent: '/nonexistent' is not a local folder" in capsys.readouterr().err
    assert main(["status", "nonesuch", "--tracking-uri", tracking_uri]) == 2
    assert digest([tmp_path / "mlflow.db", storage]) == stores
