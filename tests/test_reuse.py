"""Trials with the same key are trained once: a sweep takes them from the finished runs of the store.

Tiny BERT sweeps through the engine: a spec grown by a seed, under another name, trains only that seed and
takes the rest with the metrics they had; a changed knob, data file or training code is not reused, and
the plan says which part differs; a reused trial exports; ``--no-reuse`` trains everything.
"""

from __future__ import annotations

import shutil

import pytest
from mlflow import MlflowClient

import sweep.spec.trial_key as trial_key_module
from results.record import Tag
from sweep.run.engine import SweepOptions, run
from sweep.run.reuse import reuse_lines
from tests.conftest import child_runs, spec_file
from trainers.metrics import Metric

pytestmark = pytest.mark.slow


def by_row_and_seed(uri: str, name: str) -> dict[tuple[str, str], object]:
    return {(r.data.tags[Tag.ROW], r.data.tags[Tag.SEED]): r for r in child_runs(uri, name)}


def final_metrics(run) -> dict[str, float]:
    """The scores of a trial's final report (its timings, the machine's, left out)."""
    return {k: v for k, v in run.data.metrics.items()
            if (k.startswith("test_") or k == Metric.BEST_DEV) and k not in Metric.TIMINGS}


@pytest.fixture
def first_sweep(tmp_path, tiny_bert, local_ray, tracking_uri):
    """Sweep 'first' (untuned, seed-free; SimCSE, seed 1), trained."""
    path = spec_file(tmp_path, tiny_bert, "first", seeds=[1])
    run(SweepOptions(str(path), {}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray")))
    runs = by_row_and_seed(tracking_uri, "first")
    assert len(runs) == 2 and not any(Tag.REUSED_FROM in r.data.tags for r in runs.values())
    return runs


def test_a_spec_grown_by_a_seed_trains_only_that_seed(tmp_path, tiny_bert, tracking_uri, first_sweep, local_ray):
    path = spec_file(tmp_path, tiny_bert, "grown", seeds=[1, 2])
    run(SweepOptions(str(path), {}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray")))
    runs = by_row_and_seed(tracking_uri, "grown")
    assert set(runs) == {("untuned", "1"), ("simcse", "1"), ("simcse", "2")}
    trained = [key for key, r in runs.items() if Tag.REUSED_FROM not in r.data.tags]
    assert trained == [("simcse", "2")]
    for key in (("untuned", "1"), ("simcse", "1")):
        reused, source = runs[key], first_sweep[key]
        assert reused.data.tags[Tag.REUSED_FROM] == source.info.run_id
        assert reused.data.tags[Tag.REUSED_SWEEP] == "first" and reused.info.status == "FINISHED"
        assert final_metrics(reused) == final_metrics(source) and final_metrics(source)
        assert reused.data.tags[Tag.TRIAL_KEY] == source.data.tags[Tag.TRIAL_KEY]
        assert reused.data.tags.get(Tag.CHECKPOINT) == source.data.tags.get(Tag.CHECKPOINT)
    history = MlflowClient(tracking_uri).get_metric_history  # trained: every evaluation; reused: its final report
    assert len(history(runs[("simcse", "1")].info.run_id, "dev_spearman")) == 1
    assert len(history(first_sweep[("simcse", "1")].info.run_id, "dev_spearman")) == 2

    # A reused trial's encoder exports from its source's checkpoint and loads.
    from sentence_transformers import SentenceTransformer

    from sweep.commands.cli import main

    out = tmp_path / "exported"
    assert main(["export", "grown", "--row", "simcse", "--seed", "1", "--out", str(out),
                 "--tracking-uri", tracking_uri]) == 0
    assert SentenceTransformer(str(out)).encode(["A man plays a guitar."]).shape[0] == 1

    # A sweep that keeps no encoder leaves its reused trials' encoders, which are their sources', alone.
    kept_nothing = spec_file(tmp_path, tiny_bert, "keeps_nothing", seeds=[1], keep_models="none")
    run(SweepOptions(str(kept_nothing), {}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray")))
    assert (out.parent / "exported").is_dir() and main(["export", "first", "--row", "simcse", "--out",
                                                        str(tmp_path / "again"), "--tracking-uri", tracking_uri]) == 0

    # The same sweep with --no-reuse trains every trial.
    again = spec_file(tmp_path, tiny_bert, "fresh", seeds=[1])
    run(SweepOptions(str(again), {}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray"), reuse=False))
    fresh = by_row_and_seed(tracking_uri, "fresh")
    assert not any(Tag.REUSED_FROM in r.data.tags for r in fresh.values())
    # Trained again, a trial of the same key computes what its reuse took: the key holds what decides it.
    for key, source in first_sweep.items():
        assert fresh[key].data.tags[Tag.TRIAL_KEY] == source.data.tags[Tag.TRIAL_KEY]
        assert final_metrics(fresh[key]) == final_metrics(source)


def test_what_differs_is_not_reused_and_the_plan_says_which_part(tmp_path, tiny_bert, tracking_uri, first_sweep,
                                                                 tiny_sts_dir, monkeypatch):
    from sweep.spec.sweep_spec import load_spec

    same = load_spec(spec_file(tmp_path, tiny_bert, "same", seeds=[1]))
    assert reuse_lines(same, tracking_uri)[0].startswith("reuse: 2 of 2 trials finished before")

    knob = load_spec(spec_file(tmp_path, tiny_bert, "knob", seeds=[1]), {"learning_rate": 1e-4})
    lines = reuse_lines(knob, tracking_uri)
    assert lines[0].startswith("reuse: 1 of 2 trials")  # the untuned row has no learning rate
    assert "not reused: simcse seed 1: knobs differ (learning_rate) from run" in lines[1] and "sweep first" in lines[1]

    changed = tmp_path / "sts-changed"
    shutil.copytree(tiny_sts_dir, changed)
    test_set = changed / "stsb-test.tsv"
    test_set.write_text(test_set.read_text(encoding="utf-8").replace("\t5.000", "\t4.900"), encoding="utf-8")
    monkeypatch.setenv("STS_DATA_DIR", str(changed))
    lines = reuse_lines(same, tracking_uri)
    assert lines[0].startswith("reuse: 0 of 2") and all("data differs" in line for line in lines[1:]), lines
    monkeypatch.setenv("STS_DATA_DIR", str(tiny_sts_dir))

    with monkeypatch.context() as patch:  # `auto` resolved otherwise, as on a CPU without bf16
        patch.setattr(trial_key_module, "_precision", lambda setting, graphed=False: "fp16")
        lines = reuse_lines(same, tracking_uri)
        assert lines[0].startswith("reuse: 0 of 2") and all("precision differs" in line for line in lines[1:]), lines

    monkeypatch.setattr(trial_key_module, "code_digest", lambda: "other code")
    lines = reuse_lines(same, tracking_uri)
    assert lines[0].startswith("reuse: 0 of 2") and "code differs" in lines[1], lines


def test_reuse_other_code_takes_a_run_that_differs_in_the_code_only_and_says_so(
        tmp_path, tiny_bert, tracking_uri, first_sweep, local_ray, monkeypatch):
    monkeypatch.setattr(trial_key_module, "code_digest", lambda: "edited training code")
    path = spec_file(tmp_path, tiny_bert, "other_code", seeds=[1])
    from sweep.spec.sweep_spec import load_spec

    lines = reuse_lines(load_spec(path), tracking_uri, other_code=True)
    assert lines[0].startswith("reuse: 2 of 2") and sum("reused from other training code" in ln for ln in lines) == 2
    run(SweepOptions(str(path), {}, tracking_uri=tracking_uri, storage=str(tmp_path / "ray"), reuse_other_code=True))
    runs = by_row_and_seed(tracking_uri, "other_code")
    assert all(r.data.tags[Tag.REUSED_OTHER_CODE] == "true" for r in runs.values())
    assert {r.data.tags[Tag.REUSED_FROM] for r in runs.values()} == {r.info.run_id for r in first_sweep.values()}
    from sweep.commands.summary import finish_sweep

    summary = finish_sweep(load_spec(path), tracking_uri)
    assert "reused: 2 of 2 trials were not trained here" in summary
    assert "reused from runs of other training code (--reuse-other-code): " in summary
