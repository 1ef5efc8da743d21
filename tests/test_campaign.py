"""A campaign (``python -m sweep paper``) trains each distinct trial of its specs once, in one Tune run, and
then every spec is a sweep of its own whose trials are those trials, reused; ``reports.paper`` renders it.

Two tiny BERT specs share the untuned row and SimCSE at seed 1: of their 5 trials, 3 are distinct.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from reports.paper import main as report_main
from results.record import Tag
from sweep.commands.cli import main
from tests.conftest import child_runs, fresh_ray, spec_file
from tests.test_reuse import final_metrics

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, tiny_bert) -> tuple[Path, str, Path]:
    """The campaign file, its store, and the Ray storage; run once."""
    folder = tmp_path_factory.mktemp("campaign")
    spec_file(folder, tiny_bert, "first", seeds=[1])
    spec_file(folder, tiny_bert, "second", seeds=[1, 2])
    path = folder / "pair.yaml"
    path.write_text(yaml.safe_dump({"description": "two specs", "specs": ["first.yaml", "second.yaml"]}))
    uri = f"sqlite:///{folder}/mlflow.db"
    with fresh_ray():
        assert main(["paper", str(path), "--tracking-uri", uri, "--storage", str(folder / "ray")]) == 0
    return path, uri, folder


def test_the_plan_counts_each_spec_and_the_distinct_trials(campaign, capsys):
    path, uri, _ = campaign
    assert main(["paper", str(path), "--plan", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "5 trials in its specs, 3 distinct (2 shared between specs)" in out
    assert "reuse: 3 of the 3 distinct trials are in the store already; 0 to train" in out


def test_each_distinct_trial_trains_once_and_every_spec_holds_its_trials(campaign):
    _, uri, _ = campaign
    trained = child_runs(uri, "paper-pair")
    assert len(trained) == 3 and not any(Tag.REUSED_FROM in run.data.tags for run in trained)
    assert len({run.data.tags[Tag.TRIAL_KEY] for run in trained}) == 3
    sources = {run.data.tags[Tag.TRIAL_KEY]: run for run in trained}
    for name, count in (("first", 2), ("second", 3)):
        runs = child_runs(uri, name)
        assert len(runs) == count and all(run.info.status == "FINISHED" for run in runs)
        for run in runs:  # every trial of a spec is the campaign's trial of its key, with its scores
            source = sources[run.data.tags[Tag.TRIAL_KEY]]
            assert run.data.tags[Tag.REUSED_FROM] == source.info.run_id
            assert final_metrics(run) == final_metrics(source) and final_metrics(run)


def test_a_campaign_run_again_trains_nothing(campaign, capsys):
    path, uri, folder = campaign
    with fresh_ray():
        assert main(["paper", str(path), "--tracking-uri", uri, "--storage", str(folder / "ray")]) == 0
    out = capsys.readouterr().out
    assert "paper-pair: 3 trials finished (0 reused, 3 trained by paper-pair)" in out  # the same three runs
    assert "second: 3 trials finished (3 reused, 0 trained by second)" in out
    assert len(child_runs(uri, "paper-pair")) == 3


def test_the_report_has_each_sweep_table_and_is_logged_to_the_campaign(campaign):
    path, uri, folder = campaign
    out = folder / "report"
    assert report_main([str(path), "--tracking-uri", uri, "--out", str(out)]) == 0
    markdown = (out / "pair.md").read_text()
    second = child_runs(uri, "second")
    for run in second:  # each trial's test average is in the spec's table
        assert f"{run.data.metrics['test_avg_spearman']:.2f}" in markdown
    html = (out / "pair.html").read_text()
    assert "data:image/png;base64," in html and "<table" in html and 'src="http' not in html
    client = MlflowClient(uri)
    (parent,) = client.search_runs([client.get_experiment_by_name("paper-pair").experiment_id],
                                   "tags.`sweep.role` = 'parent'")
    logged = {Path(item.path).name for item in client.list_artifacts(parent.info.run_id, "report")}
    assert {"pair.md", "pair.html", "pair.tex"} <= logged


def test_an_unknown_campaign_is_refused(capsys):
    assert main(["paper", "no-such-paper", "--plan"]) == 2
    assert "unknown campaign 'no-such-paper'" in capsys.readouterr().err


def test_a_sweep_spec_given_as_a_campaign_is_refused_with_the_command_that_runs_it(capsys):
    spec = Path(__file__).resolve().parents[1] / "search_spaces" / "smoke.yaml"
    assert main(["paper", str(spec), "--plan"]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: a sweep spec, not a campaign" in err and f"`python -m sweep run {spec}`" in err
    assert "Traceback" not in err


def test_the_campaign_sweep_is_continued_by_sweep_paper_not_resume(campaign, capsys):
    _, _, folder = campaign
    assert main(["resume", "paper-pair", "--storage", str(folder / "ray")]) == 2
    assert "continue it with `python -m sweep paper pair`" in capsys.readouterr().err
