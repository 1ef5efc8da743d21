"""The evaluation suites beyond STS, each on small fixture data built here (tests/evaluation_fixtures.py),
with answers known in advance: SentEval's protocols, NLI, re-ranking MAP computed by hand,
multilingual STS."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.evaluation_fixtures import (
    keyword_encode,
    multilingual_sts_folder,
    nli_folder,
    reranking_folder,
    senteval_folder,
)
from trainers.data.sources import DataError
from trainers.metrics import Metric, SuiteName
from trainers.suites import (
    SUITES,
    classifier,
    evaluate_suites,
    multilingual_sts,
    nli,
    parse_evaluations,
    reranking,
    senteval,
)


def noisy_task(n: int = 200, flipped_share: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Two classes whose vectors are one point each; a share of each class carries the other label.
    Any classifier can at best predict each point's majority label: accuracy 1 - flipped_share."""
    labels = np.array([0, 1] * (n // 2))
    flipped = np.zeros(n, bool)
    for label in (0, 1):
        flipped[np.where(labels == label)[0][: int(flipped_share * n / 2)]] = True
    x = np.zeros((n, 4))
    x[:, 0] = np.where(labels == 1, 1.0, -1.0)
    return x, np.where(flipped, 1 - labels, labels)


def test_cross_validation_reaches_the_known_accuracy_of_a_noisy_task():
    # Folds are of equal size, so the mean of per-fold accuracies is the share of unflipped labels: 90.00.
    x, y = noisy_task()
    assert classifier.inner_kfold_accuracy(classifier.ClassifierConfig.named("mlp", 1), x, y, k=2) == 90.0


def test_logistic_regression_reaches_the_known_accuracy_of_a_noisy_task():
    # SentEval's nhid-0 classifier moves its one layer by Adam's small steps: on 200 rows it may stop
    # (tenacity) before it leaves its initial weights, so it gets 1000 rows, in the split protocol.
    x, y = noisy_task(1000)
    assert classifier.split_accuracy(classifier.ClassifierConfig.named("logreg", 1), (x, y), (x, y), (x, y)) == 90.0


def test_split_protocol_trains_on_train_and_scores_on_test():
    # The test labels are the inverse of train and dev: a classifier fit on train scores 0 on test.
    x, y = noisy_task(flipped_share=0.0)
    config = classifier.ClassifierConfig.named("mlp", 1)
    assert classifier.split_accuracy(config, (x, y), (x, y), (x, 1 - y)) == 0.0
    assert classifier.split_accuracy(config, (x, y), (x, y), (x, y)) == 100.0


def test_the_mlp_has_table_9s_shape_and_logreg_is_one_linear_layer():
    mlp = classifier.Classifier(classifier.ClassifierConfig.named("mlp", 1), 7, 3, 1e-5)
    assert [type(m).__name__ for m in mlp.model] == ["Linear", "Sigmoid", "Linear"]
    assert mlp.model[0].out_features == 50 and mlp.optimizer.defaults["weight_decay"] == 1e-5
    logreg = classifier.Classifier(classifier.ClassifierConfig.named("logreg", 1), 7, 3, 1e-5)
    assert [type(m).__name__ for m in logreg.model] == ["Linear"]
    config = classifier.ClassifierConfig()
    assert (config.batch_size, config.tenacity, config.epoch_size) == (64, 5, 4)


def test_senteval_suite_on_fixture_data(tmp_path):
    # 100 sentences per label: SentEval's classifier (Adam at 1e-3, batches of 64) needs a few steps per epoch.
    data = senteval.load_local(senteval_folder(tmp_path, n=100))
    metrics = senteval.evaluate(keyword_encode, data, {"classifier": "mlp", "kfold": 2}, seed=1)
    expected = {Metric.suite("senteval", task, "accuracy") for task in senteval.TASKS}
    assert set(metrics) == expected | {"test_senteval_avg_accuracy"}
    assert all(metrics[name] == 100.0 for name in expected), metrics  # every task is separable by the keywords
    assert metrics["test_senteval_avg_accuracy"] == 100.0


def test_senteval_sst2_is_scored_on_its_test_split(tmp_path):
    data = senteval.load_local(senteval_folder(tmp_path, n=100, invert_sst2_test=True))
    config = classifier.ClassifierConfig.named("mlp", 1)
    splits = [senteval.features(keyword_encode, split) for split in data["sst2"]]
    assert classifier.split_accuracy(config, *splits) == 0.0


def test_senteval_files_are_read_as_senteval_reads_them(tmp_path):
    data = senteval.load_local(senteval_folder(tmp_path, n=4))
    assert data["mr"].labels.tolist() == [1] * 4 + [0] * 4  # pos file first
    trec_train, _ = data["trec"]
    assert trec_train.texts[0][0] == "what abbr question 0" and trec_train.labels[0] == 0  # 'ABBR:fine ' dropped
    mrpc_train, _ = data["mrpc"]
    assert len(mrpc_train.texts) == 2 and len(mrpc_train.labels) == 8  # the header is not a pair
    (tmp_path / "TREC/TREC_10.label").write_text("WHAT:fine nothing\n", encoding="latin-1")
    with pytest.raises(DataError, match=r"TREC_10.label:1: expected 'LABEL:fine question'"):
        senteval.load_local(tmp_path)


def test_mrpc_features_are_senteval_pair_features():
    pairs = senteval.Labelled((("good a", "bad b"), ("bad c", "bad d")), np.array([0, 1]))
    x, _ = senteval.features(keyword_encode, pairs)
    u, v = keyword_encode(["good a", "bad b"]).double().numpy(), keyword_encode(["bad c", "bad d"]).double().numpy()
    np.testing.assert_array_equal(x, np.hstack([np.abs(u - v), u * v]))


def test_nli_suite_on_fixture_data(tmp_path):
    data = nli.load_local(nli_folder(tmp_path, n=200))
    metrics = nli.evaluate(keyword_encode, data, {"classifier": "mlp"}, seed=1)
    assert metrics == {"test_nli_sicke_accuracy": 100.0, "test_nli_snli_accuracy": 100.0,
                       "test_nli_avg_accuracy": 100.0}


def test_nli_features_follow_senteval_per_task():
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 5.0]])
    np.testing.assert_array_equal(nli.sick_features(u, v), [[2.0, 7.0, 3.0, -10.0]])
    np.testing.assert_array_equal(nli.snli_features(u, v), [[1.0, -2.0, 3.0, 5.0, 3.0, -10.0, 2.0, 7.0]])


def angle_encoder(angles: dict[str, tuple[float, float]]):
    """Each text -> a 2-d vector at an angle (degrees) with a length: cosine ranks by angle alone."""
    def encode(texts):
        return torch.tensor([[r * math.cos(math.radians(a)), r * math.sin(math.radians(a))]
                             for a, r in (angles[t] for t in texts)])
    return encode


def test_reranking_map_by_hand(tmp_path):
    # Query 1: candidates at 10, 20, 30, 40 degrees = ranks 1-4; positives at ranks 2 and 4:
    #   AP = (1/2 + 2/4) / 2 = 0.5. Lengths differ so that a dot product would rank them otherwise.
    # Query 2: positives at ranks 1 and 3 of 3: AP = (1/1 + 2/3) / 2 = 5/6.
    # Query 3 has no negative: skipped, as MTEB skips it (it would add an AP of 1).
    angles = {"q1": (0, 1), "n10": (10, 0.1), "p20": (20, 5), "n30": (30, 9), "p40": (40, 0.2),
              "q2": (90, 1), "p95": (95, 0.1), "n100": (100, 7), "p120": (120, 0.3),
              "q3": (180, 1), "p181": (181, 1)}
    queries = [{"query": "q1", "positive": ["p20", "p40"], "negative": ["n10", "n30"]},
               {"query": "q2", "positive": ["p95", "p120"], "negative": ["n100"]},
               {"query": "q3", "positive": ["p181"], "negative": []}]
    data = reranking.load_local(reranking_folder(tmp_path, queries))
    metrics = reranking.evaluate(angle_encoder(angles), data, {}, seed=0)
    expected = 100 * (0.5 + 5 / 6) / 2
    assert metrics["test_reranking_askubuntu_map"] == pytest.approx(expected)
    assert metrics["test_reranking_scidocs_map"] == pytest.approx(expected)
    assert metrics["test_reranking_avg_map"] == pytest.approx(expected)


def test_reranking_names_a_bad_line(tmp_path):
    (tmp_path / "askubuntu").mkdir()
    (tmp_path / "askubuntu/test.jsonl").write_text('{"query": "q", "positive": "p", "negative": []}\n')
    with pytest.raises(DataError, match=r"askubuntu/test.jsonl row 1: expected \{query: str, positive"):
        reranking.load_local(tmp_path)


def test_multilingual_sts_spearman(tmp_path):
    # The keyword vectors give these pairs cosines -1, -0.71, 0, 0.71 and 1: gold scores rising in that
    # order give Spearman 100, falling -100.
    rising = [("good a", "bad b", 0.5), ("bad f", "good desc g", 1.0), ("good c", "what desc", 2.0),
              ("good d", "good desc e", 4.5), ("bad h", "bad i", 5.0)]
    falling = [(a, b, 5.0 - s) for a, b, s in rising]
    sets = {name: rising for name in multilingual_sts.SETS[:3]} | {"sts14-es": falling}
    data = multilingual_sts.load_local(multilingual_sts_folder(tmp_path, sets))
    metrics = multilingual_sts.evaluate(keyword_encode, data, {}, seed=0)
    assert metrics["test_multilingual_sts_sts17_es_es_spearman"] == pytest.approx(100.0)
    assert metrics["test_multilingual_sts_sts14_es_spearman"] == pytest.approx(-100.0)
    assert metrics["test_multilingual_sts_avg_spearman"] == pytest.approx(50.0)
    # Pearson (SG-BERT Tables 2 and 3 print it) of the same cosines, computed here by NumPy.
    cosines = [-1.0, -np.sqrt(0.5), 0.0, np.sqrt(0.5), 1.0]
    pearson = 100 * np.corrcoef(cosines, [s for _, _, s in rising])[0, 1]
    assert metrics["test_multilingual_sts_sts17_ar_ar_pearson"] == pytest.approx(pearson)
    assert metrics["test_multilingual_sts_sts14_es_pearson"] == pytest.approx(-pearson)
    assert metrics["test_multilingual_sts_avg_pearson"] == pytest.approx(pearson / 2)


def test_evaluations_are_parsed_once_with_their_options():
    chosen, problems = parse_evaluations(["senteval", {"nli": {"classifier": "logreg"}}, "senteval"])
    assert problems == []
    assert chosen == [{"suite": "sts"}, {"suite": "senteval", "classifier": "mlp", "kfold": 10},
                      {"suite": "nli", "classifier": "logreg"}]
    assert parse_evaluations(None)[0] == [{"suite": "sts"}]
    _, problems = parse_evaluations(["sts", "glue", {"senteval": {"classifer": "mlp"}}, {"nli": {"classifier": "svm"}}])
    assert problems == [
        ("[1]", "GLUE fine-tunes the encoder, it is no suite of frozen vectors: give the spec a 'glue:' key and "
                "run `python -m sweep glue SPEC` (docs/glue.md)"),
        ("[2].senteval.classifer", "unknown option; did you mean 'classifier'?"),
        ("[3].nli.classifier", "expected one of ['mlp', 'logreg'], got 'svm'"),
    ]


def test_evaluate_suites_runs_each_suite_it_is_given(tmp_path, monkeypatch):
    """STS, chosen first, is evaluated by the loop on its own (it times it); the rest by evaluate_suites."""
    monkeypatch.setenv("RERANKING_DATA_DIR", str(reranking_folder(tmp_path, [
        {"query": "good q", "positive": ["good p"], "negative": ["bad n"]}])))
    chosen, _ = parse_evaluations(["sts", "reranking"])
    assert chosen[0] == {"suite": "sts"}
    assert evaluate_suites(chosen[1:], keyword_encode, {"seed": 0}) == {
        "test_reranking_askubuntu_map": 100.0, "test_reranking_scidocs_map": 100.0, "test_reranking_avg_map": 100.0}


def test_offline_hub_and_missing_folders_are_refused_naming_the_suite_and_the_folder(tmp_path, monkeypatch):
    for suite in (SuiteName.SENTEVAL, SuiteName.NLI, SuiteName.RERANKING, SuiteName.MULTILINGUAL_STS):
        monkeypatch.delenv(SUITES[suite].env, raising=False)
        problem = SUITES[suite].data_problem()
        assert f"${SUITES[suite].env}" in problem, problem
    # tests run with HF_HUB_OFFLINE=1
    assert "cannot be reached (offline)" in SUITES[SuiteName.RERANKING].data_problem()
    monkeypatch.setenv("SENTEVAL_DATA_DIR", str(tmp_path))
    assert "MR/rt-polarity.pos: file not found" in SUITES[SuiteName.SENTEVAL].data_problem()
    senteval_folder(tmp_path, n=2)
    assert SUITES[SuiteName.SENTEVAL].data_problem() is None
