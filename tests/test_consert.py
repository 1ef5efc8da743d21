import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import trainers.data.nli_examples as nli
import trainers.methods.consert as consert
from sweep.spec.sweep_spec import SpecError, load_spec
from tests.conftest import build_objective
from tests.knob_checks import assert_knob_changes_the_loss
from trainers.data.sources import evaluation_names, load_sts
from trainers.losses.contrastive import info_nce, nt_xent
from trainers.losses.nli import nli_classification_loss
from trainers.models.encoder import SentenceEncoder
from trainers.models.pooling import masked_mean
from trainers.objectives.consert import ConSERTObjective, NLIObjective
from trainers.objectives.nli import mean_last_layer
from trainers.registry import get_method
from trainers.suites.sts import STSEvaluator
from trainers.training.checkpoint import TrialSession
from trainers.training.loop import run_trial, train
from trainers.views.embedding import augmented_hidden_states, augmented_states

BATCH = ["A man plays a guitar on a stage tonight.", "Two dogs run in a field.", "The market fell.", "She cooks."]
NLI = [
    ("A man plays a guitar on stage.", "A man is performing music.", 0),
    ("A man plays a guitar on stage.", "Nobody is playing anything.", 2),
    ("Two dogs run in a field.", "The dogs are brothers.", 1),
    ("Two dogs run in a field.", "Animals are outside.", 0),
    ("The market fell sharply today.", "Stocks went up.", 2),
    ("She cooks dinner for her family.", "She is a good cook.", 1),
]
SPECS = Path(__file__).resolve().parent.parent / "search_spaces"


def slow_nt_xent(a, b, tau):
    views = list(a) + list(b)
    n = len(a)
    total = 0
    for i in range(2 * n):
        j = i + n if i < n else i - n
        sim = lambda u, v: torch.exp(torch.dot(u, v) / (u.norm() * v.norm()) / tau)  # noqa: E731
        total = total - torch.log(sim(views[i], views[j])
                                  / sum(sim(views[i], views[k]) for k in range(2 * n) if k != i))
    return total / (2 * n)


def authors_nt_xent(a, b, tau):
    """The authors' NT-Xent as their code computes it (``_contrastive_loss_forward``): each direction's cross
    entropy over [a.b, a.a without itself], their two means added (loss_a + loss_b)."""
    a, b = torch.nn.functional.normalize(a, dim=-1), torch.nn.functional.normalize(b, dim=-1)
    eye = torch.eye(len(a)) * 1e9
    labels = torch.arange(len(a))
    loss_a = torch.nn.functional.cross_entropy(torch.cat([a @ b.T, a @ a.T - eye], dim=1) / tau, labels)
    loss_b = torch.nn.functional.cross_entropy(torch.cat([b @ a.T, b @ b.T - eye], dim=1) / tau, labels)
    return loss_a + loss_b


def test_the_authors_nt_xent_is_twice_the_average_over_the_2n_anchors():
    """joint_weight's help says the authors' runs at alpha 0.15 are 0.3 here: their NT-Xent (loss_a + loss_b) is
    twice Section 3.1's average, which nt_xent computes."""
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    assert authors_nt_xent(a, b, 0.1).item() == pytest.approx(2 * nt_xent(a, b, 0.1).item(), rel=1e-5)
    assert nt_xent(a, b, 0.1).item() == pytest.approx(slow_nt_xent(a, b, 0.1).item(), rel=1e-5)


def test_transfer_weight_scales_eq1_and_its_authors_value_is_their_scripts_loss(tiny_bert):
    """transfer_weight 0.3 is the authors' transfer loss (--cl_rate 0.15 times loss_a + loss_b) of the same views;
    1, the default, is Eq. 1's NT-Xent itself, computed apart from the objective."""
    ours, theirs = build(tiny_bert).train(), build(tiny_bert, transfer_weight=0.3).train()
    tokens, *draws = (torch.manual_seed(0), ours.inputs(BATCH))[1]
    first, second = (mean_last_layer(augmented_states(ours.encoder, tokens, augmentation, drawn), tokens)
                     for augmentation, drawn in zip(ours.augmentations, draws))
    assert loss_of(ours) == pytest.approx(slow_nt_xent(first, second, 0.1).item(), rel=1e-5)
    assert loss_of(theirs) == pytest.approx(0.15 * authors_nt_xent(first, second, 0.1).item(), rel=1e-5)


def slow_info_nce(a, b, tau):
    sim = lambda u, v: torch.exp(torch.dot(u, v) / (u.norm() * v.norm()) / tau)  # noqa: E731
    return sum(-torch.log(sim(a[i], b[i]) / sum(sim(a[i], b[j]) for j in range(len(b))))
               for i in range(len(a))) / len(a)


def slow_nli_classification_loss(r1, r2, labels, weight, bias, max_square=False):
    total = 0
    for u, v, y in zip(r1, r2, labels.tolist()):
        f = torch.cat([u, v, torch.stack([abs(x - z) for x, z in zip(u, v)])])
        if max_square:  # the authors' AdvCLSoftmaxLoss: torch.max(rep_a, rep_b).pow(2)
            f = torch.cat([f, torch.stack([max(x, z) ** 2 for x, z in zip(u, v)])])
        logits = [torch.dot(weight[c], f) + bias[c] for c in range(len(bias))]
        total = total - (logits[y] - torch.log(sum(torch.exp(logit) for logit in logits)))
    return total / len(labels)


@pytest.mark.parametrize("fast, slow", [(nt_xent, slow_nt_xent), (info_nce, slow_info_nce)])
def test_contrastive_losses_and_gradients_match_slow_references(fast, slow):
    torch.manual_seed(0)
    a = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    value, reference = fast(a, b, 0.1), slow(a, b, 0.1)
    torch.testing.assert_close(value, reference)
    for x, y in zip(torch.autograd.grad(value, (a, b)), torch.autograd.grad(reference, (a, b))):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("max_square", [False, True])
def test_nli_classification_loss_and_gradients_match_slow_reference(max_square):
    torch.manual_seed(0)
    shapes = ((5, 4), (5, 4), (3, 16 if max_square else 12), (3,))  # r1, r2, W, b
    tensors = [torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes]
    labels = torch.tensor([0, 2, 1, 1, 0])
    value = nli_classification_loss(tensors[0], tensors[1], labels, tensors[2], tensors[3], max_square)
    reference = slow_nli_classification_loss(tensors[0], tensors[1], labels, tensors[2], tensors[3], max_square)
    torch.testing.assert_close(value, reference)
    for x, y in zip(torch.autograd.grad(value, tensors), torch.autograd.grad(reference, tensors)):
        torch.testing.assert_close(x, y)


def config_of(tiny_bert, **overrides):
    return get_method("consert").resolve({"model": tiny_bert, **overrides})


CLASSIFIER_SEED = 0
"""The NLI classifier is initialised right after this seed: two builds of one config are the same objective."""


def build(tiny_bert, **overrides):
    """The objective of a single-stage setting."""
    return build_objective("consert", tiny_bert, CLASSIFIER_SEED, **overrides)


def default_of(knob):
    return get_method("consert").all_knobs[knob].default


def loss_of(objective, batch=BATCH, seed=0):
    torch.manual_seed(seed)
    return objective.loss(batch).item()


def test_bert_dropout_is_removed_so_none_none_views_coincide(tiny_bert):
    objective = build(tiny_bert, aug1="none", aug2="none").train()
    features = objective.encoder.tokenize(BATCH, 64)

    def view(objective):
        return mean_last_layer(augmented_hidden_states(objective.encoder, features, "none", 0.0), features)

    torch.testing.assert_close(view(objective), view(objective))
    kept = build(tiny_bert, aug1="none", aug2="none", remove_bert_dropout=False).train()
    assert not torch.allclose(view(kept), view(kept))


@pytest.mark.parametrize(
    "knob, value",
    [("aug1", "shuffle"),  # control: the defaults on both sides
     ("aug1", "token_cutoff"), ("aug1", "dropout"), ("aug1", "span_cutoff"), ("aug2", "shuffle"), ("aug2", "none"),
     ("temperature", 0.5), ("feature_cutoff_rate", 0.5), ("remove_bert_dropout", False)],
)
def test_each_knob_changes_the_loss(tiny_bert, knob, value):
    assert_knob_changes_the_loss(lambda **o: loss_of(build(tiny_bert, **o).train()), knob, value, default_of(knob))


@pytest.mark.parametrize("knob, aug, value", [
    ("token_cutoff_rate", "token_cutoff", 0.15),  # control: the default rate on both sides
    ("token_cutoff_rate", "token_cutoff", 0.6), ("dropout_rate", "dropout", 0.6),
    ("span_cutoff_rate", "span_cutoff", 0.6),
])
def test_each_rate_changes_its_augmentation(tiny_bert, knob, aug, value):
    assert_knob_changes_the_loss(lambda **o: loss_of(build(tiny_bert, aug1=aug, **o)), knob, value, default_of(knob))


def test_consert_trial_runs_through_the_shared_loop(tiny_bert, use_tiny_sts):
    final = run_trial({"method": "consert", "model": tiny_bert, "max_steps": 3, "batch_size": 8, "train_limit": 40,
                       "learning_rate": 1e-3, "eval_every": 3})
    assert final["steps"] == 3 and "test_avg_spearman" in final
    config = get_method("consert").resolve({})
    assert ((config["batch_size"], config["learning_rate"], config["optimizer"], config["pooling"])
            == (96, 5e-7, "adamw", "last2avg"))
    assert ((config["weight_decay"], config["max_grad_norm"], config["adam_epsilon"], config["adam_bias_correction"])
            == (0.01, 1.0, 1e-6, False))  # the authors' main.py and fit()
    assert config["selection_pooling"] == "mean"  # their dev evaluator pools as they train; last2avg tests
    assert (config["epochs"], config["patience"], config["supervision"]) == (10, 10, "none")


# Supervised settings (Section 3.3), on a fake labelled NLI batch: the hub is not reachable here.


@pytest.fixture
def fake_nli(monkeypatch):
    calls = []

    def load(pair_set):
        calls.append(pair_set)
        return list(NLI)

    monkeypatch.setattr(nli, "load_nli_pairs", load)
    return calls


def test_joint_loss_is_ce_plus_alpha_times_both_sides_nt_xent(tiny_bert):
    objective = build(tiny_bert, supervision="joint", joint_weight=0.3).train()
    assert isinstance(objective, NLIObjective)
    value = loss_of(objective, NLI)

    # The same computation, written out: plain views feed L_ce, augmented views (drawn in the
    # same order from the same seed) pair with them in NT-Xent, one loss per side.
    torch.manual_seed(0)
    encoder, classifier = objective.encoder, objective.classifier
    sides = [encoder.tokenize([pair[i] for pair in NLI], 64) for i in (0, 1)]
    plain = [masked_mean(encoder.hidden_states(f)[-1], f["attention_mask"]) for f in sides]
    augmented = [
        masked_mean(augmented_hidden_states(encoder, f, "token_cutoff", 0.15)[-1], f["attention_mask"]) for f in sides
    ]
    labels = torch.tensor([pair[2] for pair in NLI])
    ce = slow_nli_classification_loss(plain[0], plain[1], labels, classifier.weight, classifier.bias)
    expected = ce + 0.3 * (slow_nt_xent(plain[0], augmented[0], 0.1) + slow_nt_xent(plain[1], augmented[1], 0.1))
    assert value == pytest.approx(expected.item(), rel=1e-5)
    supervised = build(tiny_bert, supervision="sup")
    supervised.classifier.load_state_dict(classifier.state_dict())
    assert supervised.loss(NLI).item() == pytest.approx(ce.item(), rel=1e-5)  # sup is L_ce alone
    squared = build(tiny_bert, supervision="sup", nli_max_square=True)  # the authors' sup-sbert script's feature
    assert squared.classifier.in_features == 4 * classifier.in_features // 3
    torch.manual_seed(0)
    expected = slow_nli_classification_loss(plain[0], plain[1], labels, squared.classifier.weight,
                                            squared.classifier.bias, max_square=True)
    assert squared.loss(NLI).item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("knob, value", [("joint_weight", 0.15),  # control: the defaults on both sides
                                         ("joint_weight", 1.0), ("nli_augmentation", "shuffle"),
                                         ("nli_augmentation", "adversarial"), ("temperature", 0.5)])
def test_each_joint_knob_changes_the_loss(tiny_bert, knob, value):
    def loss(**overrides):
        return loss_of(build(tiny_bert, supervision="joint", **overrides).train(), NLI)

    assert_knob_changes_the_loss(loss, knob, value, default_of(knob))


def test_fgv_view_moves_uphill_on_ce(tiny_bert):
    objective = build(tiny_bert, supervision="joint", nli_augmentation="adversarial", adversarial_norm=0.05).train()
    sides = [objective.encoder.tokenize([pair[i] for pair in NLI], 64) for i in (0, 1)]
    states = [objective.encoder.hidden_states(f) for f in sides]
    plain = [masked_mean(s[-1], f["attention_mask"]) for s, f in zip(states, sides)]
    labels = torch.tensor([pair[2] for pair in NLI])
    weight, bias = objective.classifier.weight, objective.classifier.bias
    ce = nli_classification_loss(plain[0], plain[1], labels, weight, bias)
    adversarial = objective._augmented_views(sides, states, ce)
    assert nli_classification_loss(adversarial[0], adversarial[1], labels, weight, bias).item() > ce.item()
    assert all(p.grad is None for p in objective.parameters())  # FGV's gradient did not touch the parameters
    objective.adversarial_norm = 0.0
    for view, reference in zip(objective._augmented_views(sides, states, ce), plain):
        torch.testing.assert_close(view, reference)


def expected_fgv_joint_loss(tiny_bert, classifier, norm, joint_weight=0.15, tau=0.1):
    """L_joint with FGV views written out from Section 3.2, independently of the objective: BERT without
    dropout; r = mean of the last layer's token vectors; L_ce of the plain pairs (``classifier``'s W, b);
    for each side, the gradient g of L_ce with respect to the embedding layer's output, each token's
    perturbation ``norm`` * g / ||g||_2 added to that output by a forward hook, and NT-Xent between the
    plain and the perturbed views; in float64 from the pooled vectors on."""
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)

    def mean_pooled(states, mask):
        mask = mask.unsqueeze(-1).to(states.dtype)
        return ((states * mask).sum(1) / mask.sum(1)).double()

    sides = [tokenizer([pair[i] for pair in NLI], padding=True, truncation=True, max_length=64, return_tensors="pt")
             for i in (0, 1)]
    outputs = [model(**features, output_hidden_states=True).hidden_states for features in sides]
    plain = [mean_pooled(states[-1], features["attention_mask"]) for states, features in zip(outputs, sides)]
    labels = torch.tensor([pair[2] for pair in NLI])
    weight, bias = classifier.weight.detach().double(), classifier.bias.detach().double()
    ce = slow_nli_classification_loss(plain[0], plain[1], labels, weight, bias)
    gradients = torch.autograd.grad(ce, [states[0] for states in outputs])
    total = ce
    for features, gradient, reference in zip(sides, gradients, plain):
        length = gradient.norm(dim=-1, keepdim=True)
        noise = (norm * torch.where(length > 0, gradient / length.clamp_min(1e-30), 0.0)).detach()
        handle = model.embeddings.register_forward_hook(lambda module, inputs, output: output + noise)
        try:
            perturbed = mean_pooled(model(**features, output_hidden_states=True).hidden_states[-1],
                                    features["attention_mask"])
        finally:
            handle.remove()
        total = total + joint_weight * slow_nt_xent(reference, perturbed, tau)
    return total.item()


@pytest.mark.parametrize("norm", [1.0, 5.0, 0.2])  # 1.0: control, the default on both sides
def test_fgv_norm_gives_the_loss_of_its_value(tiny_bert, norm):
    """The joint loss with FGV views equals the reference's for the norm asked for, and a norm other than
    the default gives another reference loss: an ignored ``adversarial_norm`` fails here."""
    objective = build(tiny_bert, supervision="joint", nli_augmentation="adversarial", adversarial_norm=norm).train()
    expected = expected_fgv_joint_loss(tiny_bert, objective.classifier, norm)
    assert loss_of(objective, NLI) == pytest.approx(expected, rel=1e-5)
    if norm != default_of("adversarial_norm"):
        assert expected != pytest.approx(expected_fgv_joint_loss(tiny_bert, objective.classifier, 1.0), rel=1e-3)


def test_supervised_settings_need_the_hub_and_never_substitute(tiny_bert, monkeypatch):
    method = get_method("consert")
    for supervision in ("sup", "joint", "sup-unsup", "joint-unsup"):
        problems = method.environment_problems(config_of(tiny_bert, supervision=supervision))
        assert any(p.key == "supervision" and "needs labelled NLI" in p.message and "hub" in p.message
                   and "no other data is substituted" in p.message for p in problems)
    assert method.environment_problems(config_of(tiny_bert)) == []
    missing_corpus = config_of(tiny_bert, train_corpus="nope.txt")
    assert any(p.key == "train_corpus" for p in method.environment_problems(missing_corpus))
    with pytest.raises(SpecError, match="needs labelled NLI"):
        load_spec(SPECS / "consert_supervised.yaml")
    monkeypatch.setattr(nli, "hub_reachable", lambda: True)
    assert method.environment_problems(config_of(tiny_bert, supervision="joint")) == []


def test_sup_and_joint_train_on_nli_pairs_only(tiny_bert, use_tiny_sts, fake_nli):
    (joint,) = consert.stages(config_of(tiny_bert, supervision="joint"))
    assert joint.examples(config_of(tiny_bert)) == NLI
    two_stage = consert.stages(config_of(tiny_bert, supervision="joint-unsup"))
    assert [stage.examples(config_of(tiny_bert))[0] == NLI[0] for stage in two_stage] == [True, False]
    final = run_trial({"method": "consert", "model": tiny_bert, "supervision": "joint", "max_steps": 2, "batch_size": 3,
                       "learning_rate": 1e-3, "eval_every": 2, "nli_augmentation": "adversarial"})
    assert final["steps"] == 2 and math.isfinite(final["test_avg_spearman"])


def flat(encoder):
    return torch.cat([p.detach().flatten() for p in encoder.parameters()])


def trained_first_stage(tiny_bert, **overrides):
    """Run the NLI stage of a two-stage setting on a fresh encoder; return the next stage and the weights."""
    config = config_of(tiny_bert, max_steps=2, batch_size=3, eval_every=1, **overrides)
    first, second = consert.stages(config)
    stage_config = {**config, **first.overrides}
    encoder = SentenceEncoder.from_pretrained(tiny_bert)
    evaluator = STSEvaluator(load_sts("local", evaluation_names()))
    torch.manual_seed(0)
    train(first.build(stage_config, encoder), first.examples(stage_config), stage_config, evaluator, TrialSession())
    return second, second.build(config, encoder), flat(encoder)


def test_two_stage_settings_train_on_nli_first_at_their_own_learning_rate(tiny_bert, use_tiny_sts, fake_nli):
    untouched = flat(SentenceEncoder.from_pretrained(tiny_bert))
    _, _, frozen_stage = trained_first_stage(tiny_bert, supervision="sup-unsup", nli_learning_rate=0.0)
    second, objective, sup = trained_first_stage(tiny_bert, supervision="sup-unsup", nli_learning_rate=1e-2)
    _, _, joint = trained_first_stage(tiny_bert, supervision="joint-unsup", nli_learning_rate=1e-2)
    assert fake_nli == ["all_nli"] * 3 and isinstance(objective, ConSERTObjective)  # the second is unsupervised
    assert second.overrides == {} and second.examples(config_of(tiny_bert))[0] != NLI[0]
    torch.testing.assert_close(frozen_stage, untouched)
    assert not torch.allclose(sup, untouched) and not torch.allclose(joint, sup)


def test_two_stage_trial_reports_both_stages_on_one_step_axis(tiny_bert, use_tiny_sts, fake_nli):
    reports = []
    final = run_trial({"method": "consert", "model": tiny_bert, "supervision": "sup-unsup", "max_steps": 2,
                       "batch_size": 3, "eval_every": 1, "train_limit": 8, "nli_learning_rate": 1e-2,
                       "learning_rate": 1e-3}, reports.append)
    progress = reports[:-1]
    assert [(r["stage"], r["step"]) for r in progress] == [(0, 1), (0, 2), (1, 3), (1, 4)]
    assert final["steps"] == 4 and final["best_step"] in (3, 4)  # selection of the transfer stage


# Figure 6's supervised curve (Section 5.3): only the unlabelled texts of the transfer are limited.


def test_transfer_limit_limits_the_unlabelled_texts_and_leaves_the_nli_pairs_whole(tiny_bert, use_tiny_sts, fake_nli):
    from trainers.training.steps import load_examples

    def examples(**overrides):
        config = config_of(tiny_bert, supervision="joint-unsup", **overrides)
        return [load_examples(stage, {**config, **stage.overrides}) for stage in consert.stages(config)]

    nli, texts = examples()
    assert nli == NLI and len(texts) > 10
    assert examples(transfer_limit=10) == [NLI, texts[:10]]
    # train_limit cuts every stage, the NLI pairs too: it cannot draw the paper's curve, transfer_limit can.
    assert examples(train_limit=2) == [NLI[:2], texts[:2]]
    assert examples(train_limit=2, transfer_limit=10) == [NLI[:2], texts[:2]]  # the smaller limit
    assert examples(train_limit=20, transfer_limit=10) == [NLI[:20], texts[:10]]
    # The loop trains on them: 6 NLI pairs and 6 texts at batch 3 are 2 + 2 steps.
    reports = []
    final = run_trial({"method": "consert", "model": tiny_bert, "supervision": "joint-unsup", "transfer_limit": 6,
                       "batch_size": 3, "epochs": 1, "eval_every": 1, "nli_learning_rate": 1e-2,
                       "learning_rate": 1e-3}, reports.append)
    assert [(r["stage"], r["step"]) for r in reports[:-1]] == [(0, 1), (0, 2), (1, 3), (1, 4)] and final["steps"] == 4


def test_transfer_limit_is_refused_without_a_transfer_after_nli(tiny_bert, monkeypatch):
    monkeypatch.setattr(nli, "hub_reachable", lambda: True)
    method = get_method("consert")
    for supervision in consert.TWO_STAGES:
        assert method.environment_problems(config_of(tiny_bert, supervision=supervision, transfer_limit=10)) == []
    (unsupervised,) = method.environment_problems(config_of(tiny_bert, transfer_limit=10))
    assert unsupervised.key == "transfer_limit" and "with 'none' use train_limit" in unsupervised.message
    (nli_only,) = method.environment_problems(config_of(tiny_bert, supervision="sup", transfer_limit=10))
    assert "with 'sup' there is no transfer stage" in nli_only.message


def test_few_shot_supervised_spec_is_refused_offline_and_the_unsupervised_curve_plans():
    with pytest.raises(SpecError) as refused:
        load_spec(SPECS / "consert_few_shot_supervised.yaml")
    (problem,) = refused.value.problems
    assert "supervision: 'joint-unsup' needs labelled NLI" in problem and "hub" in problem
    unsupervised = load_spec(SPECS / "consert_few_shot.yaml")
    assert [t.config["train_limit"] for t in unsupervised.trials] == [1, 10, 100, 1000, 10000, 0]
    # The supervised curve is Table 3's joint-unsup row with its transfer limited.
    supervised = load_spec(SPECS / "consert_few_shot_supervised.yaml", check_environment=False)
    table3 = load_spec(SPECS / "consert_supervised.yaml", check_environment=False)
    (row,) = [t.config for t in table3.trials if t.point.row == "ConSERT-base joint-unsup"]
    assert [t.config["transfer_limit"] for t in supervised.trials] == [1, 10, 100, 1000, 10000, 0]
    # ... its texts drawn at random and repeated (knobs without effect where nothing is limited)
    assert all({**t.config, "transfer_limit": 0, "train_subset": "first", "train_subset_repeat": False} == row
               for t in supervised.trials)
    assert {(t.config["train_subset"], t.config["train_subset_repeat"])
            for t in (*supervised.trials, *unsupervised.trials)} == {("random", True)}


@pytest.mark.parametrize("pair_set, snli_unlabelled, expected", [
    ("all_nli", 0, 3), ("all_nli_snli_eval", 0, 3 + 2 * 4), ("all_nli_snli_eval", 1, 3 + 2 * 3)])
def test_the_nli_pair_sets_read_all_nli_and_snlis_labelled_eval_pairs(pair_set, snli_unlabelled, expected,
                                                                      monkeypatch, recwarn):
    """'all_nli': all-nli's train split; 'all_nli_snli_eval' (BERT-flow's allnli): then SNLI's validation and test
    pairs, those without a gold label (-1) left out. A set of another size than the plans count by is warned of
    (these fakes are all smaller)."""
    import datasets

    class Split(dict):  # a datasets.Dataset as load_nli_pairs reads it: columns, and a length
        def __len__(self) -> int:
            return len(self["label"])

    def load_dataset(name, *args, split):
        if name == nli.NLI_DATASET:
            assert args == ("pair-class",) and split == "train"
            return Split(premise=["p0", "p1", "p2"], hypothesis=["h0", "h1", "h2"], label=[0, 1, 2])
        assert name == nli.SNLI_DATASET and not args and split in ("validation", "test")
        labels = [-1] * snli_unlabelled + [2, 1, 0, 0][snli_unlabelled:]
        return Split(premise=[f"{split} p{i}" for i in range(4)], hypothesis=[f"{split} h{i}" for i in range(4)],
                     label=labels)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    pairs = nli.load_nli_pairs(pair_set)
    assert len(pairs) == expected and pairs[:3] == [("p0", "h0", 0), ("p1", "h1", 1), ("p2", "h2", 2)]
    assert all(label != -1 for _, _, label in pairs)
    if pair_set == "all_nli_snli_eval":
        assert pairs[3][0] == f"validation p{snli_unlabelled}" and pairs[-1] == ("test p3", "test h3", 0)
    warned = [str(w.message) for w in recwarn if "were expected" in str(w.message)]
    assert warned == [f"nli_pairs {pair_set!r} has {expected} pairs on the hub where "
                      f"{nli.NLI_PAIR_SETS[pair_set]:,} were expected: `sweep plan` counted the NLI stages' steps "
                      "by the latter"]
    assert get_method("flow").resolve({})["nli_pairs"] == "all_nli_snli_eval"  # the BERT-flow authors'
    assert get_method("consert").resolve({})["nli_pairs"] == "all_nli"  # the ConSERT authors' AllNLI


@pytest.mark.parametrize("method, overrides, pair_set", [
    ("flow", {"nli_supervision": True}, "all_nli_snli_eval"),
    ("flow", {"nli_supervision": True, "nli_pairs": "all_nli"}, "all_nli"),
    ("consert", {"supervision": "sup-unsup"}, "all_nli"),
    ("consert", {"supervision": "sup", "nli_pairs": "all_nli_snli_eval"}, "all_nli_snli_eval")])
def test_an_nli_stage_reads_the_pair_set_its_nli_pairs_names(method, overrides, pair_set, fake_nli):
    declared = get_method(method)
    config = declared.resolve(overrides)
    stage = declared.stages(config)[0]
    assert stage.examples({**config, **stage.overrides}) == NLI and fake_nli == [pair_set]
