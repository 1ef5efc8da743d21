"""A tiny sweep whose spec chooses a suite beyond STS: its metrics reach MLflow, the parquet and a table."""

from __future__ import annotations

import pytest
import yaml

from reports.collect import collect
from reports.paper_tables import build_tables
from reports.table_specs import parse_table_spec
from results.render import to_markdown
from sweep.run.engine import SweepOptions, run
from tests.evaluation_fixtures import reranking_folder

pytestmark = pytest.mark.slow


def test_suite_metrics_reach_the_parquet_and_a_table(tmp_path, tiny_bert, local_ray, monkeypatch):
    # The query is its own positive: cosine 1 ranks it first, whatever the random model: MAP 100.
    folder = reranking_folder(tmp_path / "rr", [
        {"query": "a cat sat", "positive": ["a cat sat"], "negative": ["stock prices fell sharply today"]}])
    monkeypatch.setenv("RERANKING_DATA_DIR", str(folder))
    spec = {"name": "tiny_suites", "method": "none", "base": {"model": tiny_bert, "pooling": "mean"},
            "rows": [{"name": "untuned", "set": {}}], "evaluations": ["sts", "reranking"]}
    path = tmp_path / "tiny_suites.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run(SweepOptions(str(path), {}, tracking_uri=uri, storage=str(tmp_path / "ray")))
    frame = collect(uri)
    trial = frame[frame["row"] == "untuned"].iloc[0]
    assert trial["status"] == "FINISHED"
    assert trial["test_reranking_askubuntu_map"] == 100.0 and trial["test_reranking_avg_map"] == 100.0
    assert {"suite": "reranking"} in trial["evaluations"]  # the choice is a knob of the trial, typed
    table_spec = parse_table_spec("t", {"title": "suites", "kind": "rows", "spec": str(path),
                                        "columns": ["AskU", "Re-ranking Avg"], "rows": ["untuned"]}, tmp_path)
    (table,) = build_tables(frame, ["t"], {"t": table_spec}, {})
    text = to_markdown(table)
    assert "| untuned | **100.00†** | **100.00†** |" in text, text
