import pytest
import torch

from trainers.encoder import SentenceEncoder
from trainers.loop import run_trial
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]


def build(tiny_bert, **overrides):
    config = get_method("sg").resolve({"model": tiny_bert, "projection_hidden": 64, **overrides})
    return SelfGuidedObjective(config, SentenceEncoder.from_pretrained(tiny_bert))


def loss_of(objective, seed=0):
    torch.manual_seed(seed)
    objective.train()
    return objective.loss(BATCH)


def take_step(objective, lr=1e-2):
    optimizer = torch.optim.SGD([p for p in objective.parameters() if p.requires_grad], lr=lr)
    loss_of(objective).backward()
    optimizer.step()
    optimizer.zero_grad()


def test_no_gradient_reaches_bert_f(tiny_bert):
    objective = build(tiny_bert)
    loss_of(objective).backward()
    assert all(p.grad is None and not p.requires_grad for p in objective.fixed.parameters())
    assert any(p.grad is not None for p in objective.encoder.model.encoder.parameters())


def test_layer_zero_of_bert_t_is_frozen_and_the_rest_moves(tiny_bert):
    objective = build(tiny_bert)
    embeddings = {k: v.clone() for k, v in objective.encoder.model.embeddings.state_dict().items()}
    first_block = next(objective.encoder.model.encoder.parameters()).clone()
    take_step(objective)
    for name, value in objective.encoder.model.embeddings.state_dict().items():
        torch.testing.assert_close(value, embeddings[name])
    assert not torch.equal(next(objective.encoder.model.encoder.parameters()), first_block)


def test_bert_f_never_uses_dropout(tiny_bert):
    objective = build(tiny_bert)
    objective.train()
    assert not objective.fixed.training and objective.encoder.training
    torch.testing.assert_close(objective.compute_views(BATCH), objective.compute_views(BATCH))


def test_regulariser_adds_lambda_times_the_distance(tiny_bert):
    objective = build(tiny_bert, reg_lambda=0.0)
    take_step(objective)
    distance = sum(
        ((p.detach() - q) ** 2).sum().item() for p, q in zip(objective.encoder.model.parameters(), objective.fixed.parameters())
    )
    assert distance > 0
    without = loss_of(objective, seed=3).item()
    objective.reg_lambda = 2.0
    with_reg = loss_of(objective, seed=3).item()
    assert with_reg - without == pytest.approx(2.0 * distance, rel=1e-4)


def test_views_use_the_chosen_pooling_and_layers(tiny_bert):
    objective = build(tiny_bert)
    features = objective.encoder.tokenize(BATCH, 128)
    with torch.no_grad():
        states = objective.fixed(**features, output_hidden_states=True).hidden_states
    mask = features["attention_mask"]
    views = objective.compute_views(BATCH)
    assert views.shape == (4, 3, 32)  # layers 0..2 of the 2-layer tiny BERT
    length = int(mask[1].sum())
    torch.testing.assert_close(views[1, 2], states[2][1, :length].max(0).values)
    mean_views = build(tiny_bert, view_pooling="mean").compute_views(BATCH)
    torch.testing.assert_close(mean_views[1, 0], states[0][1, :length].mean(0))
    assert build(tiny_bert, skip_first_layers=2).compute_views(BATCH).shape == (4, 1, 32)
    with pytest.raises(ValueError, match="skip_first_layers=3 leaves no view"):
        build(tiny_bert, skip_first_layers=3)


@pytest.mark.parametrize(
    "knob, value",
    [("loss", "sg"), ("loss", "opt1"), ("loss", "opt2"), ("temperature", 0.5), ("view_pooling", "mean"),
     ("projection_head", False), ("projection_hidden", 16), ("skip_first_layers", 1)],
)
def test_each_knob_changes_the_loss(tiny_bert, knob, value):
    reference = loss_of(build(tiny_bert)).item()
    torch.manual_seed(0)  # same initial head weights where the head exists
    changed = loss_of(build(tiny_bert, **{knob: value})).item()
    assert changed != pytest.approx(reference, rel=1e-6)


def test_shared_views_equal_fresh_views_and_are_reused(tiny_bert, monkeypatch):
    objective = build(tiny_bert)
    first = objective.views(BATCH)
    torch.testing.assert_close(first, objective.compute_views(BATCH), atol=1e-5, rtol=1e-4)
    monkeypatch.setattr(objective, "compute_views", lambda s: pytest.fail("views were recomputed"))
    torch.testing.assert_close(objective.views(BATCH[::-1]), first.flip(0))
    assert build(tiny_bert, share_frozen_outputs=False).shared is None


def test_short_sg_opt_trial_runs_through_the_shared_loop(tiny_bert, use_tiny_sts):
    reports = []
    final = run_trial(
        {"method": "sg", "model": tiny_bert, "projection_hidden": 64, "max_steps": 4, "eval_every": 2, "train_limit": 80},
        reports.append,
    )
    assert [r["step"] for r in reports[:-1]] == [2, 4] and final["steps"] == 4
    assert "test_avg_spearman" in final
