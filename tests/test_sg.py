from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from transformers import AutoModel, AutoTokenizer

from tests.conftest import build_objective
from tests.test_sg_losses import slow_base, slow_opt1, slow_opt2, slow_opt3
from trainers.objectives.sg import SelfGuidedObjective
from trainers.registry import get_method
from trainers.training import graphs
from trainers.training.loop import run_trial

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]
HEAD_SEED = 0
"""The projection head is initialised right after this seed, in the objective and in the reference."""
TEST_DEFAULTS = {"projection_hidden": 64}
"""What these tests change from the method's defaults (a 4096-wide head is slow for nothing here)."""


def build(tiny_bert, **overrides):
    return build_objective("sg", tiny_bert, HEAD_SEED, **{**TEST_DEFAULTS, **overrides})


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


def reference_training_steps(tiny_bert: str, seed: int, steps: int = 2) -> list[tuple[Tensor, float]]:
    """BERT_F's views and SG-OPT's loss at ``steps`` steps without an update, BERT_F's dropout on, written out
    independently of the objective: torch seeded with ``seed``, then at each step BERT_F (the pretrained model in
    train mode, no gradient) reads the batch padded to its longest sentence, then BERT_T (the same weights, in
    train mode) does, each drawing its own dropout from torch's generator in that order (galsang/SG-BERT
    loss.py's forward runs BERT_F first); views = each layer max-pooled over the sentence's tokens; the loss
    L_opt over f(c) and f(h) in float64 (L_reg = 0: no update yet)."""
    knobs = get_method("sg").resolve({"model": tiny_bert, **TEST_DEFAULTS})
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).train(), AutoTokenizer.from_pretrained(tiny_bert)
    features = tokenizer(BATCH, padding=True, truncation=True, max_length=knobs["max_seq_length"], return_tensors="pt")
    lengths = features["attention_mask"].sum(1).tolist()
    head = authors_head(model.config.hidden_size, knobs["projection_hidden"], model.config.initializer_range)
    torch.manual_seed(seed)
    found = []
    with torch.no_grad():
        for _ in range(steps):
            states = model(**features, output_hidden_states=True).hidden_states  # BERT_F
            h = torch.stack([torch.stack([layer[i, :length].max(0).values for layer in states])
                             for i, length in enumerate(lengths)])
            c = model(**features).last_hidden_state[:, 0]  # BERT_T
            found.append((h, float(slow_opt3(head(c).double(), head(h).double(), knobs["temperature"]))))
    return found


def test_with_bert_f_dropout_each_step_draws_bert_f_views_anew_in_train_mode(tiny_bert, tmp_path, monkeypatch):
    """bert_f_dropout true (the authors' runs): no table; at each step BERT_F, in train mode, reads the batch,
    its dropout drawn from torch's seeded generator before BERT_T's: the same views and losses as the reference,
    and the views of one sentence differ from step to step."""
    assert get_method("sg").all_knobs["bert_f_dropout"].default is True
    objective = build(tiny_bert, bert_f_dropout=True, frozen_outputs_dir=str(tmp_path))
    assert get_method("sg").frozen_table(get_method("sg").resolve({"bert_f_dropout": True})) is None  # plan sizes none
    objective.prepare(BATCH)
    assert objective.table is None and objective.statistics() == {} and list(tmp_path.iterdir()) == []
    seen: list[Tensor] = []
    compute = objective.compute_views
    monkeypatch.setattr(objective, "compute_views", lambda sentences: seen.append(compute(sentences)) or seen[-1])
    objective.train()
    assert objective.fixed.training and objective.encoder.training
    torch.manual_seed(7)
    losses = [objective.loss(BATCH).item() for _ in range(2)]
    assert len(seen) == 2 and not torch.allclose(seen[0][0], seen[1][0])  # the first sentence's views, per step
    for (h, loss), views, step_loss in zip(reference_training_steps(tiny_bert, seed=7), seen, losses):
        torch.testing.assert_close(views, h, atol=1e-6, rtol=1e-5)
        assert step_loss == pytest.approx(loss, rel=1e-5)
    objective.eval()  # evaluation: BERT_F without dropout too
    assert not objective.fixed.training
    torch.testing.assert_close(compute(BATCH), compute(BATCH))


def test_without_bert_f_dropout_the_steps_read_the_tables_views(tiny_bert, monkeypatch):
    """bert_f_dropout false: BERT_F stays in eval mode while BERT_T trains, and every step reads the rows of the
    table computed before training, never running BERT_F again: the same views at each step."""
    objective = build(tiny_bert, bert_f_dropout=False)
    objective.prepare(BATCH)
    rows = objective.table.table.lookup(BATCH)
    objective.train()
    assert not objective.fixed.training and objective.encoder.training
    monkeypatch.setattr(objective, "compute_views", lambda s: pytest.fail("BERT_F ran during a step"))
    torch.manual_seed(7)
    for _ in range(2):
        assert torch.equal(objective.inputs(BATCH)[1], rows)
        objective.loss(BATCH)


def test_regulariser_adds_lambda_times_the_distance(tiny_bert):
    objective = build(tiny_bert, reg_lambda=0.0)
    take_step(objective)
    distance = sum(
        ((p.detach() - q) ** 2).sum().item()
        for p, q in zip(objective.encoder.model.parameters(), objective.fixed.parameters())
    )
    assert distance > 0
    without = loss_of(objective, seed=3).item()
    # A lambda large enough that lambda x distance (one small step from BERT_F) stands well above float32's
    # rounding of the losses it is the difference of.
    objective.reg_lambda = 1e4
    with_reg = loss_of(objective, seed=3).item()
    assert with_reg - without == pytest.approx(1e4 * distance, rel=1e-4)


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


SLOW_LOSSES = {"sg": slow_base, "opt1": slow_opt1, "opt2": slow_opt2}


def authors_head(width: int, hidden: int, std: float) -> nn.Module:
    """f as galsang/SG-BERT loss.py builds it, drawn after ``HEAD_SEED``: Linear, GELU, Linear, GELU, each
    Linear's weight then drawn again from N(0, std^2), BERT's initializer_range."""
    torch.manual_seed(HEAD_SEED)
    head = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
    head[0].weight.data.normal_(mean=0.0, std=std)
    head[2].weight.data.normal_(mean=0.0, std=std)
    return head


def expected_sg_loss(tiny_bert: str, seed: int = 0, **overrides: Any) -> float:
    """SG's loss at initialisation written out from Section 3 with the paper's knobs, independently of the
    objective: BERT_T's last-layer [CLS] c_i against BERT_F's pooled layers h_{i,k} (BERT_F = BERT_T =
    the pretrained model, no dropout, so L_reg = 0), both through f (two Linear + GELU of width
    ``projection_hidden``, :func:`authors_head`) unless ``projection_head`` is off, and the chosen
    loss at temperature tau, in float64. Single-view losses draw one layer per sentence uniformly after
    ``seed``, as the objective does."""
    knobs = get_method("sg").resolve({"model": tiny_bert, **TEST_DEFAULTS, **overrides})
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)
    cls_vectors, views = [], []
    with torch.no_grad():
        for sentence in BATCH:  # one sentence at a time: no padding to mask
            ids = tokenizer([sentence], truncation=True, max_length=knobs["max_seq_length"], return_tensors="pt")
            states = model(**ids, output_hidden_states=True).hidden_states
            cls_vectors.append(states[-1][0, 0])
            pooled = [layer[0].max(0).values if knobs["view_pooling"] == "max" else layer[0].mean(0)
                      for layer in states[knobs["skip_first_layers"]:]]
            views.append(torch.stack(pooled))
    c, h = torch.stack(cls_vectors), torch.stack(views)  # [b, d], [b, views, d]
    if knobs["projection_head"]:
        head = authors_head(c.shape[1], knobs["projection_hidden"], model.config.initializer_range)
        with torch.no_grad():
            c, h = head(c), head(h)
    c, h = c.double(), h.double()
    if knobs["loss"] == "opt3":
        return float(slow_opt3(c, h, knobs["temperature"]))
    torch.manual_seed(seed)
    layer = torch.randint(h.shape[1], (len(BATCH),))
    return float(SLOW_LOSSES[knobs["loss"]](c, h[torch.arange(len(BATCH)), layer], knobs["temperature"]))


def objective_loss(objective: SelfGuidedObjective, seed: int = 0) -> Tensor:
    """The objective's loss without dropout (BERT_T and BERT_F in eval mode), after ``seed``."""
    objective.eval()
    torch.manual_seed(seed)
    return objective.loss(BATCH)


SG_KNOB_CASES = [
    ("loss", "opt3"),  # control: every knob at the default of these tests
    ("loss", "sg"), ("loss", "opt1"), ("loss", "opt2"), ("temperature", 0.5), ("view_pooling", "mean"),
    ("projection_head", False), ("projection_hidden", 16), ("skip_first_layers", 1),
]


@pytest.mark.parametrize("knob, value", SG_KNOB_CASES)
def test_each_knob_gives_the_loss_of_its_value(tiny_bert, knob, value):
    """The objective's loss equals the reference's for the knob's value, and that value's reference differs
    from the default's: a knob the objective ignored would fail here. The control case (a default value)
    shows both sides agree when nothing changes."""
    default = TEST_DEFAULTS.get(knob, get_method("sg").all_knobs[knob].default)
    expected = expected_sg_loss(tiny_bert, **{knob: value})
    assert objective_loss(build(tiny_bert, **{knob: value})).item() == pytest.approx(expected, rel=1e-5)
    if value != default:
        assert expected != pytest.approx(expected_sg_loss(tiny_bert), rel=1e-3)


def test_tabled_views_equal_fresh_views_and_are_reused(tiny_bert, monkeypatch):
    objective = build(tiny_bert, bert_f_dropout=False)
    objective.prepare(BATCH)  # the table pass before training
    first = objective.views(BATCH)
    torch.testing.assert_close(first, objective.compute_views(BATCH), atol=1e-5, rtol=1e-4)
    monkeypatch.setattr(objective, "compute_views", lambda s: pytest.fail("views were recomputed"))
    assert torch.equal(objective.views(BATCH[::-1]), first.flip(0))
    alone = build(tiny_bert, bert_f_dropout=False, share_frozen_outputs=False)
    alone.prepare(BATCH)  # the same table, computed in the trial
    assert not alone.table.share and torch.equal(alone.views(BATCH), first)


def test_short_sg_opt_trial_runs_through_the_shared_loop(tiny_bert, use_tiny_sts):
    reports = []
    final = run_trial(
        {"method": "sg", "model": tiny_bert, "projection_hidden": 64, "max_steps": 4, "eval_every": 2,
         "train_limit": 80},
        reports.append,
    )
    assert [r["step"] for r in reports[:-1]] == [2, 4] and final["steps"] == 4
    assert "test_avg_spearman" in final


@pytest.mark.parametrize("bert_f_dropout", [True, False])
def test_the_loop_runs_bert_f_in_the_knobs_mode_at_every_step_evaluations_between(tiny_bert, use_tiny_sts,
                                                                                   monkeypatch, bert_f_dropout):
    """Through run_trial, evaluating after every step: with bert_f_dropout BERT_F runs at each step in train mode
    (an evaluation leaves it so); without, it runs only for the table, before the first step, in eval mode."""
    calls: list[tuple[bool, int]] = []
    compute = SelfGuidedObjective.compute_views

    def recorded(self, sentences):
        calls.append((self.fixed.training, len(sentences)))
        return compute(self, sentences)

    monkeypatch.setattr(SelfGuidedObjective, "compute_views", recorded)
    final = run_trial({"method": "sg", "model": tiny_bert, "projection_hidden": 16, "max_steps": 3, "eval_every": 1,
                       "batch_size": 4, "train_limit": 40, "bert_f_dropout": bert_f_dropout,
                       "share_frozen_outputs": False})
    assert final["steps"] == 3
    if bert_f_dropout:
        assert calls == [(True, 4)] * 3 and "frozen_outputs_seconds" not in final
    else:
        assert calls and not any(training for training, _ in calls) and sum(n for _, n in calls) <= 40


def test_a_graphed_step_with_bert_f_dropout_replays_each_steps_own_views(tiny_bert):
    """cuda_graph with bert_f_dropout is accepted: BERT_F's pass runs before the recorded part and its views are
    copied into the recorded ones, so (on a CPU, what a replay runs) the graphed steps' losses are the eager
    steps'."""
    sg = get_method("sg")
    assert not sg.check(sg.resolve({"cuda_graph": True, "pad_to_max_length": True, "bert_f_dropout": True}))
    knobs = {"projection_hidden": 16, "max_seq_length": 16, "pad_to_max_length": True, "bert_f_dropout": True}
    losses = []
    for step_kind in (graphs.eager_step, graphs.GraphedStep):
        objective = build(tiny_bert, **knobs)
        optimizer = torch.optim.SGD([p for p in objective.parameters() if p.requires_grad], lr=1e-2)
        step = step_kind(objective, optimizer, 0.0, "fp32", torch.device("cpu"))
        objective.train()
        torch.manual_seed(3)
        losses.append([step(BATCH).item() for _ in range(graphs.WARMUP_STEPS + 3)])
    assert losses[0] == losses[1]
