"""The smoke budget end to end (README, ``--budget smoke``): what a budget run of a spec with two seeds
and a sampled axis records, read from its MLflow runs and checkpoints, not from the budget's constants.

Each trial trains at most 30 steps and evaluates every 10; each evaluation set is cut to its first 300
pairs (the data here has 320, and a score on 300 pairs is recomputed from the trial's own encoder); only
the first seed runs and at most 2 samples are drawn; the runs carry the ``sweep.budget`` tag.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from sweep.commands.cli import main
from tests.conftest import child_runs, fresh_ray, spec_file
from tests.reference_encoding import reference_cosines, spearman_x100
from trainers.data.sources import ALL_FILES, SHIPPED_STS_DIR
from trainers.training.checkpoint import ENCODER_DIR

pytestmark = pytest.mark.slow
NAME = "budgeted"
PAIRS = 320  # in each evaluation file here: more than the budget's 300
SAMPLED = {"learning_rate": {"loguniform": [1.0e-5, 1.0e-3]}}


@pytest.fixture(scope="module")
def sts_320(tmp_path_factory) -> Path:
    """The shipped STS files cut to their first 320 pairs."""
    folder = tmp_path_factory.mktemp("sts-320")
    for name in ALL_FILES:
        lines = (SHIPPED_STS_DIR / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
        assert len(lines) > PAIRS
        (folder / f"{name}.tsv").write_text("\n".join(lines[: PAIRS + 1]) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def budget_sweep(tmp_path_factory, tiny_bert, sts_320) -> str:
    folder = tmp_path_factory.mktemp("budget")
    uri = f"sqlite:///{folder}/mlflow.db"
    path = spec_file(
        folder, tiny_bert, NAME, seeds=[1, 2], sample=SAMPLED, num_samples=3, max_concurrent_trials=2,
        # Mean pooling: the tiny random BERT's CLS vectors have cosines within 1.5e-5 of each other, so
        # their ranks (and a Spearman recomputed along another path: one sentence at a time, other
        # threads) are decided by float rounding; mean-pooled cosines spread over 0.88-0.99.
        base={"model": tiny_bert, "batch_size": 8, "train_limit": 400, "max_steps": 100, "eval_every": 25,
              "epochs": 10, "eval_precision": "fp32", "pooling": "mean"},
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STS_DATA_DIR", str(sts_320))
        with fresh_ray():
            assert main(["run", str(path), "--budget", "smoke", "--tracking-uri", uri,
                         "--storage", str(folder / "ray")]) == 0
    return uri


def test_the_budget_is_tagged_and_runs_one_seed_and_two_samples(budget_sweep):
    client = MlflowClient(budget_sweep)
    experiment = client.get_experiment_by_name(NAME)
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'parent'")
    assert parent.data.tags["sweep.budget"] == "smoke"
    trials = child_runs(budget_sweep, NAME)
    assert all(t.data.tags["sweep.budget"] == "smoke" and t.info.status == "FINISHED" for t in trials)
    assert {t.data.tags["sweep.seed"] for t in trials} == {"1"}  # the first of seeds [1, 2]
    trained = [t for t in trials if t.data.tags["sweep.row"] == "simcse"]
    assert len(trained) == 2  # 3 samples asked for
    assert len({t.data.params["learning_rate"] for t in trained}) == 2  # two draws of the sampled axis


def test_each_trial_trains_30_steps_and_evaluates_every_10(budget_sweep):
    client = MlflowClient(budget_sweep)
    for trial in (t for t in child_runs(budget_sweep, NAME) if t.data.tags["sweep.row"] == "simcse"):
        assert trial.data.metrics["steps"] == 30  # the spec asked for 100
        for key in ("dev_spearman", "loss", "lr"):  # the spec asked for an evaluation every 25 steps
            assert [m.step for m in client.get_metric_history(trial.info.run_id, key)] == [10, 20, 30]
        assert (trial.data.params["max_steps"], trial.data.params["eval_every"]) == ("30", "10")


@pytest.mark.parametrize("row", ["untuned", "simcse"])
def test_evaluations_score_the_first_300_pairs(budget_sweep, sts_320, tiny_bert, row):
    """The logged dev and STS-B test scores are those of the trial's encoder on the first 300 pairs, and
    not those on the 320 the files hold."""
    # One trial of the row: the slow reference encodes each sentence alone, and every trial shares the path.
    trial = next(t for t in child_runs(budget_sweep, NAME) if t.data.tags["sweep.row"] == row)
    params = trial.data.params
    assert params["eval_max_pairs"] == "300"
    # The best-dev encoder the trial kept (the untuned one is the model itself).
    encoder = Path(trial.data.tags["sweep.checkpoint"]) / ENCODER_DIR if row == "simcse" else tiny_bert
    pooling, layer = params["pooling"], int(params["pooling_layer"])
    for metric, file in (("best_dev_spearman", "stsb-dev"), ("test_stsb_spearman", "stsb-test")):
        logged = trial.data.metrics[metric]
        cosines, gold = reference_cosines(encoder, pooling, layer, sts_320 / f"{file}.tsv", PAIRS)
        on_300, on_all = spearman_x100(cosines[:300], gold[:300]), spearman_x100(cosines, gold)
        assert logged == pytest.approx(on_300, abs=1e-3), (row, metric)
        assert logged != pytest.approx(on_all, abs=1e-2), (row, metric)
