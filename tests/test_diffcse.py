"""DiffCSE (Chuang et al. 2022) on the tiny BERT, the tiny masked LM as its generator: the RTD loss against a
slow version, the masking, the edits and the conditioning of the discriminator, each knob's effect, the
checks, resume and export."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests.conftest import build_objective, build_tiny_bert
from tests.knob_checks import assert_knob_changes_the_loss
from tests.test_checkpoint import BASE, assert_resumes_exactly
from tests.trial_export import assert_export_scores_as_logged
from trainers.losses.contrastive import info_nce
from trainers.losses.diffcse import rtd_loss
from trainers.objectives.diffcse import mask_for_generator
from trainers.registry import get_method

BATCH = ["A man plays a guitar.", "Two dogs run in a field.", "The stock market fell today.", "A woman is cooking."]


def slow_rtd_loss(logits, replaced, attention_mask) -> float:
    """The paper's sum over tokens of -log D (kept) or -log(1 - D) (replaced), D the softmax's 'kept' class,
    over the positions attention_mask marks, divided by their number."""
    total, count = 0.0, 0
    for i in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            if not attention_mask[i, t]:
                continue
            kept, swapped = (float(x) for x in logits[i, t])
            d = math.exp(kept) / (math.exp(kept) + math.exp(swapped))
            total -= math.log(1 - d) if replaced[i, t] else math.log(d)
            count += 1
    return total / count


def test_rtd_loss_matches_the_slow_version_and_ignores_padding():
    torch.manual_seed(0)
    logits, replaced = torch.randn(3, 6, 2), torch.rand(3, 6) < 0.3
    attention = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    real = attention.flatten().nonzero().squeeze(1)
    assert rtd_loss(logits, replaced, real).item() == pytest.approx(slow_rtd_loss(logits, replaced, attention),
                                                                     rel=1e-6)
    spoilt = logits.clone()
    spoilt[attention == 0] = 100.0  # what the discriminator says of padding counts for nothing
    assert rtd_loss(spoilt, replaced, real).item() == pytest.approx(rtd_loss(logits, replaced, real).item())


def test_rtd_loss_over_the_padded_batch_is_the_authors_mean_with_padding_labelled_kept():
    torch.manual_seed(0)
    logits, attention = torch.randn(3, 6, 2), torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    replaced = (torch.rand(3, 6) < 0.3) & attention.bool()
    everywhere = torch.ones_like(attention)
    assert rtd_loss(logits, replaced).item() == pytest.approx(slow_rtd_loss(logits, replaced, everywhere), rel=1e-6)
    real = attention.flatten().nonzero().squeeze(1)
    assert rtd_loss(logits, replaced).item() != pytest.approx(rtd_loss(logits, replaced, real).item(), rel=1e-3)


def test_rtd_loss_over_the_hosts_positions_is_the_boolean_index_bit_for_bit(tiny_bert):
    """The real tokens picked by the host's positions (no read back) give the loss and the gradient that the
    boolean index by the mask gives, bit for bit: the same elements in the same order."""
    import torch.nn.functional as F
    from transformers import AutoTokenizer

    from trainers.models.batches import TokenBatch

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert, padding_side="left")  # the host's mask, either side
    features = tokenizer(["a dog", "two cats sleep on the warm mat", "birds"], padding=True, return_tensors="pt")
    batch = TokenBatch.sent(dict(features), torch.device("cpu"))
    mask = batch["attention_mask"].bool()
    assert torch.equal(batch.real_positions(), mask.flatten().nonzero().squeeze(1)) and not mask[0, 0]
    torch.manual_seed(0)
    logits = torch.randn(*mask.shape, 2, dtype=torch.bfloat16, requires_grad=True)
    replaced = torch.rand(mask.shape) < 0.3
    by_positions = rtd_loss(logits, replaced, batch.real_positions())
    (from_positions,) = torch.autograd.grad(by_positions, logits)
    by_mask = F.cross_entropy(logits[mask].float(), replaced[mask].long())
    (from_mask,) = torch.autograd.grad(by_mask, logits)
    assert torch.equal(by_positions, by_mask) and torch.equal(from_positions, from_mask)


def test_masking_chooses_the_ratio_of_maskable_tokens_bert_style():
    torch.manual_seed(0)
    ids = torch.randint(1000, 2000, (200, 100))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = maskable[:, -1] = False
    masked, chosen = mask_for_generator(ids, maskable, 0.3, 4000, 500)
    assert torch.equal(masked[~chosen], ids[~chosen]) and not (chosen & ~maskable).any()
    assert chosen[maskable].float().mean().item() == pytest.approx(0.3, abs=0.01)
    assert (masked[maskable] == 4000).float().mean().item() == pytest.approx(0.3 * 0.8, abs=0.01)
    assert (masked[maskable] < 500).float().mean().item() == pytest.approx(0.3 * 0.1, abs=0.01)  # random tokens
    assert torch.equal(mask_for_generator(ids, maskable, 0.0, 4000, 500)[0], ids)


def build(tiny_bert: str, tiny_masked_lm: str, **overrides: Any):
    return build_objective("diffcse", tiny_bert, 0, **{"generator": tiny_masked_lm, **overrides})


@pytest.mark.parametrize("dropout, positions", [(False, "all"), (True, "all"), (True, "masked")])
def test_edits_are_the_generators_prediction_where_edited_positions_says(tiny_bert, tiny_masked_lm, dropout,
                                                                         positions):
    """With generator_dropout the generator predicts in train mode (its dropout on, as the authors' Trainer leaves
    it), its masks drawn after the masking's draws; without, in eval mode. Its prediction goes in at the tokens
    chosen for masking ('masked', the paper's), or at every token but the first and the padding ('all', the
    authors' code's)."""
    objective = build(tiny_bert, tiny_masked_lm, generator_decoding="argmax", generator_dropout=dropout,
                      edited_positions=positions)
    features = objective.encoder.tokenize(BATCH, 32)
    torch.manual_seed(0)
    edited = objective.edit(features)
    torch.manual_seed(0)
    ids, attention = features["input_ids"], features["attention_mask"].bool()
    special = torch.isin(ids, torch.tensor(objective.encoder.tokenizer.all_special_ids))
    masked, chosen = mask_for_generator(ids, attention & ~special, 0.3, objective.encoder.tokenizer.mask_token_id,
                                        len(objective.encoder.tokenizer))
    generator = objective.generator.model.train(dropout)
    with torch.no_grad():
        predicted = generator(input_ids=masked, attention_mask=attention.long()).logits.argmax(-1)
        generator.train(not dropout)
        torch.manual_seed(0)
        mask_for_generator(ids, attention & ~special, 0.3, objective.encoder.tokenizer.mask_token_id,
                           len(objective.encoder.tokenizer))
        other_mode = generator(input_ids=masked, attention_mask=attention.long()).logits.argmax(-1)
    assert not torch.equal(predicted, other_mode)  # the mode matters: the test tells them apart
    assert torch.equal(edited[:, 0], ids[:, 0]) and torch.equal(edited[~attention], ids[~attention])
    inner = attention.clone()
    inner[:, 0] = False
    edited_at = inner if positions == "all" else chosen
    assert chosen.any() and (inner & ~chosen).any()  # the two choices differ here
    assert torch.equal(edited[edited_at], predicted[edited_at]) and torch.equal(edited[~edited_at], ids[~edited_at])
    assert (edited[edited_at] != ids[edited_at]).any()  # the random generator edits
    assert (predicted[inner & ~chosen] != ids[inner & ~chosen]).any()  # and 'masked' leaves some of its edits out


def test_the_discriminator_reads_the_sentence_vector_in_place_of_the_first_token(tiny_bert, tiny_masked_lm):
    objective = build(tiny_bert, tiny_masked_lm).eval()
    features = objective.encoder.tokenize(BATCH, 32)
    vectors = torch.randn(len(BATCH), 32)
    with torch.no_grad():
        logits = objective.discriminate(features["input_ids"], features, vectors)
        other_first = features["input_ids"].clone()
        other_first[:, 0] = 2000
        torch.testing.assert_close(objective.discriminate(other_first, features, vectors), logits)
        assert not torch.allclose(objective.discriminate(features["input_ids"], features, vectors + 1), logits)


def test_the_loss_is_infonce_plus_lambda_rtd_and_trains_encoder_discriminator_and_heads(tiny_bert, tiny_masked_lm):
    objective = build(tiny_bert, tiny_masked_lm, rtd_weight=0.5)
    objective.train()
    torch.manual_seed(0)
    loss = objective.loss(BATCH)
    torch.manual_seed(0)  # the same dropout masks and edits, taken apart
    features, views = objective.encode_views(BATCH)
    edited = objective.edit(features)
    replaced = (edited != features["input_ids"]) & features["attention_mask"].bool()
    detection = rtd_loss(objective.discriminate(edited, features, views), replaced)  # rtd_positions 'padded'
    assert features["attention_mask"].min() == 0  # the batch is padded: the two averages differ
    first, second = views.chunk(2)
    assert loss.item() == pytest.approx((info_nce(first, second, 0.05) + 0.5 * detection).item(), rel=1e-6)

    objective.zero_grad()
    detection.backward()  # RTD alone reaches the encoder through the sentence vector
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in objective.encoder.parameters())
    assert all(p.grad is not None for p in objective.rtd_head.parameters())
    assert any(p.grad is not None for p in objective.discriminator.parameters())
    assert all(p.grad is None and not p.requires_grad for p in objective.generator.parameters())
    state = objective.trained_state()
    assert any(k.startswith("discriminator.") for k in state) and "head.1.running_mean" in state
    assert not any(k.startswith("generator.") for k in state)


KNOB_SETTING = {"rtd_weight": 1.0, "generator_decoding": "argmax"}
"""The knob tests' setting: at the paper's lambda 0.005 an edit's effect on L_RTD hides below the knob
check's tolerance; and the random generator's distribution is so flat that a sample of it, drawn with the
same random numbers, hardly depends on which tokens were masked, while its argmax does."""


def objective_loss(tiny_bert: str, tiny_masked_lm: str, **overrides: Any) -> float:
    objective = build(tiny_bert, tiny_masked_lm, **{**KNOB_SETTING, **overrides})
    objective.train()
    torch.manual_seed(0)  # dropout, masking and sampling
    return objective.loss(BATCH).item()


@pytest.mark.parametrize("knob, value", [
    ("rtd_weight", 1.0),  # control: the test's setting on both sides
    ("rtd_weight", 0.005), ("rtd_weight", 0.0), ("mask_ratio", 0.6), ("mask_ratio", 0.0),
    ("generator_decoding", "sample"), ("batchnorm_head", False), ("temperature", 0.5), ("generator_dropout", False),
    ("edited_positions", "all"), ("rtd_positions", "real"),
])
def test_each_knob_changes_the_loss(tiny_bert, tiny_masked_lm, knob, value):
    default = KNOB_SETTING.get(knob, get_method("diffcse").all_knobs[knob].default)
    assert_knob_changes_the_loss(lambda **knobs: objective_loss(tiny_bert, tiny_masked_lm, **knobs), knob, value,
                                 default)


def test_the_generator_and_the_simcse_head_are_knobs(tiny_bert, tiny_masked_lm, tmp_path):
    other = str(build_tiny_bert(tmp_path / "other-mlm", seed=1, masked_lm=True))
    reference = objective_loss(tiny_bert, tiny_masked_lm)
    assert objective_loss(tiny_bert, other) != pytest.approx(reference, rel=1e-6)
    simcse_head = objective_loss(tiny_bert, tiny_masked_lm, batchnorm_head=False)
    assert objective_loss(tiny_bert, tiny_masked_lm, batchnorm_head=False,
                          mlp_during_training=False) != pytest.approx(simcse_head, rel=1e-6)


def test_the_batchnorm_heads_linear_layers_start_as_berts(tiny_bert, tiny_masked_lm):
    """The authors' ProjectionMLP is built inside their Hugging Face model, whose init_weights draws its linear
    layers' weights from N(0, initializer_range^2) (no biases), not torch's uniform default (std 0.10 at width 32)."""
    objective = build(tiny_bert, tiny_masked_lm)
    linears = [layer for layer in objective.head if isinstance(layer, torch.nn.Linear)]
    assert [tuple(layer.weight.shape) for layer in linears] == [(64, 32), (32, 64)]
    std = objective.encoder.model.config.initializer_range
    for layer in linears:
        assert layer.bias is None and abs(float(layer.weight.mean())) < std / 5
        assert float(layer.weight.std()) == pytest.approx(std, rel=0.1)


def test_defaults_are_the_authors_bert_base_script():
    config = get_method("diffcse").resolve({})
    assert (config["generator"], config["mask_ratio"], config["rtd_weight"], config["batch_size"],
            config["learning_rate"], config["max_seq_length"], config["epochs"], config["temperature"],
            config["batchnorm_head"], config["generator_decoding"], config["pooling"]) == (
        "distilbert-base-uncased", 0.30, 0.005, 64, 7e-6, 32, 2, 0.05, True, "sample", "cls")


def test_a_generator_that_cannot_edit_is_refused_in_one_line(tiny_bert, tiny_masked_lm, tiny_roberta, monkeypatch):
    import trainers.data.sources

    monkeypatch.setattr(trainers.data.sources, "hub_reachable", lambda: False)
    method = get_method("diffcse")

    def problems(**knobs) -> list[str]:
        return [str(p) for p in method.check(method.resolve({"model": tiny_bert, **knobs}))]

    assert problems(generator=tiny_masked_lm) == []
    (offline,) = problems(generator="someone/not-cached")
    assert offline.startswith("generator: 'someone/not-cached' is not a local folder, not in the Hugging Face cache")
    assert problems(generator=tiny_bert) == [f"generator: generator {tiny_bert!r} has no masked-LM head (its "
                                             "architectures: ['BertModel'])"]
    assert problems(generator="") == ["generator: DiffCSE needs generator, a Hugging Face model with a masked-LM "
                                      "head (e.g. bert-base-uncased)"]
    (vocabulary,) = problems(generator=tiny_masked_lm, model=tiny_roberta)
    assert vocabulary.startswith("generator: ") and "must read the encoder's token ids" in vocabulary
    assert "distilroberta-base for roberta-base" in vocabulary  # the authors' generator for a RoBERTa encoder
    assert problems(generator=tiny_masked_lm, mlp_during_training=False) == [
        "batchnorm_head: needs mlp_during_training (the head it replaces)"]


@pytest.mark.slow
def test_a_diffcse_trial_resumes_exactly(tiny_bert, tiny_masked_lm, use_tiny_sts, tmp_path):
    config = {**BASE, "model": tiny_bert, "method": "diffcse", "generator": tiny_masked_lm, "rtd_weight": 1.0}
    assert_resumes_exactly(config, tmp_path / "checkpoints")


@pytest.mark.slow
def test_a_diffcse_export_loads_in_sentence_transformers_at_the_logged_score(tiny_bert, tiny_masked_lm,
                                                                             use_tiny_sts, tmp_path):
    assert_export_scores_as_logged({**BASE, "model": tiny_bert, "method": "diffcse", "generator": tiny_masked_lm,
                                    "max_steps": 4, "eval_every": 2}, tmp_path)


def test_a_sweep_whose_generator_this_machine_lacks_is_refused_before_it_starts(tiny_bert, tmp_path, monkeypatch,
                                                                              capsys):
    """Offline, a hub id that is not in the cache stops `sweep plan` with exit 2 and one line naming the row
    and the knob, as SCT's mlm view does; a local masked-LM folder is accepted."""
    import trainers.data.sources
    from sweep.commands.cli import main
    from tests.conftest import write_spec

    monkeypatch.setattr(trainers.data.sources, "hub_reachable", lambda: False)
    spec = {"name": "diffcse-offline", "method": "diffcse", "base": {"model": tiny_bert, "max_steps": 2},
            "rows": [{"name": "DiffCSE", "set": {"generator": "someone/not-cached"}}], "seeds": [1]}
    capsys.readouterr()
    assert main(["plan", str(write_spec(tmp_path, spec))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("rows['DiffCSE']: generator: 'someone/not-cached' is not a local folder" in line for line in err)
    assert not any("Traceback" in line for line in err)
