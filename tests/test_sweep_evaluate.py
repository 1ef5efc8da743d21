"""`python -m sweep evaluate`: a finished tiny sweep's kept encoders on another suite, logged into each
trial's own MLflow run, collected into the parquet and a table, equal to an independent evaluation of the
exported encoder; refusals (exit 2, one line) before anything is evaluated, without torch."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from reports.collect import collect
from reports.paper_tables import build_tables
from reports.table_specs import parse_table_spec
from results.record import Tag
from results.render import to_markdown
from sweep.commands.cli import main
from sweep.commands.status import trial_rows
from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, fresh_ray, spec_file
from tests.evaluation_fixtures import multilingual_sts_folder
from tests.test_light_imports import heavy_modules_after
from trainers.data.sources import read_sts_tsv
from trainers.metrics import Metric, SuiteName
from trainers.models.encoder import SentenceEncoder
from trainers.suites import multilingual_sts

ROWS = [{"name": "untuned", "set": {"method": "none", "pooling": "mean"}}, {"name": "simcse", "set": {}}]
PEARSON = {name: Metric.suite(SuiteName.MULTILINGUAL_STS, name, SuiteName.PEARSON)
           for name in ("sts14_es", "sts17_ar_ar", "sts17_es_es", "sts17_en_en")}


def read_rows(tiny_sts_dir, start: int) -> list[tuple[str, str, float]]:
    """10 pairs of the tiny STS-B test set from ``start`` (real sentences and gold)."""
    pairs = read_sts_tsv(tiny_sts_dir / "stsb-test.tsv")
    return list(zip(pairs.sentence1, pairs.sentence2, pairs.scores.tolist()))[start: start + 10]


def multilingual_fixture(root, tiny_sts_dir):
    """The four sets, each a different slice of the tiny STS-B test pairs."""
    return multilingual_sts_folder(root, {name: read_rows(tiny_sts_dir, 10 * i)
                                          for i, name in enumerate(multilingual_sts.SETS)})


def refused(capsys, argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_kept_encoders_evaluated_into_their_runs_the_parquet_and_a_table(tmp_path, tracking_uri, tiny_bert,
                                                                          tiny_sts_dir, monkeypatch, capsys):
    monkeypatch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
    # keep_models best: one of the two SimCSE trials keeps its encoder, the other's is deleted.
    path = spec_file(tmp_path, tiny_bert, "evaluated", rows=ROWS, seeds=[1, 2], keep_models="best",
                     max_concurrent_trials=1)
    with fresh_ray():  # fp32 evaluation, as the independent check below encodes
        run(SweepOptions(str(path), {"eval_precision": "fp32"}, tracking_uri=tracking_uri,
                         storage=str(tmp_path / "ray")))
    states = {(r["row"], r["seed"]): (r["export"], r["trial"]) for r in trial_rows("evaluated", tracking_uri)}
    kept = next(trial for (row, _), (state, trial) in states.items() if row == "simcse" and state == "yes")
    deleted = next(trial for (row, _), (state, trial) in states.items() if state == "deleted")
    runs_before = {r.data.tags[Tag.TRIAL_ID]: r.info.run_id for r in child_runs(tracking_uri, "evaluated")}
    capsys.readouterr()
    common = ["--suite", "multilingual_sts", "--tracking-uri", tracking_uri]

    # Refusals, before anything is evaluated.
    monkeypatch.delenv("MULTILINGUAL_STS_DATA_DIR", raising=False)
    refused(capsys, ["evaluate", "evaluated", "--trial", kept, *common],
            "--suite multilingual_sts: needs its data in a local folder: set $MULTILINGUAL_STS_DATA_DIR")
    monkeypatch.setenv("MULTILINGUAL_STS_DATA_DIR", str(multilingual_fixture(tmp_path / "ml", tiny_sts_dir)))
    refused(capsys, ["evaluate", "evaluated", "--trial", deleted, *common], "encoder was not kept (keep_models)")
    refused(capsys, ["evaluate", "evaluated", *common], "trials whose encoder was kept: ")  # the whole sweep
    refused(capsys, ["evaluate", "evaluated", "--row", "nope", *common], "rows: ['simcse', 'untuned']")
    refused(capsys, ["evaluate", "nothing-here", *common], "no MLflow experiment named 'nothing-here'")
    assert not any(PEARSON["sts14_es"] in r.data.metrics for r in child_runs(tracking_uri, "evaluated"))

    assert main(["evaluate", "evaluated", "--trial", kept, *common]) == 0
    assert main(["evaluate", "evaluated", "--row", "untuned", *common]) == 0
    out = capsys.readouterr().out
    assert f"trial {kept} (row 'simcse'" in out and "test_multilingual_sts_avg_pearson" in out

    # Into each trial's existing run: no run was added, the evaluated ones hold the metrics and say so.
    runs = {r.data.tags[Tag.TRIAL_ID]: r for r in child_runs(tracking_uri, "evaluated")}
    assert {trial: r.info.run_id for trial, r in runs.items()} == runs_before
    evaluated = {trial for trial, r in runs.items() if PEARSON["sts14_es"] in r.data.metrics}
    assert evaluated == {kept, states[("untuned", "1")][1]}
    assert json.loads(runs[kept].data.tags[Tag.EVALUATED_LATER]) == [{"suite": "multilingual_sts"}]
    logged = runs[kept].data.metrics

    # The numbers equal an independent evaluation of the exported encoder.
    assert main(["export", "evaluated", "--trial", kept, "--out", str(tmp_path / "export"),
                 "--tracking-uri", tracking_uri]) == 0
    exported = SentenceEncoder.from_exported(tmp_path / "export")
    data = multilingual_sts.load_local(tmp_path / "ml")
    independent = multilingual_sts.evaluate(lambda s: exported.encode(s), data, {}, seed=0)
    assert set(independent) <= set(logged)
    for key, value in independent.items():
        assert logged[key] == pytest.approx(value, abs=1e-3), key

    # The parquet and a table.
    frame = collect(tracking_uri)
    by_trial = frame.set_index("trial_id")
    assert by_trial.loc[kept, PEARSON["sts17_es_es"]] == pytest.approx(logged[PEARSON["sts17_es_es"]])
    assert pd.isna(by_trial.loc[deleted, PEARSON["sts17_es_es"]])
    table_spec = parse_table_spec("t", {"title": "multilingual", "kind": "rows", "spec": str(path),
                                        "columns": ["STS14 es", "STS17 ar-ar", "STS17 es-es", "STS17 en-en"],
                                        "rows": ["untuned", "simcse"]}, tmp_path)
    (table,) = build_tables(frame, ["t"], {"t": table_spec}, {})
    simcse_line = next(line for line in to_markdown(table).splitlines() if line.startswith("| simcse "))
    assert f"{logged[PEARSON['sts17_en_en']]:.2f}" in simcse_line, simcse_line

    # An evaluation with the same key (trial, suite, options, data) is not computed again: on the same run,
    # nor on a run of the same trial in another sweep (reused), which gets the same metrics copied.
    import sweep.commands.evaluate as evaluate

    def not_again(run, suite):
        raise AssertionError(f"{run.info.run_id} evaluated again")

    with monkeypatch.context() as patch:
        patch.setattr(evaluate, "evaluate_run", not_again)
        assert main(["evaluate", "evaluated", "--trial", kept, *common]) == 0
        assert "not computed again" in capsys.readouterr().out
        grown = spec_file(tmp_path, tiny_bert, "evaluated-again", rows=ROWS, seeds=[1, 2], max_concurrent_trials=1)
        with fresh_ray():
            run(SweepOptions(str(grown), {"eval_precision": "fp32"}, tracking_uri=tracking_uri,
                             storage=str(tmp_path / "ray")))
        source = runs[kept].info.run_id
        (again,) = [r for r in child_runs(tracking_uri, "evaluated-again")
                    if r.data.tags.get(Tag.REUSED_FROM) == source]
        assert main(["evaluate", "evaluated-again", "--trial", again.data.tags[Tag.TRIAL_ID], *common]) == 0
        assert f"taken from run {source}" in capsys.readouterr().out
    copied = next(r for r in child_runs(tracking_uri, "evaluated-again") if r.info.run_id == again.info.run_id)
    assert {k: copied.data.metrics[k] for k in independent} == {k: logged[k] for k in independent}

    # Other data is another evaluation: computed, and scored on the new data.
    monkeypatch.setenv("MULTILINGUAL_STS_DATA_DIR", str(multilingual_sts_folder(tmp_path / "ml2", {
        name: rows for name, rows in zip(multilingual_sts.SETS, [read_rows(tiny_sts_dir, 5 + 8 * i)
                                                                 for i in range(len(multilingual_sts.SETS))])})))
    assert main(["evaluate", "evaluated", "--trial", kept, *common]) == 0
    assert "not computed again" not in capsys.readouterr().out
    rescored = next(r for r in child_runs(tracking_uri, "evaluated") if r.data.tags[Tag.TRIAL_ID] == kept)
    assert rescored.data.metrics[PEARSON["sts14_es"]] != logged[PEARSON["sts14_es"]]


def test_bad_suites_are_refused_without_torch(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/none.db"
    refused(capsys, ["evaluate", "x", "--suite", "sentevl", "--tracking-uri", uri],
            "--suite: expected a suite name in ['sts', 'senteval', 'nli', 'reranking', 'multilingual_sts']")
    refused(capsys, ["evaluate", "x", "--suite", "{senteval: {classifer: mlp}}", "--tracking-uri", uri],
            "--suite senteval.classifer: unknown option; did you mean 'classifier'?")
    refused(capsys, ["evaluate", "x", "--suite", "sts", "--tracking-uri", uri], "--suite: sts is every trial's own")
    refused(capsys, ["evaluate", "x", "--suite", "nli", "--tracking-uri", uri], f"no MLflow store at {uri}")
    code = ("import contextlib, io\nfrom sweep.commands.cli import main\n"
            "with contextlib.redirect_stderr(io.StringIO()):\n"
            f"    main(['evaluate', 'x', '--suite', 'nli', '--tracking-uri', {uri!r}])\n"
            f"    main(['evaluate', 'x', '--suite', 'sentevl', '--tracking-uri', {uri!r}])")
    assert heavy_modules_after(code) == []
