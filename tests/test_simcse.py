"""Unsupervised SimCSE (Gao et al. 2021) on the tiny BERT: the loss against a slow reference written
from the paper, each knob's effect, dropout as the only augmentation, and the paper's defaults."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from transformers import AutoModel, AutoTokenizer

from tests.conftest import bert_initialised_head, build_objective
from tests.test_consert import slow_info_nce
from trainers.objectives.simcse import SimCSEObjective
from trainers.registry import get_method
from trainers.training.loop import run_trial

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]
HEAD_SEED = 0
"""The MLP head is initialised right after this seed, in the objective and in the reference."""


def build(tiny_bert: str, **overrides: Any) -> SimCSEObjective:
    return build_objective("simcse", tiny_bert, HEAD_SEED, **overrides)


def objective_loss(objective: SimCSEObjective, seed: int = 0) -> Tensor:
    """The training loss, dropout on, after ``seed`` (which fixes the dropout masks)."""
    objective.train()
    torch.manual_seed(seed)
    return objective.loss(BATCH)


def expected_simcse_loss(tiny_bert: str, seed: int = 0, **overrides: Any) -> float:
    """Eq. (1) of the paper written out: each sentence passes the BERT twice in one batch (training mode,
    so two dropout masks drawn after ``seed``); h = the [CLS] vector of the last layer, through a dense
    layer with tanh when ``mlp_during_training`` (drawn after ``HEAD_SEED`` as BERT's layers are); in-batch InfoNCE at
    temperature tau, in float64."""
    knobs = get_method("simcse").resolve({"model": tiny_bert, **overrides})
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).train(), AutoTokenizer.from_pretrained(tiny_bert)
    features = tokenizer(BATCH * 2, padding=True, truncation=True, max_length=knobs["max_seq_length"],
                         return_tensors="pt")
    head: nn.Module = nn.Identity()
    if knobs["mlp_during_training"]:
        torch.manual_seed(HEAD_SEED)
        width = model.config.hidden_size
        head = bert_initialised_head(width, model.config.initializer_range)
    torch.manual_seed(seed)
    with torch.no_grad():
        vectors = head(model(**features).last_hidden_state[:, 0]).double()
    first, second = vectors[: len(BATCH)], vectors[len(BATCH):]
    return float(slow_info_nce(first, second, knobs["temperature"]))


@pytest.mark.parametrize("knob, value", [
    ("temperature", 0.05),  # control: the defaults on both sides
    ("temperature", 0.5), ("temperature", 0.01), ("mlp_during_training", False),
])
def test_each_knob_gives_the_loss_of_its_value(tiny_bert, knob, value):
    """The objective's loss equals the reference's for the knob's value, and that value's reference differs
    from the default's: a knob the objective ignored would fail here."""
    expected = expected_simcse_loss(tiny_bert, **{knob: value})
    assert objective_loss(build(tiny_bert, **{knob: value})).item() == pytest.approx(expected, rel=1e-5)
    if value != get_method("simcse").all_knobs[knob].default:
        assert expected != pytest.approx(expected_simcse_loss(tiny_bert), rel=1e-3)


def test_dropout_is_the_augmentation(tiny_bert):
    """In training the two copies of a sentence get different dropout masks; with dropout off they are the
    same vector, and the loss is InfoNCE of identical views."""
    objective = build(tiny_bert)
    features = objective.encoder.tokenize(BATCH * 2, 32)
    objective.train()
    first, second = objective.head(objective.encoder(features)).chunk(2)
    assert not torch.allclose(first, second)
    objective.eval()
    with torch.no_grad():
        first, second = objective.head(objective.encoder(features)).chunk(2)
        torch.testing.assert_close(first, second)
        expected = slow_info_nce(first.double(), first.double(), 0.05)
        assert objective.loss(BATCH).item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_head_trains_and_is_no_part_of_the_encoder(tiny_bert):
    """Gradients reach the encoder and the MLP head; the encoder a trial keeps (and evaluates) has no head."""
    objective = build(tiny_bert)
    objective_loss(objective).backward()
    assert all(p.grad is not None for p in objective.head.parameters())
    assert any(p.grad is not None for p in objective.encoder.parameters())
    assert not any(name.startswith("head") for name in objective.encoder.state_dict())
    assert any(name.startswith("head.") for name in objective.trained_state())  # a checkpoint keeps it


def test_simcse_trial_runs_through_the_shared_loop_with_the_papers_defaults(tiny_bert, use_tiny_sts):
    reports: list[dict] = []
    final = run_trial({"method": "simcse", "model": tiny_bert, "max_steps": 4, "batch_size": 8, "train_limit": 40,
                       "eval_every": 2}, reports.append)
    assert [r["step"] for r in reports[:-1]] == [2, 4] and final["steps"] == 4 and "test_avg_spearman" in final
    config = get_method("simcse").resolve({})
    assert (config["temperature"], config["batch_size"], config["learning_rate"], config["max_seq_length"],
            config["pooling"], config["mlp_during_training"]) == (0.05, 64, 3e-5, 32, "cls", True)


BT_ROWS = [(s, f"{s[:-1]}, said again.", f"Again: {s}") for s in BATCH]


def write_bt_file(folder) -> str:
    path = folder / "bt.tsv"
    path.write_text("sentence\tbt1\tbt2\n" + "".join("\t".join(row) + "\n" for row in BT_ROWS), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("positive, column", [("bt1", 1), ("bt2", 2)])
def test_a_back_translated_positive_is_the_files_column(tiny_bert, tmp_path, positive, column):
    """SG-BERT's Contrastive (BT): InfoNCE of each sentence against its back-translation (one batch, so
    two dropout masks as for SimCSE), with the reference written out like expected_simcse_loss."""
    objective = build(tiny_bert, positive=positive, bt_file=write_bt_file(tmp_path))
    objective.train()
    torch.manual_seed(0)
    loss = objective.loss(BT_ROWS).item()
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).train(), AutoTokenizer.from_pretrained(tiny_bert)
    texts = [row[0] for row in BT_ROWS] + [row[column] for row in BT_ROWS]
    features = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    torch.manual_seed(HEAD_SEED)
    head = bert_initialised_head(32, model.config.initializer_range)
    torch.manual_seed(0)
    with torch.no_grad():
        vectors = head(model(**features).last_hidden_state[:, 0]).double()
    assert loss == pytest.approx(float(slow_info_nce(vectors[:4], vectors[4:], 0.05)), rel=1e-5)
    torch.manual_seed(0)
    assert loss != pytest.approx(objective_loss(build(tiny_bert)).item(), rel=1e-3)  # not the dropout positive


def test_a_back_translated_positive_trains_on_the_files_rows(tiny_bert, tmp_path, use_tiny_sts):
    from trainers.methods.simcse import simcse_examples

    bt_file = write_bt_file(tmp_path)
    config = get_method("simcse").resolve({"model": tiny_bert, "positive": "bt1", "bt_file": bt_file})
    assert list(simcse_examples(config)) == BT_ROWS
    final = run_trial({"method": "simcse", "model": tiny_bert, "positive": "bt1", "bt_file": bt_file,
                       "max_steps": 2, "batch_size": 2, "eval_every": 2})
    assert final["steps"] == 2


@pytest.mark.parametrize("overrides, problem", [
    ({"positive": "bt1"}, "bt_file: positive 'bt1' needs a TSV (sentence, bt1, bt2)"),
    ({"positive": "bt2", "bt_file": "/no/such.tsv"}, "bt_file: positive 'bt2' needs a TSV"),
    ({"bt_file": "some.tsv"}, "bt_file: 'some.tsv' does not exist (it would be ignored: positive is 'dropout'"),
])
def test_a_back_translated_positive_is_validated(overrides, problem):
    method = get_method("simcse")
    assert any(str(p).startswith(problem) for p in method.check(method.resolve(overrides)))


def test_a_file_nothing_reads_is_accepted_and_ignored(tmp_path):
    """A table's --set bt_file reaches its SimCSE row too (SCT Table 2): dropout's positive ignores it."""
    method = get_method("simcse")
    config = method.resolve({"bt_file": write_bt_file(tmp_path)})
    assert method.check(config) == [] and not method.reads_bt_file(config)


def test_the_head_is_initialised_as_berts_layers_and_from_torchs_generator(tiny_bert):
    """The authors build SimCSE's MLP inside the Hugging Face model, whose init_weights draws its weights from
    N(0, initializer_range^2) and zeroes its biases; the draw follows the seed."""
    dense = build(tiny_bert).head[0]
    assert torch.count_nonzero(dense.bias) == 0
    assert float(dense.weight.detach().std()) == pytest.approx(0.02, rel=0.15)  # 32 x 32 draws of N(0, 0.02^2)
    assert torch.equal(build(tiny_bert).head[0].weight, dense.weight)
    assert not torch.equal(build_objective("simcse", tiny_bert, HEAD_SEED + 1).head[0].weight, dense.weight)
