"""A spec's ``evaluations`` key: validated once (exit 2 naming the file and key), its data read at plan
time (offline, a suite without its folder is refused naming the suite and the folder variable), carried
in each trial's config, and run on the trial's best state with metrics in its final record."""

from __future__ import annotations

from pathlib import Path

from sweep.commands.cli import main as sweep_main
from sweep.spec.sweep_spec import load_spec
from tests.conftest import write_spec
from tests.evaluation_fixtures import reranking_folder
from trainers.metrics import Metric, SuiteName
from trainers.training.loop import run_trial


def suites_spec(tmp_path: Path, tiny_bert: str, evaluations=None) -> Path:
    raw = {"name": "suites", "method": "none", "base": {"model": tiny_bert, "pooling": "mean"}}
    if evaluations is not None:
        raw[SuiteName.KEY] = evaluations
    return write_spec(tmp_path, raw)


def test_senteval_without_its_data_is_refused_at_plan_time(tmp_path, tiny_bert, use_tiny_sts, monkeypatch, capsys):
    monkeypatch.delenv("SENTEVAL_DATA_DIR", raising=False)
    path = suites_spec(tmp_path, tiny_bert, ["sts", "senteval"])
    assert sweep_main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path.resolve()}: evaluations: senteval: needs its data in a local folder: set $SENTEVAL_DATA_DIR" in err
    assert "Traceback" not in err


def test_a_bad_suite_name_or_option_exits_2_with_file_and_key(tmp_path, tiny_bert, use_tiny_sts, capsys):
    path = suites_spec(tmp_path, tiny_bert, ["sts", "sentevl", {"reranking": {"k": 3}}])
    assert sweep_main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: evaluations[1]: expected a suite name in" in err and "got 'sentevl'" in err
    assert f"{path}: evaluations[2].reranking.k: unknown option" in err


def test_each_trial_config_carries_the_chosen_suites(tmp_path, tiny_bert, use_tiny_sts, monkeypatch):
    monkeypatch.setenv("RERANKING_DATA_DIR", str(reranking_folder(tmp_path / "rr", [
        {"query": "q", "positive": ["q"], "negative": ["an unrelated text"]}])))
    default = load_spec(suites_spec(tmp_path, tiny_bert))
    assert [t.config[SuiteName.KEY] for t in default.trials] == [[{"suite": "sts"}]]
    spec = load_spec(suites_spec(tmp_path, tiny_bert, ["reranking"]))
    assert spec.trials[0].config[SuiteName.KEY] == [{"suite": "sts"}, {"suite": "reranking"}]


def test_a_trial_is_evaluated_on_its_chosen_suites(tmp_path, tiny_bert, use_tiny_sts, monkeypatch):
    # The query is its own positive: cosine 1 ranks it first, whatever the random model: MAP 100.
    monkeypatch.setenv("RERANKING_DATA_DIR", str(reranking_folder(tmp_path / "rr", [
        {"query": "a cat sat", "positive": ["a cat sat"], "negative": ["stock prices fell sharply today"]}])))
    spec = load_spec(suites_spec(tmp_path, tiny_bert, ["sts", "reranking"]))
    final = run_trial(spec.trials[0].config)
    assert final[Metric.suite(SuiteName.RERANKING, "askubuntu", SuiteName.MAP)] == 100.0
    assert final[Metric.suite(SuiteName.RERANKING, SuiteName.AVG, SuiteName.MAP)] == 100.0
    assert Metric.TEST_AVG in final  # STS still runs
    assert Metric.suite(SuiteName.RERANKING, "askubuntu", SuiteName.MAP) not in run_trial(load_spec(
        suites_spec(tmp_path, tiny_bert)).trials[0].config)
