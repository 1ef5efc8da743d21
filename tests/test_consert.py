import pytest
import torch

from trainers.encoder import SentenceEncoder
from trainers.loop import run_trial
from trainers.losses.contrastive import info_nce, nt_xent
from trainers.methods.consert import ConSERTObjective
from trainers.registry import get_method

BATCH = ["A man plays a guitar on a stage tonight.", "Two dogs run in a field.", "The market fell.", "She cooks."]


def slow_nt_xent(a, b, tau):
    views = list(a) + list(b)
    n = len(a)
    total = 0
    for i in range(2 * n):
        j = i + n if i < n else i - n
        sim = lambda u, v: torch.exp(torch.dot(u, v) / (u.norm() * v.norm()) / tau)  # noqa: E731
        total = total - torch.log(sim(views[i], views[j]) / sum(sim(views[i], views[k]) for k in range(2 * n) if k != i))
    return total / (2 * n)


def slow_info_nce(a, b, tau):
    sim = lambda u, v: torch.exp(torch.dot(u, v) / (u.norm() * v.norm()) / tau)  # noqa: E731
    return sum(-torch.log(sim(a[i], b[i]) / sum(sim(a[i], b[j]) for j in range(len(b)))) for i in range(len(a))) / len(a)


@pytest.mark.parametrize("fast, slow", [(nt_xent, slow_nt_xent), (info_nce, slow_info_nce)])
def test_contrastive_losses_and_gradients_match_slow_references(fast, slow):
    torch.manual_seed(0)
    a = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    value, reference = fast(a, b, 0.1), slow(a, b, 0.1)
    torch.testing.assert_close(value, reference)
    for x, y in zip(torch.autograd.grad(value, (a, b)), torch.autograd.grad(reference, (a, b))):
        torch.testing.assert_close(x, y)


def build(tiny_bert, **overrides):
    config = get_method("consert").resolve({"model": tiny_bert, **overrides})
    return ConSERTObjective(config, SentenceEncoder.from_pretrained(tiny_bert))


def loss_of(objective, seed=0):
    torch.manual_seed(seed)
    return float(objective.loss(BATCH))


def test_bert_dropout_is_removed_so_none_none_views_coincide(tiny_bert):
    objective = build(tiny_bert, aug1="none", aug2="none")
    objective.train()
    features = objective.encoder.tokenize(BATCH, 64)
    torch.testing.assert_close(objective.view(features, "none"), objective.view(features, "none"))
    kept = build(tiny_bert, aug1="none", aug2="none", remove_bert_dropout=False).train()
    assert not torch.allclose(kept.view(features, "none"), kept.view(features, "none"))


@pytest.mark.parametrize(
    "knob, value",
    [("aug1", "token_cutoff"), ("aug1", "dropout"), ("aug1", "span_cutoff"), ("aug2", "shuffle"), ("aug2", "none"),
     ("temperature", 0.5), ("feature_cutoff_rate", 0.5)],
)
def test_each_knob_changes_the_loss(tiny_bert, knob, value):
    assert loss_of(build(tiny_bert, **{knob: value})) != pytest.approx(loss_of(build(tiny_bert)), rel=1e-6)


@pytest.mark.parametrize("knob, aug", [("token_cutoff_rate", "token_cutoff"), ("dropout_rate", "dropout"),
                                        ("span_cutoff_rate", "span_cutoff")])
def test_each_rate_changes_its_augmentation(tiny_bert, knob, aug):
    base = loss_of(build(tiny_bert, aug1=aug))
    assert loss_of(build(tiny_bert, aug1=aug, **{knob: 0.6})) != pytest.approx(base, rel=1e-6)


def test_consert_trial_runs_through_the_shared_loop(tiny_bert, use_tiny_sts):
    final = run_trial({"method": "consert", "model": tiny_bert, "max_steps": 3, "batch_size": 8, "train_limit": 40,
                       "learning_rate": 1e-3, "eval_every": 3})
    assert final["steps"] == 3 and "test_avg_spearman" in final
    config = get_method("consert").resolve({})
    assert (config["batch_size"], config["learning_rate"], config["optimizer"], config["pooling"]) == (96, 5e-7, "adam", "last2avg")
