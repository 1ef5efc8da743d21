import numpy as np
import pytest
import torch
from scipy import stats

from trainers.data.sources import STSSet
from trainers.suites.sts import STSEvaluator, average_metrics, evaluate_sets, set_metrics

rng = np.random.default_rng(0)


def make_set(name, n, subsets=None):
    words = [f"w{i}" for i in range(n)]
    return STSSet(
        name,
        tuple(f"left {w}" for w in words),
        tuple(f"right {w}" for w in words),
        rng.uniform(0, 5, n),
        tuple(subsets) if subsets else ("",) * n,
    )


def ranks_spearman(x, y):
    """Spearman as the Pearson correlation of ranks, computed by hand (no ties here)."""
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return 100 * np.corrcoef(rx, ry)[0, 1]


def test_subset_aggregations_by_hand():
    subsets = ["a"] * 30 + ["b"] * 10
    sts = make_set("sts12", 40, subsets)
    predicted = rng.normal(size=40)
    metrics = set_metrics("sts12", sts, predicted)
    a, b = ranks_spearman(predicted[:30], sts.scores[:30]), ranks_spearman(predicted[30:], sts.scores[30:])
    assert metrics["sts12_spearman"] == pytest.approx(ranks_spearman(predicted, sts.scores))
    assert metrics["sts12_mean_spearman"] == pytest.approx((a + b) / 2)
    assert metrics["sts12_wmean_spearman"] == pytest.approx((30 * a + 10 * b) / 40)
    assert metrics["sts12_pearson"] == pytest.approx(100 * np.corrcoef(predicted, sts.scores)[0, 1])


def test_sets_without_subsets_have_only_all():
    metrics = set_metrics("stsb", make_set("stsb", 20), rng.normal(size=20))
    assert set(metrics) == {"stsb_spearman", "stsb_pearson"}


def test_seven_set_average_by_hand():
    names = ["stsb", "sickr", "sts12", "sts13", "sts14", "sts15", "sts16"]
    metrics = {f"{n}_spearman": float(i) for i, n in enumerate(names)}
    metrics["sts12_mean_spearman"] = 10.0
    metrics["sts12_wmean_spearman"] = 20.0
    averages = average_metrics(metrics)
    assert averages["avg_spearman"] == pytest.approx(sum(range(7)) / 7)
    assert averages["avg_mean_spearman"] == pytest.approx((sum(range(7)) - 2 + 10) / 7)
    assert averages["avg_wmean_spearman"] == pytest.approx((sum(range(7)) - 2 + 20) / 7)


def test_cosine_and_pairing_with_a_known_encoder():
    """Vectors chosen so the cosine of pair i is known: the metrics follow from it."""
    sts = make_set("stsb", 25)
    angles = rng.uniform(0, np.pi, 25)
    table = {}
    for i, (a, b) in enumerate(zip(sts.sentence1, sts.sentence2)):
        table[a] = torch.tensor([1.0, 0.0, 0.0])
        table[b] = torch.tensor([np.cos(angles[i]), np.sin(angles[i]), 0.0], dtype=torch.float32) * (i + 1)

    metrics = evaluate_sets(lambda sentences: torch.stack([table[s] for s in sentences]), {"stsb": sts})
    expected = 100 * stats.spearmanr(np.cos(angles), sts.scores).statistic
    assert metrics["stsb_spearman"] == pytest.approx(expected)


def test_evaluator_splits_dev_and_test_and_limits_pairs():
    sets = {"stsb-dev": make_set("stsb-dev", 30)}
    sets.update({f"{n}-test": make_set(n, 30) for n in ["stsb", "sickr", "sts12", "sts13", "sts14", "sts15", "sts16"]})
    seen = []

    def encode(sentences):
        seen.append(len(sentences))
        return torch.randn(len(sentences), 4)

    evaluator = STSEvaluator(sets, max_pairs=10)
    assert set(evaluator.dev(encode)) == {"dev_spearman", "dev_pearson"}
    test = evaluator.test(encode)
    assert "test_stsb_spearman" not in test and "stsb_spearman" in test and "avg_spearman" in test
    assert seen == [20, 7 * 20]  # one encode call each, first 10 pairs of every set


def test_avg_sts_selects_on_the_mean_of_sts_b_devs_and_sick_r_devs_spearman():
    """SimCSE's trainer's avg_sts (DCLR's selection): each dev set's Spearman of the cosines, computed here by
    hand from known vectors, and their plain mean as dev_spearman; 'stsb' scores STS-B dev alone."""
    sets = {"stsb-dev": make_set("stsb-dev", 30), "sickr-dev": make_set("sickr-dev", 12)}
    vectors = {s: torch.tensor(rng.normal(size=3), dtype=torch.float32)
               for sts in sets.values() for s in (*sts.sentence1, *sts.sentence2)}
    encode = lambda sentences: torch.stack([vectors[s] for s in sentences])  # noqa: E731

    def by_hand(sts: STSSet) -> float:
        cosines = [float(torch.nn.functional.cosine_similarity(vectors[a], vectors[b], dim=0))
                   for a, b in zip(sts.sentence1, sts.sentence2)]
        return ranks_spearman(np.array(cosines), sts.scores)

    stsb, sickr = by_hand(sets["stsb-dev"]), by_hand(sets["sickr-dev"])
    scores = STSEvaluator(sets, selection_metric="avg_sts").dev(encode)
    assert scores["dev_stsb_spearman"] == pytest.approx(stsb) and scores["dev_sickr_spearman"] == pytest.approx(sickr)
    assert scores["dev_spearman"] == pytest.approx((stsb + sickr) / 2)
    assert STSEvaluator(sets).dev(encode)["dev_spearman"] == pytest.approx(stsb)


def test_senteval_batches_hand_the_encoder_each_batchs_first_then_second_sentences_in_file_order():
    """dev_batch_pairs (DCLR's selection_batches 'senteval'): SentEval's STS loop, each set's pairs in order, the
    first sentences of a batch in one call, then their second sentences; with an encoder whose vectors do not depend
    on their batch the metrics are those of one call."""
    sets = {"stsb-dev": make_set("stsb-dev", 5), "sickr-dev": make_set("sickr-dev", 3)}
    vectors = {s: torch.tensor(rng.normal(size=3), dtype=torch.float32)
               for sts in sets.values() for s in (*sts.sentence1, *sts.sentence2)}
    calls = []

    def encode(sentences):
        calls.append(list(sentences))
        return torch.stack([vectors[s] for s in sentences])

    batched = STSEvaluator(sets, selection_metric="avg_sts", dev_batch_pairs=2).dev(encode)
    stsb, sickr = sets["stsb-dev"], sets["sickr-dev"]
    assert calls == [list(stsb.sentence1[0:2]), list(stsb.sentence2[0:2]), list(stsb.sentence1[2:4]),
                     list(stsb.sentence2[2:4]), [stsb.sentence1[4]], [stsb.sentence2[4]],
                     list(sickr.sentence1[0:2]), list(sickr.sentence2[0:2]), [sickr.sentence1[2]],
                     [sickr.sentence2[2]]]
    calls.clear()
    assert STSEvaluator(sets, selection_metric="avg_sts").dev(encode) == pytest.approx(batched)
    assert len(calls) == 1
