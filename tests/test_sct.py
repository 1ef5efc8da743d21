import pytest
import torch
import torch.nn.functional as F

from trainers.data import DataError
from trainers.encoder import SentenceEncoder
from trainers.loop import run_trial
from trainers.losses.sct import kl_to_reference, queue_contrastive_loss, sct_loss
from trainers.methods.sct import SCTObjective, read_backtranslations, sct_problems
from trainers.queues import InstanceQueue
from trainers.registry import get_method

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


def slow_sct(z1, z2, r1, r2, d1, d2, tau, tau_ref):
    """Eq. (1)-(2) with explicit sums: 1/2 KL(c2_ref || c1) + 1/2 KL(c1_ref || c2), mean over the batch."""

    def sr(z, queue, t):
        scores = [torch.exp(torch.dot(z, d) / t) for d in queue]
        total = sum(scores)
        return [s / total for s in scores]

    def kl(p, q):
        return sum(pi * (torch.log(pi) - torch.log(qi)) for pi, qi in zip(p, q))

    total = 0
    for i in range(len(z1)):
        c1, c2 = sr(z1[i], d2, tau), sr(z2[i], d1, tau)
        c1_ref, c2_ref = [p.detach() for p in sr(r1[i], d1, tau_ref)], [p.detach() for p in sr(r2[i], d2, tau_ref)]
        total = total + 0.5 * kl(c2_ref, c1) + 0.5 * kl(c1_ref, c2)
    return total / len(z1)


def test_sct_loss_and_gradient_match_the_equations():
    torch.manual_seed(0)
    z1, z2 = unit(3, 4).requires_grad_(), unit(3, 4).requires_grad_()
    r1, r2 = unit(3, 4).requires_grad_(), unit(3, 4).requires_grad_()
    d1, d2 = unit(6, 4), unit(6, 4)
    fast = sct_loss((z1, z2), (r1, r2), (d1, d2), 0.3, 0.2)
    slow = slow_sct(z1, z2, r1, r2, d1, d2, 0.3, 0.2)
    torch.testing.assert_close(fast, slow)
    fast_grads = torch.autograd.grad(fast, (z1, z2))
    slow_grads = torch.autograd.grad(slow, (z1, z2))
    for a, b in zip(fast_grads, slow_grads):
        torch.testing.assert_close(a, b)
    # Stop-gradient: nothing flows into the reference vectors.
    assert torch.autograd.grad(sct_loss((z1, z2), (r1, r2), (d1, d2), 0.3, 0.2), (r1, r2), allow_unused=True) == (None, None)


def test_kl_direction_is_reference_to_online():
    p = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    q = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    expected = sum(a * (torch.log(torch.tensor(a)) - torch.log(torch.tensor(b))) for a, b in zip([0.7, 0.2, 0.1], [0.2, 0.5, 0.3]))
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


def test_contrastive_ablation_by_hand():
    torch.manual_seed(2)
    z1, z2, r1, r2, d1, d2 = unit(2, 3), unit(2, 3), unit(2, 3), unit(2, 3), unit(4, 3), unit(4, 3)

    def side(z, positive, queue):
        values = []
        for i in range(len(z)):
            pos = torch.exp(torch.dot(z[i], positive[i]) / 0.1)
            values.append(-torch.log(pos / (pos + sum(torch.exp(torch.dot(z[i], d) / 0.1) for d in queue))))
        return sum(values) / len(values)

    expected = 0.5 * side(z1, r2, d2) + 0.5 * side(z2, r1, d1)
    torch.testing.assert_close(queue_contrastive_loss((z1, z2), (r1, r2), (d1, d2), 0.1), expected)


def build(tiny_bert, **overrides):
    config = get_method("sct").resolve({"model": tiny_bert, "queue_size": 16, "projector_expansion": 2, **overrides})
    return SCTObjective(config, SentenceEncoder.from_pretrained(tiny_bert))


def loss_of(objective, seed=0):
    torch.manual_seed(seed)
    objective.train()
    return objective.loss(BATCH)


def test_no_gradient_reaches_the_reference_and_queues_fill_after_the_step(tiny_bert):
    objective = build(tiny_bert)
    before = objective.queue_list[0].vectors.clone()
    loss_of(objective).backward()
    assert all(p.grad is None for p in objective.reference.parameters())
    assert any(p.grad is not None for p in objective.encoder.parameters())
    torch.testing.assert_close(objective.queue_list[0].vectors, before)  # read before the step...
    objective.after_step()
    assert int(objective.queue_list[0].pointer) == len(BATCH)  # ...written after it
    torch.testing.assert_close(objective.queue_list[0].vectors[: len(BATCH)], objective.queue_list[0].oldest_first()[-len(BATCH):])


def test_online_and_reference_passes_share_a_view_transformation(tiny_bert):
    """At the start f_theta == f_ref, so without a projector the online and reference
    vectors of a view coincide only if both passes got the same random augmentation."""
    objective = build(tiny_bert, projector=False, view1="token_cutoff", view2="feature_cutoff")
    objective.encoder.eval()
    features = objective.encoder.tokenize(BATCH, 64)
    online = objective._encode(objective.encoder, features, "token_cutoff", seed=5)
    reference = objective._encode(objective.reference, features, "token_cutoff", seed=5)
    torch.testing.assert_close(online, reference)
    assert not torch.allclose(online, objective._encode(objective.reference, features, "token_cutoff", seed=6))


@pytest.mark.parametrize(
    "knob, value",
    [("objective", "ce"), ("objective", "contrastive"), ("cross_view", False), ("queues", "one"),
     ("queues", "in_batch"), ("projector", False), ("projector_expansion", 3), ("tau_theta", 0.3),
     ("tau_ref", 0.3), ("queue_size", 8), ("view1", "token_cutoff"), ("view2", "dropout_mask"), ("student_layers", 1)],
)
def test_each_knob_changes_the_loss(tiny_bert, knob, value):
    reference = float(loss_of(build(tiny_bert)))
    assert float(loss_of(build(tiny_bert, **{knob: value}))) != pytest.approx(reference, rel=1e-6)


@pytest.mark.parametrize("knob, value", [("queue_update", False), ("reference", "momentum")])
def test_knobs_acting_after_the_step_change_the_next_loss(tiny_bert, knob, value):
    def second_loss(**overrides):
        objective = build(tiny_bert, momentum=0.0, **overrides)
        optimizer = torch.optim.SGD([p for p in objective.parameters() if p.requires_grad], lr=0.5)
        loss_of(objective).backward()
        optimizer.step()
        objective.after_step()
        return float(loss_of(objective, seed=1))

    assert second_loss(**{knob: value}) != pytest.approx(second_loss(), rel=1e-6)


def test_student_keeps_the_first_layers(tiny_bert):
    objective = build(tiny_bert, student_layers=1)
    assert len(objective.encoder.model.encoder.layer) == 1 and len(objective.reference.model.encoder.layer) == 1
    with pytest.raises(ValueError, match="student_layers=5: the model has 2 layers"):
        build(tiny_bert, student_layers=5)


def test_back_translation_rows_need_their_file(tmp_path):
    config = get_method("sct").resolve({"view1": "bt1", "view2": "bt2"})
    assert any("a back-translation view needs bt_file" in p for p in sct_problems(config))
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
    assert objective._texts(rows, "bt1") == ["A cat was sitting."] and objective._texts(rows, "bt2") == ["The cat sat down."]


def test_sct_trial_runs_through_the_shared_loop(tiny_bert, use_tiny_sts):
    final = run_trial({"method": "sct", "model": tiny_bert, "max_steps": 3, "batch_size": 8, "train_limit": 40,
                       "eval_every": 3, "queue_size": 32})
    assert final["steps"] == 3 and "test_avg_spearman" in final


def test_backtranslation_file_round_trips_through_the_reader(tmp_path):
    from trainers.backtranslate import back_translations, write_file

    calls = []

    def fake_translate(sentences, source, target):
        calls.append((source, target))
        return [f"{s}|{target}" for s in sentences]

    rows = back_translations(["A cat sat.", "Dogs run."], ["de", "fr"], fake_translate)
    assert calls == [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")]
    path = write_file(rows, tmp_path / "bt.tsv")
    assert read_backtranslations(path) == [("A cat sat.", "A cat sat.|de|en", "A cat sat.|fr|en"),
                                           ("Dogs run.", "Dogs run.|de|en", "Dogs run.|fr|en")]
