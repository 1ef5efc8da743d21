import pytest
import torch
import torch.nn.functional as F

from tests.conftest import build_objective
from tests.knob_checks import assert_knob_changes_the_loss
from trainers.data.sources import DataError, read_backtranslations
from trainers.knobs import Problem
from trainers.losses.distillation import cd_loss, ckd_loss, congen_loss, mse_loss
from trainers.losses.sct import (
    hard_cross_entropy,
    in_batch_contrastive_loss,
    kl_to_reference,
    queue_contrastive_loss,
    sct_loss,
    similarity_log_distribution,
    soft_cross_entropy,
)
from trainers.methods.sct import sct_problems
from trainers.models.queues import InstanceQueue
from trainers.registry import get_method
from trainers.training.loop import run_trial
from trainers.views.text import MaskedLMRewriter, replace_one_synonym

BATCH = ["A man plays a guitar on a stage tonight.", "Two dogs run in a field.", "The market fell.", "She cooks."]


def test_queue_is_fifo_and_wraps_around():
    queue = InstanceQueue(5, 2)
    assert torch.allclose(queue.vectors.norm(dim=1), torch.ones(5))  # random unit vectors at the start
    batches = [torch.full((2, 2), float(i)) for i in range(1, 5)]  # 8 vectors through a queue of 5
    for batch in batches:
        queue.enqueue(batch)
    assert queue.oldest_first()[:, 0].tolist() == [2.0, 3.0, 3.0, 4.0, 4.0]
    assert int(queue.pointer) == 3


def test_queue_larger_than_the_corpus_and_batch_larger_than_the_queue():
    queue = InstanceQueue(10, 1)
    start = queue.vectors.clone()
    queue.enqueue(torch.tensor([[7.0], [8.0], [9.0]]))
    assert queue.vectors[:3, 0].tolist() == [7.0, 8.0, 9.0]
    torch.testing.assert_close(queue.vectors[3:], start[3:])  # the random negatives stay until overwritten
    small = InstanceQueue(2, 1)
    small.enqueue(torch.tensor([[1.0], [2.0], [3.0]]))
    assert small.oldest_first()[:, 0].tolist() == [2.0, 3.0]


def unit(*shape):
    return F.normalize(torch.randn(*shape, dtype=torch.float64), dim=-1)


def slow_kl(p, q):
    return sum(pi * (torch.log(pi) - torch.log(qi)) for pi, qi in zip(p, q))


def slow_soft_ce(p, q):
    return -sum(pi * torch.log(qi) for pi, qi in zip(p, q))


def slow_hard_ce(p, q):
    best = 0
    for j in range(len(p)):
        if p[j] > p[best]:
            best = j
    return -torch.log(q[best])


SLOW_DIVERGENCES = {"kl": slow_kl, "ce": slow_soft_ce, "ce_hard": slow_hard_ce}


def slow_sct(z1, z2, r1, r2, d1, d2, tau, tau_ref, divergence="kl"):
    """Eq. (1)-(2) with explicit sums: 1/2 D(c2_ref || c1) + 1/2 D(c1_ref || c2), mean over the batch;
    D = KL, the soft cross-entropy -sum_j p_j log q_j, or -log q at the reference's argmax."""

    def sr(z, queue, t):
        scores = [torch.exp(torch.dot(z, d) / t) for d in queue]
        total = sum(scores)
        return [s / total for s in scores]

    measure = SLOW_DIVERGENCES[divergence]
    total = 0
    for i in range(len(z1)):
        c1, c2 = sr(z1[i], d2, tau), sr(z2[i], d1, tau)
        c1_ref, c2_ref = [p.detach() for p in sr(r1[i], d1, tau_ref)], [p.detach() for p in sr(r2[i], d2, tau_ref)]
        total = total + 0.5 * measure(c2_ref, c1) + 0.5 * measure(c1_ref, c2)
    return total / len(z1)


@pytest.mark.parametrize("divergence", ["kl", "ce", "ce_hard"])
def test_sct_loss_and_gradient_match_the_equations(divergence):
    torch.manual_seed(0)
    z1, z2 = unit(3, 4).requires_grad_(), unit(3, 4).requires_grad_()
    r1, r2 = unit(3, 4).requires_grad_(), unit(3, 4).requires_grad_()
    d1, d2 = unit(6, 4), unit(6, 4)
    fast = sct_loss((z1, z2), (r1, r2), (d1, d2), 0.3, 0.2, divergence=divergence)
    slow = slow_sct(z1, z2, r1, r2, d1, d2, 0.3, 0.2, divergence=divergence)
    torch.testing.assert_close(fast, slow)
    fast_grads = torch.autograd.grad(fast, (z1, z2))
    slow_grads = torch.autograd.grad(slow, (z1, z2))
    for a, b in zip(fast_grads, slow_grads):
        torch.testing.assert_close(a, b)
    # Stop-gradient: nothing flows into the reference vectors.
    again = sct_loss((z1, z2), (r1, r2), (d1, d2), 0.3, 0.2, divergence=divergence)
    assert torch.autograd.grad(again, (r1, r2), allow_unused=True) == (None, None)


def test_soft_cross_entropy_has_the_gradient_of_kl():
    """Why 'ce' (the authors' soft CE) fits the paper's small "KL -> CE" drops: it is KL plus the
    reference's entropy, which has no gradient, so w.r.t. the online logits both give the same
    gradient and train alike; the hard CE gives another."""
    torch.manual_seed(3)
    logits = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    reference_log = F.log_softmax(torch.randn(3, 6, dtype=torch.float64), dim=1)
    online_log = F.log_softmax(logits, dim=1)
    kl, soft, hard = (f(reference_log, online_log) for f in (kl_to_reference, soft_cross_entropy, hard_cross_entropy))
    kl_grad, soft_grad, hard_grad = (torch.autograd.grad(v, logits, retain_graph=True)[0] for v in (kl, soft, hard))
    torch.testing.assert_close(soft_grad, kl_grad)
    assert not torch.allclose(hard_grad, kl_grad)
    entropy = -(reference_log.exp() * reference_log).sum(1).mean()
    torch.testing.assert_close(soft - kl, entropy)
    assert entropy > 0.1  # so the values differ while the gradients agree


def test_kl_direction_is_reference_to_online():
    p = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    q = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    expected = sum(a * (torch.log(torch.tensor(a)) - torch.log(torch.tensor(b)))
                   for a, b in zip([0.7, 0.2, 0.1], [0.2, 0.5, 0.3]))
    torch.testing.assert_close(kl_to_reference(p, q), expected)
    assert not torch.isclose(kl_to_reference(p, q), kl_to_reference(q, p))


def test_identical_view_compares_same_view_outputs():
    torch.manual_seed(1)
    z1, z2, r1, r2, d1, d2 = unit(3, 4), unit(3, 4), unit(3, 4), unit(3, 4), unit(5, 4), unit(5, 4)
    identical = sct_loss((z1, z2), (r1, r2), (d1, d2), 0.3, 0.2, cross_view=False)
    # Identical view equals the cross-view loss with each reference swapped for its own view's.
    torch.testing.assert_close(identical, sct_loss((z1, z2), (r2, r1), (d2, d1), 0.3, 0.2))
    assert not torch.isclose(identical, sct_loss((z1, z2), (r1, r2), (d1, d2), 0.3, 0.2))
    # If the online view matches its own reference exactly, identical-view is zero at equal temperatures.
    assert float(sct_loss((r1, r2), (r1, r2), (d1, d2), 0.2, 0.2, cross_view=False)) == pytest.approx(0.0, abs=1e-12)


def slow_info_nce(z, positive, queue, t):
    """-log(e^(z.p/t) / (e^(z.p/t) + sum over the queue of e^(z.d/t))), mean over the batch."""
    values = []
    for i in range(len(z)):
        pos = torch.exp(torch.dot(z[i], positive[i]) / t)
        values.append(-torch.log(pos / (pos + sum(torch.exp(torch.dot(z[i], d) / t) for d in queue))))
    return sum(values) / len(values)


def test_contrastive_ablation_by_hand():
    torch.manual_seed(2)
    z1, z2, r1, r2, d1, d2 = unit(2, 3), unit(2, 3), unit(2, 3), unit(2, 3), unit(4, 3), unit(4, 3)

    expected = 0.5 * slow_info_nce(z1, r2, d2, 0.1) + 0.5 * slow_info_nce(z2, r1, d1, 0.1)
    torch.testing.assert_close(queue_contrastive_loss((z1, z2), (r1, r2), (d1, d2), 0.1), expected)


def slow_in_batch_info_nce(z, positives, t):
    """-log(e^(z_i.p_i/t) / sum over the batch's positives j of e^(z_i.p_j/t)), mean over the batch: each
    positive once, its own in the denominator."""
    values = []
    for i in range(len(z)):
        scores = [torch.exp(torch.dot(z[i], p) / t) for p in positives]
        values.append(-torch.log(scores[i] / sum(scores)))
    return sum(values) / len(values)


def test_in_batch_contrastive_ablation_by_hand(tiny_bert):
    """queues 'in_batch' with objective 'contrastive' (Table 4's row, SimCSE-like): the batch's other references
    are the negatives, the positive counted once; the objective runs it, not the queue's InfoNCE."""
    torch.manual_seed(3)
    z1, z2, r1, r2 = unit(4, 3), unit(4, 3), unit(4, 3), unit(4, 3)
    expected = 0.5 * slow_in_batch_info_nce(z1, r2, 0.1) + 0.5 * slow_in_batch_info_nce(z2, r1, 0.1)
    torch.testing.assert_close(in_batch_contrastive_loss((z1, z2), (r1, r2), 0.1), expected)
    # Not the queue's InfoNCE over the batch, which would count each positive twice.
    assert not torch.isclose(queue_contrastive_loss((z1, z2), (r1, r2), (r1, r2), 0.1), expected)
    objective = build(tiny_bert, objective="contrastive", queues="in_batch")
    online, reference = (unit(4, 32), unit(4, 32)), (unit(4, 32), unit(4, 32))
    torch.testing.assert_close(objective._self_supervised_loss(online, reference),
                               in_batch_contrastive_loss(online, reference, objective.config["tau_theta"]))


TEST_DEFAULTS = {"queue_size": 16, "projector_expansion": 2}
"""What these tests change from the method's defaults (small queues and projector)."""


def build(tiny_bert, **overrides):
    return build_objective("sct", tiny_bert, 0, **{**TEST_DEFAULTS, **overrides})  # seed 0: the projector's


def default_of(knob, **settings):
    """The knob's value when a test does not set it: its own ``settings``, then these tests', then the method's."""
    return {**TEST_DEFAULTS, **settings}.get(knob, get_method("sct").all_knobs[knob].default)


def loss_of(objective, seed=0):
    torch.manual_seed(seed)
    objective.train()
    return objective.loss(BATCH)


@pytest.mark.parametrize("reference", ["frozen", "momentum"])
def test_no_gradient_reaches_the_reference_and_queues_fill_after_the_step(tiny_bert, reference):
    objective = build(tiny_bert, reference=reference)
    before = objective.queue_list[0].vectors.clone()
    loss_of(objective).backward()
    assert all(p.grad is None for p in objective.reference.parameters())
    assert any(p.grad is not None for p in objective.encoder.parameters())
    torch.testing.assert_close(objective.queue_list[0].vectors, before)  # read before the step...
    objective.after_update()
    assert int(objective.queue_list[0].pointer) == len(BATCH)  # ...written after it
    torch.testing.assert_close(objective.queue_list[0].vectors[: len(BATCH)],
                               objective.queue_list[0].oldest_first()[-len(BATCH):])


def test_online_and_reference_passes_share_a_view_transformation(tiny_bert):
    """At the start f_theta == f_ref, so without a projector the online and reference
    vectors of a view coincide only if both passes got the same random augmentation: the view's one draw."""
    objective = build(tiny_bert, projector=False, view1="token_cutoff", view2="feature_cutoff", reference="frozen")
    objective.encoder.eval()
    torch.manual_seed(5)
    first, second, _ = objective.inputs(BATCH)
    online = objective.pooled(objective.encoder, first, "token_cutoff")
    torch.testing.assert_close(online, objective.pooled(objective.reference, first, "token_cutoff"))
    assert first.drawn.any() and second.drawn.any()  # a view whose draw erased nothing would prove nothing
    redrawn = objective.inputs(BATCH)[0]
    assert not torch.equal(redrawn.drawn, first.drawn)
    assert not torch.allclose(online, objective.pooled(objective.reference, redrawn, "token_cutoff"))


@pytest.mark.parametrize(
    "knob, value",
    [("objective", "kl"),  # control: the defaults on both sides
     ("objective", "ce"), ("objective", "ce_hard"), ("objective", "contrastive"), ("cross_view", False),
     ("queues", "one"),
     ("queues", "in_batch"), ("projector", False), ("projector_expansion", 3), ("tau_theta", 0.3),
     ("tau_ref", 0.3), ("queue_size", 8), ("view1", "token_cutoff"), ("view2", "dropout_mask"), ("model_layers", 1),
     ("reference", "frozen"), ("feature_cutoff_rate", 0.5)],
)
def test_each_knob_changes_the_loss(tiny_bert, knob, value):
    assert_knob_changes_the_loss(lambda **o: loss_of(build(tiny_bert, **o)).item(), knob, value, default_of(knob))


def test_the_objective_knob_reaches_the_divergence(tiny_bert):
    """objective='ce' trains with the soft cross-entropy: its loss is 'kl''s plus the entropy of the
    two reference distributions (from the objective's own reference vectors and candidates) and its
    gradient on every trained weight is 'kl''s; 'ce_hard' moves the gradient. A warm tau_ref keeps the
    reference distributions far from one-hot (at 0.02 each puts almost all its mass on the view's own
    vector, which enters the candidates, and the soft and hard CE values nearly coincide)."""
    def run(objective_name):
        objective = build(tiny_bert, objective=objective_name, tau_ref=0.5)
        loss = loss_of(objective)
        weights = [p for p in objective.parameters() if p.requires_grad]
        return objective, loss, torch.autograd.grad(loss, weights, allow_unused=True)

    objective, kl, kl_grads = run("kl")
    (r1, r2), _ = objective._pending
    c1, c2 = objective.candidates((r1, r2))
    tau = objective.config["tau_ref"]
    entropies = [-(log.exp() * log).sum(1).mean() for log in (similarity_log_distribution(r2, c2, tau),
                                                               similarity_log_distribution(r1, c1, tau))]
    assert min(entropies) > 1.0
    _, ce, ce_grads = run("ce")
    torch.testing.assert_close(ce, kl + 0.5 * (entropies[0] + entropies[1]))
    for a, b in zip(ce_grads, kl_grads):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)
    _, _, hard_grads = run("ce_hard")
    assert any(a is not None and not torch.allclose(a, b) for a, b in zip(hard_grads, kl_grads))


@pytest.mark.parametrize("knob, view, value", [
    ("token_cutoff_rate", "token_cutoff", 0.15),  # control: the default rate on both sides
    ("token_cutoff_rate", "token_cutoff", 0.6), ("dropout_rate", "dropout", 0.6),
    ("span_cutoff_rate", "span_cutoff", 0.6),
])
def test_each_rate_changes_its_view(tiny_bert, knob, view, value):
    """SCT's embedding-level views take their rates from the same knobs as ConSERT's (feature_cutoff_rate is
    in the test above): a rate the view ignored would leave the loss unchanged."""
    assert_knob_changes_the_loss(lambda **o: loss_of(build(tiny_bert, view1=view, **o)).item(), knob, value,
                                 default_of(knob))


@pytest.mark.parametrize("knob, value", [("queue_update", True),  # control: the defaults on both sides
                                         ("queue_update", False), ("reference", "momentum")])
def test_knobs_acting_after_the_step_change_the_next_loss(tiny_bert, knob, value):
    def second_loss(**overrides):
        objective = build(tiny_bert, momentum=0.0, **overrides)
        optimizer = torch.optim.SGD([p for p in objective.parameters() if p.requires_grad], lr=0.5)
        loss_of(objective).backward()
        optimizer.step()
        objective.after_update()
        return loss_of(objective, seed=1).item()

    assert_knob_changes_the_loss(second_loss, knob, value, default_of(knob))


@pytest.mark.parametrize("momentum", [0.999, 0.5])  # 0.999: the default, the control
def test_the_momentum_reference_moves_by_its_momentum(tiny_bert, momentum):
    """After a step, each weight of the momentum reference is m x its old value + (1 - m) x the online
    encoder's new one (SCT Section 3's moving average), computed here from the weights themselves."""
    objective = build(tiny_bert, reference="momentum", momentum=momentum)
    optimizer = torch.optim.SGD([p for p in objective.parameters() if p.requires_grad], lr=0.5)
    before = {name: p.detach().clone() for name, p in objective.reference.named_parameters()}
    loss_of(objective).backward()
    optimizer.step()
    objective.after_update()
    online = dict(objective.encoder.named_parameters())
    assert any(not torch.equal(online[name], before[name]) for name in before)  # the step moved the encoder
    for name, weight in objective.reference.named_parameters():
        torch.testing.assert_close(weight, momentum * before[name] + (1 - momentum) * online[name].detach())


def test_student_and_its_reference_keep_the_first_layers(tiny_bert):
    objective = build(tiny_bert, model_layers=1, reference="frozen")
    assert len(objective.encoder.model.encoder.layer) == 1 and len(objective.reference.model.encoder.layer) == 1


def test_back_translation_rows_need_their_file(tmp_path):
    config = get_method("sct").resolve({"view1": "bt1", "view2": "bt2"})
    assert any("a back-translation view needs bt_file" in p.message for p in sct_problems(config))
    path = tmp_path / "bt.tsv"
    path.write_text("sentence\tbt1\tbt2\nA cat sat.\tA cat was sitting.\tThe cat sat down.\n", encoding="utf-8")
    assert sct_problems({**config, "bt_file": str(path)}) == []
    assert read_backtranslations(path) == [("A cat sat.", "A cat was sitting.", "The cat sat down.")]
    (tmp_path / "bad.tsv").write_text("sentence\tbt1\nx\ty\n", encoding="utf-8")
    with pytest.raises(DataError, match="bad.tsv:1: expected the header"):
        read_backtranslations(tmp_path / "bad.tsv")


def test_back_translation_views_read_their_columns(tiny_bert, tmp_path):
    path = tmp_path / "bt.tsv"
    path.write_text("sentence\tbt1\tbt2\nA cat sat.\tA cat was sitting.\tThe cat sat down.\n", encoding="utf-8")
    objective = build(tiny_bert, view1="bt1", view2="bt2", bt_file=str(path))
    rows = read_backtranslations(path)
    assert (objective._texts(rows, "bt1", 0) == ["A cat was sitting."]
            and objective._texts(rows, "bt2", 1) == ["The cat sat down."])


def test_back_translation_views_train_on_the_rows_of_bt_file(tmp_path):
    """The training examples of a back-translation setting are the rows of the ``bt_file`` given, and
    those of another setting the corpus sentences (the control: no file is read)."""
    path = tmp_path / "bt.tsv"
    path.write_text("sentence\tbt1\tbt2\nA cat sat.\tA cat was sitting.\tThe cat sat down.\n"
                    "Dogs run.\tDogs are running.\tThe dogs run.\n", encoding="utf-8")
    method = get_method("sct")
    config = method.resolve({"view1": "bt1", "view2": "bt2", "bt_file": str(path)})
    (stage,) = method.stages(config)
    assert list(stage.examples(config)) == [("A cat sat.", "A cat was sitting.", "The cat sat down."),
                                            ("Dogs run.", "Dogs are running.", "The dogs run.")]
    corpus = method.resolve({"train_corpus": str(path)})  # no back-translation view: the file's lines
    assert list(stage.examples(corpus))[0] == "sentence\tbt1\tbt2"


def test_sct_trial_runs_through_the_shared_loop(tiny_bert, use_tiny_sts):
    final = run_trial({"method": "sct", "model": tiny_bert, "max_steps": 3, "batch_size": 8, "train_limit": 40,
                       "eval_every": 3, "queue_size": 32})
    assert final["steps"] == 3 and "test_avg_spearman" in final


def test_backtranslation_file_round_trips_through_the_reader(tmp_path):
    from trainers.data.backtranslate import back_translations, write_file

    calls = []

    def fake_translate(sentences, source, target):
        calls.append((source, target))
        return [f"{s}|{target}" for s in sentences]

    rows = back_translations(["A cat sat.", "Dogs run."], ["de", "fr"], fake_translate)
    assert calls == [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")]
    path = write_file(rows, tmp_path / "bt.tsv")
    assert read_backtranslations(path) == [("A cat sat.", "A cat sat.|de|en", "A cat sat.|fr|en"),
                                           ("Dogs run.", "Dogs run.|de|en", "Dogs run.|fr|en")]


@pytest.mark.parametrize("reference", ["online", "online_same_pass"])
def test_the_online_reference_encodes_each_view_again_or_takes_the_online_pass(tiny_bert, reference):
    """f_ref = f_theta: 'online' encodes each view a second time without gradient, after its online pass, with a
    dropout mask of its own (Section 3.1, the authors' code); 'online_same_pass' takes the online pass's vectors
    under stop-gradient. Replaying the same draws, the reference is the second pass of each view, resp. the first."""
    objective = build(tiny_bert, reference=reference)
    assert objective.reference is None
    torch.manual_seed(3)
    inputs = objective.inputs(BATCH)
    torch.manual_seed(4)  # the dropout of the loss's own passes
    objective.train()
    objective.device_loss(inputs).backward()
    (first, second), _ = objective._pending
    assert not first.requires_grad and not second.requires_grad
    torch.manual_seed(4)  # the same passes again, on the same draws
    for vectors, view, augmentation in zip((first, second), inputs[:2], objective.augmentations):
        with torch.no_grad():
            passes = [objective.pooled(objective.encoder, view, augmentation)
                      for _ in range(2 if reference == "online" else 1)]
        torch.testing.assert_close(vectors, F.normalize(passes[-1], dim=1))
        assert (reference == "online") == (not torch.allclose(passes[0], passes[-1]))  # another dropout mask


# ---------------------------------------------------------------- distillation


def slow_kl(p, q):
    return sum(pi * (torch.log(pi) - torch.log(qi)) for pi, qi in zip(p, q))


def slow_softmax(z, candidates, t):
    scores = [torch.exp(torch.dot(z, c) / t) for c in candidates]
    return [s / sum(scores) for s in scores]


def test_cd_loss_is_eq_4_with_the_teacher_as_reference():
    torch.manual_seed(4)
    z1, z2 = unit(3, 4).requires_grad_(), unit(3, 4).requires_grad_()
    t1, t2, d1, d2 = unit(3, 4), unit(3, 4), unit(5, 4), unit(5, 4)
    fast = cd_loss((z1, z2), (t1, t2), (d1, d2), 0.05, 0.04)
    slow = slow_sct(z1, z2, t1, t2, d1, d2, 0.05, 0.04)
    torch.testing.assert_close(fast, slow)
    for a, b in zip(torch.autograd.grad(fast, (z1, z2)), torch.autograd.grad(slow, (z1, z2))):
        torch.testing.assert_close(a, b)


def test_congen_loss_by_hand():
    torch.manual_seed(5)
    z_con, z_gen = unit(2, 3).requires_grad_(), unit(2, 3).requires_grad_()
    teacher, queue = unit(2, 3), unit(4, 3)
    candidates = list(queue) + list(teacher)  # the queue extended by the batch's teacher vectors
    expected = 0
    for i in range(2):
        target = [p.detach() for p in slow_softmax(teacher[i], candidates, 0.04)]
        expected = expected + 0.5 * slow_kl(target, slow_softmax(z_con[i], candidates, 0.05))
        expected = expected + 0.5 * slow_kl(target, slow_softmax(z_gen[i], candidates, 0.05))
    fast = congen_loss((z_con, z_gen), teacher, queue, 0.05, 0.04)
    torch.testing.assert_close(fast, expected / 2)
    for a, b in zip(torch.autograd.grad(fast, (z_con, z_gen)), torch.autograd.grad(expected / 2, (z_con, z_gen))):
        torch.testing.assert_close(a, b)


def test_ckd_and_mse_losses_by_hand():
    torch.manual_seed(6)
    z1, z2, t1, t2, d1, d2 = unit(2, 3), unit(2, 3), unit(2, 3), unit(2, 3), unit(4, 3), unit(4, 3)
    # same view: the teacher's vector is the positive
    expected = 0.5 * slow_info_nce(z1, t1, d1, 0.1) + 0.5 * slow_info_nce(z2, t2, d2, 0.1)
    torch.testing.assert_close(ckd_loss((z1, z2), (t1, t2), (d1, d2), 0.1), expected)
    squared = (((z1 - t1) ** 2).mean() + ((z2 - t2) ** 2).mean()) / 2
    torch.testing.assert_close(mse_loss((z1, z2), (t1, t2)), squared)


@pytest.mark.parametrize("kind", ["cd", "mse", "congen", "ckd"])
def test_distillation_adds_its_loss_to_l_sct_and_never_trains_the_teacher(tiny_bert, tiny_teacher, kind):
    """With the map inside the distillation loss (distillation_map 'loss'), L_SCT reads the student's pooled
    vectors as without a teacher: the total is L_SCT plus the distillation loss alone."""
    distilled = build(tiny_bert, distillation=kind, teacher=tiny_teacher, distillation_map="loss")
    alone = build(tiny_bert, distillation=kind, teacher=tiny_teacher, self_supervised=False,
                  distillation_map="loss")
    plain = build(tiny_bert)
    alone.teacher.to_teacher.load_state_dict(distilled.teacher.to_teacher.state_dict())
    def loss(objective):
        objective.eval()  # no dropout, and the same views' seeds: the three objectives see the same vectors
        torch.manual_seed(0)
        return objective.loss(BATCH)

    total = loss(distilled)
    torch.testing.assert_close(total, loss(plain) + loss(alone))
    total.backward()
    assert all(p.grad is None for p in distilled.teacher.encoder.parameters())
    assert any(p.grad is not None for p in distilled.teacher.to_teacher.parameters())  # 32 -> 48 map is trained
    before = distilled.teacher.queue_list[1].vectors.clone()
    distilled.after_update()
    assert int(distilled.teacher.queue_list[1].pointer) == len(BATCH)
    torch.testing.assert_close(distilled.teacher.queue_list[1].vectors[len(BATCH):], before[len(BATCH):])
    expected = distilled.teacher.compute_vectors(BATCH)  # embedding-layer views: the teacher reads the plain sentence
    torch.testing.assert_close(distilled.teacher.queue_list[1].vectors[: len(BATCH)], expected)


@pytest.mark.parametrize(
    "overrides, problem",
    [({"distillation": "cd"}, "teacher: distillation 'cd' needs a teacher model"),
     ({"teacher": "some/model"}, "teacher: given, but distillation is 'none'"),
     ({"self_supervised": False}, "self_supervised: off with distillation 'none' leaves no loss to train"),
     ({"distillation": "cd", "teacher": "/no/such/folder"}, "teacher: '/no/such/folder' is not a local folder, nor"),
     ({"view1": "mlm"}, "mlm_model: the mlm view needs mlm_model"),
     ({"mlm_model": "bert-base-uncased"}, "mlm_model: given, but neither view is mlm"),
     ({"rewrite_views": "per_step"}, "rewrite_views: 'per_step', but neither view rewrites the sentence")],
)
def test_distillation_and_rewrite_views_are_validated(overrides, problem, monkeypatch):
    monkeypatch.setattr("trainers.data.sources.hub_reachable", lambda: False)
    config = get_method("sct").resolve(overrides)
    assert any(str(p).startswith(problem) for p in sct_problems(config)), sct_problems(config)


def test_mlm_view_needs_a_masked_lm_head(tiny_bert, tiny_masked_lm):
    config = get_method("sct").resolve({"view1": "mlm", "mlm_model": tiny_bert})
    assert any(p.key == "mlm_model" and "has no masked-LM head (its architectures: ['BertModel'])" in p.message
               for p in sct_problems(config))
    assert sct_problems(get_method("sct").resolve({"view1": "mlm", "mlm_model": tiny_masked_lm})) == []


def test_mlm_rewriter_refills_fifteen_percent_with_other_tokens(tiny_masked_lm):
    rewriter = MaskedLMRewriter(tiny_masked_lm)
    sentences = ["a man is playing a large guitar on the stage tonight with his friends", "dogs run"]
    features = rewriter.tokenizer(sentences, padding=True, return_tensors="pt", return_special_tokens_mask=True)
    fixed = features.pop("special_tokens_mask").bool() | ~features["attention_mask"].bool()
    ids = features["input_ids"]
    rewritten, masked = rewriter.fill(ids, features["attention_mask"], fixed, torch.Generator().manual_seed(0))
    lengths = (~fixed).sum(1).tolist()
    assert masked.sum(1).tolist() == [max(1, int(n * 0.15)) for n in lengths]
    assert not (masked & fixed).any()
    assert (rewritten[masked] != ids[masked]).all() and (rewritten[~masked] == ids[~masked]).all()
    assert len(rewriter(sentences, torch.Generator().manual_seed(0))) == 2


def test_synonym_replacement_changes_exactly_one_word():
    synonyms = {"big": ["large", "huge"], "dog": ["hound"]}
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        out = replace_one_synonym("The big dog barks.", lambda w: synonyms.get(w, []), generator)
        changed = [(a, b) for a, b in zip("The big dog barks.".split(), out.split()) if a != b]
        assert len(changed) == 1 and changed[0][1] in synonyms[changed[0][0]]
    assert replace_one_synonym("No match here.", lambda w: [], generator) == "No match here."


def test_synonym_view_without_wordnet_fails_validation(monkeypatch):
    monkeypatch.setattr("trainers.methods.sct.wordnet_problem", lambda: "needs WordNet data for nltk")
    config = get_method("sct").resolve({"view1": "synonym", "view2": "synonym"})
    assert Problem("view1/view2", "the synonym view needs WordNet data for nltk") in sct_problems(config)


def test_the_students_map_is_its_last_module_as_the_authors_build_it(tiny_bert, tiny_teacher):
    """distillation_map 'encoder' (SCT_main_distillation.py's [Transformer, Pooling, Dense(32 -> 48, tanh)]): the
    student's sentence vectors are the map of its mean-pooled ones, L_SCT's head and queues are the teacher's
    width, the distillation loss maps nothing more, and the map is trained."""
    from trainers.models.student_map import StudentMap
    from trainers.objectives.nli import mean_last_layer

    objective = build(tiny_bert, distillation="cd", teacher=tiny_teacher, view1="none", view2="dropout")
    encoder = objective.encoder
    assert isinstance(encoder.after_pooling, StudentMap) and isinstance(objective.teacher.to_teacher, torch.nn.Identity)
    assert encoder.output_width == 48 and objective.queue_list[0].vectors.shape[1] == 48
    objective.eval()
    tokens = encoder.tokenize(BATCH, 32)
    pooled = mean_last_layer(encoder.hidden_states(tokens), tokens)
    expected = torch.tanh(pooled @ encoder.after_pooling.linear.weight.T + encoder.after_pooling.linear.bias)
    first, _, _ = objective.inputs(BATCH)
    torch.testing.assert_close(objective.pooled(encoder, first, "none"), expected)
    torch.testing.assert_close(encoder.encode(BATCH, max_length=32), expected)
    objective.train()
    loss_of(objective).backward()
    assert encoder.after_pooling.linear.weight.grad is not None
    again = build(tiny_bert, distillation="cd", teacher=tiny_teacher, view1="none", view2="dropout")
    assert torch.equal(again.encoder.after_pooling.linear.weight, encoder.after_pooling.linear.weight)  # seeded
    loss_side = build(tiny_bert, distillation="cd", teacher=tiny_teacher, distillation_map="loss")
    assert loss_side.encoder.after_pooling is None and loss_side.encoder.output_width == 32


def test_distillation_trial_runs_through_the_shared_loop(tiny_bert, tiny_teacher, use_tiny_sts):
    final = run_trial({"method": "sct", "model": tiny_bert, "max_steps": 2, "batch_size": 8, "train_limit": 40,
                       "eval_every": 2, "queue_size": 32, "distillation": "cd", "teacher": tiny_teacher})
    assert final["steps"] == 2 and "test_avg_spearman" in final


@pytest.mark.parametrize("knob, value", [("distillation", "cd"),  # control: the defaults on both sides
                                         ("teacher_pooling", "cls"), ("distillation", "congen"),
                                         ("distillation", "mse"), ("distillation", "ckd"), ("tau_ref", 0.3),
                                         ("tau_theta", 0.3)])
def test_each_distillation_knob_changes_the_loss(tiny_bert, tiny_teacher, knob, value):
    settings = {"distillation": "cd", "teacher": tiny_teacher, "self_supervised": False}

    def loss(**overrides):
        return loss_of(build(tiny_bert, **{**settings, **overrides})).item()

    assert_knob_changes_the_loss(loss, knob, value, default_of(knob, **settings))


def test_mlm_views_feed_the_loss_and_the_masked_lm_is_never_trained(tiny_bert, tiny_masked_lm):
    objective = build(tiny_bert, view1="mlm", view2="mlm", mlm_model=tiny_masked_lm, rewrite_views="per_step")
    loss_of(objective).backward()
    assert not objective.mlm.training and all(p.grad is None for p in objective.mlm.parameters())
    first, second = (objective._texts(BATCH, "mlm", 0) for _ in range(2))
    assert first != BATCH and first != second  # two independent rewrites of each sentence


def test_views_rewritten_once_are_two_fixed_augmented_copies_of_the_corpus(tiny_bert, tiny_masked_lm):
    """rewrite_views 'once' (the default): prepare() rewrites every distinct sentence of the corpus for view 1,
    then for view 2, in the corpus's order, in batches of REWRITE_BATCH, from a generator of the seed; each step
    looks its sentences up, in any order, so that a sentence's views are the same in every epoch and in a resumed
    trial, and differ between the two views."""
    from trainers.objectives.sct import REWRITE_BATCH

    corpus = [f"{sentence} ({i})" for i in range(REWRITE_BATCH // len(BATCH) + 2) for sentence in BATCH]
    assert len(corpus) > REWRITE_BATCH
    objective = build(tiny_bert, view1="mlm", view2="mlm", mlm_model=tiny_masked_lm)
    with pytest.raises(RuntimeError, match="prepare"):
        objective._texts(BATCH, "mlm", 0)
    objective.prepare(corpus + corpus[:3])  # a repeated sentence is rewritten once
    rewriter, generator = MaskedLMRewriter(tiny_masked_lm), torch.Generator().manual_seed(objective.config["seed"])
    expected = [[text for start in (0, REWRITE_BATCH) for text in
                 rewriter(corpus[start : start + REWRITE_BATCH], generator, objective.config["max_seq_length"])]
                for _ in range(2)]
    batch = corpus[5:9]
    for position in (0, 1):
        assert objective._texts(batch, "mlm", position) == expected[position][5:9]
        assert objective._texts(batch[::-1], "mlm", position) == expected[position][5:9][::-1]
    assert objective._texts(batch, "mlm", 0) != objective._texts(batch, "mlm", 1) and expected[0] != corpus


@pytest.mark.parametrize("queues", ["two", "one", "in_batch"])
def test_distributions_range_over_the_queue_and_the_batch_entering_it(tiny_bert, queues):
    objective = build(tiny_bert, queues=queues)
    r1, r2 = unit(4, 32).float(), unit(4, 32).float()
    d1, d2 = objective.candidates((r1, r2))
    stored = [q.vectors for q in objective.queue_list]
    if queues == "two":
        torch.testing.assert_close(d1, torch.cat([stored[0], r1]))
        torch.testing.assert_close(d2, torch.cat([stored[1], r2]))
    elif queues == "one":
        torch.testing.assert_close(d1, torch.cat([stored[0], r1, r2]))
        assert d2 is d1
    else:
        assert d1 is r1 and d2 is r2
    # The objective's loss is Eq. 2 over exactly these candidates.
    objective.eval()
    torch.manual_seed(0)
    inputs = objective.inputs(BATCH)
    loss = objective.device_loss(inputs)
    (ref1, ref2), _ = objective._pending
    online = [F.normalize(objective.head(objective.pooled(objective.encoder, view, augmentation)), dim=1)
              for view, augmentation in zip(inputs[:2], objective.augmentations)]
    expected = sct_loss(tuple(online), (ref1, ref2), objective.candidates((ref1, ref2)), 0.03, 0.02)
    torch.testing.assert_close(loss, expected)


def test_a_distilled_students_export_ends_with_its_map_and_scores_as_logged(tiny_bert, tiny_teacher, use_tiny_sts,
                                                                            tmp_path):
    """The kept student (checkpoint) exported: sentence-transformers' Dense(32 -> 48, tanh) after its Pooling, as
    the SCT authors save theirs, gives the trial's vectors and its logged test score."""
    from sentence_transformers import SentenceTransformer

    from sweep.run.models import load_trial_encoder, save_sentence_transformer
    from tests.exported import assert_scores_as_logged
    from trainers.training.checkpoint import LocalSession

    trial = {"method": "sct", "model": tiny_bert, "max_steps": 2, "batch_size": 8, "train_limit": 40,
             "eval_every": 2, "queue_size": 32, "distillation": "cd", "teacher": tiny_teacher,
             "eval_precision": "fp32"}  # sentence-transformers encodes in fp32
    final = run_trial(trial, LocalSession(tmp_path / "checkpoints", keep=1))
    (checkpoint,) = (tmp_path / "checkpoints").glob("checkpoint_*")
    encoder, record = load_trial_encoder(checkpoint)
    assert encoder.output_width == 48
    save_sentence_transformer(encoder, tmp_path / "export", record.config["eval_max_length"])
    model = SentenceTransformer(str(tmp_path / "export"), device="cpu")
    assert type(model[-1]).__name__ == "Dense" and model.get_embedding_dimension() == 48
    assert_scores_as_logged(model, final, encoder)
