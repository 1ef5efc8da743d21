"""ConSERT Section 5.1, Figure 4: mean pooling without the k most frequent tokens (``pooling_skip_frequent``).

The pooling against a slow, token-by-token computation on the tiny random BERT; k = 0 against plain
pooling, bit for bit; the ranking on a crafted corpus and on STS-B test ([CLS] and [SEP] first, as the
paper's caption says); the refusals (a non-averaging pooling, export); and the spec."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sweep.commands.status import exportable
from sweep.run.models import ExportError, export_trial
from sweep.spec.sweep_spec import SpecError, load_spec
from tests.test_consert import SPECS
from trainers.common_knobs import MEAN_POOLINGS
from trainers.knobs import ConfigError
from trainers.models.encoder import SentenceEncoder, frequency_ranking, frequent_token_ids
from trainers.models.pooling import pool
from trainers.registry import get_method

SENTENCES = ["A man is playing a guitar.", "Dogs run.", "The man, the dog and the cat sat on the mat in the sun."]
LAYERS = {"mean": (-1,), "first_last_avg": (1, -1), "last2avg": (-2, -1)}
"""The hidden states each averaging pooling averages (the tiny BERT has 2 layers)."""


def config(tiny_bert, **overrides):
    return get_method("none").resolve({"model": tiny_bert, **overrides})


def slow_pool(encoder: SentenceEncoder, sentence: str, skipped: set[int]) -> torch.Tensor:
    """One sentence alone, no padding: the mean over its tokens whose id is not skipped of the average of
    the pooling's layers; zero when every token is skipped."""
    ids = encoder.tokenizer(sentence)["input_ids"]
    with torch.no_grad():
        states = encoder.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    layers = LAYERS[encoder.pooling]
    total, count = torch.zeros(encoder.model.config.hidden_size), 0
    for position, token in enumerate(ids):
        if token in skipped:
            continue
        total = total + sum(states[layer][0, position] for layer in layers) / len(layers)
        count += 1
    return total / count if count else total


@pytest.mark.parametrize("pooling", MEAN_POOLINGS)
@pytest.mark.parametrize("k", [1, 2, 5, 34])
def test_skipping_pooling_equals_a_token_by_token_loop(tiny_bert, pooling, k):
    encoder = SentenceEncoder.from_config(config(tiny_bert, pooling=pooling, pooling_skip_frequent=k)).eval()
    skipped = set(frequent_token_ids(encoder.tokenizer, k))
    assert len(skipped) == k == len(encoder.skip_token_ids)
    batched = encoder.encode(SENTENCES, batch_size=3)  # padded together: the padding and the skipped ids are out
    expected = torch.stack([slow_pool(encoder, s, skipped) for s in SENTENCES])
    torch.testing.assert_close(batched, expected, atol=1e-5, rtol=1e-4)
    plain = SentenceEncoder.from_config(config(tiny_bert, pooling=pooling)).eval().encode(SENTENCES)
    assert not torch.allclose(batched, plain)  # the skipped tokens mattered


def test_k_zero_is_plain_pooling_bit_for_bit(tiny_bert):
    encoder = SentenceEncoder.from_config(config(tiny_bert, pooling="last2avg", pooling_skip_frequent=0)).eval()
    assert encoder.skip_token_ids == ()
    features = encoder.tokenize(SENTENCES, max_length=64)
    with torch.no_grad():
        plain = pool(encoder.hidden_states(features), features["attention_mask"], "last2avg")
        assert torch.equal(encoder(features), plain)


def test_a_sentence_of_skipped_tokens_only_gets_the_zero_vector(tiny_bert):
    encoder = SentenceEncoder.from_config(config(tiny_bert, pooling="mean", pooling_skip_frequent=3)).eval()
    assert encoder.tokenizer.convert_ids_to_tokens(list(encoder.skip_token_ids)) == ["[CLS]", "[SEP]", "."]
    vectors = encoder.encode([".", "A dog."])
    assert torch.equal(vectors[0], torch.zeros_like(vectors[0])) and vectors[1].abs().sum() > 0


def test_ranking_is_by_frequency_ties_to_the_lower_id(tiny_bert):
    tokenizer = SentenceEncoder.from_pretrained(tiny_bert).tokenizer
    dog, cat, bird = tokenizer.convert_tokens_to_ids(["dog", "cat", "bird"])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    # dog 4; [CLS] and [SEP] 3 each (one per sentence); cat and bird 2 each.
    ranking = frequency_ranking(tokenizer, ("dog dog dog cat", "cat dog bird", "bird"))
    assert ranking == (dog, min(cls, sep), max(cls, sep), min(cat, bird), max(cat, bird))
    assert tokenizer.pad_token_id not in ranking


def test_sts_b_test_ranks_cls_and_sep_first_and_is_counted_once(tiny_bert):
    tokenizer = SentenceEncoder.from_pretrained(tiny_bert).tokenizer
    frequency_ranking.cache_clear()
    top = frequent_token_ids(tokenizer, 2)
    assert set(tokenizer.convert_ids_to_tokens(list(top))) == {"[CLS]", "[SEP]"}  # the paper's caption
    assert frequent_token_ids(tokenizer, 34)[:2] == top
    info = frequency_ranking.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_non_averaging_poolings_are_refused(tiny_bert):
    for pooling in ("cls", "max"):
        with pytest.raises(ConfigError, match=rf"pooling_skip_frequent: .* got pooling '{pooling}'"):
            config(tiny_bert, pooling=pooling, pooling_skip_frequent=5)
        assert config(tiny_bert, pooling=pooling)["pooling_skip_frequent"] == 0
        with pytest.raises(ValueError, match="must be one of"):
            SentenceEncoder.from_pretrained(tiny_bert, pooling).skip_tokens([101])


def run(skipped: str, trial: str = "t1", best_dev: float = 90.0):
    """A finished untuned trial's MLflow run, as the export and the end of a sweep read it."""
    return SimpleNamespace(info=SimpleNamespace(status="FINISHED", run_id=f"run-{trial}"),
                           data=SimpleNamespace(params={"pooling_skip_frequent": skipped},
                                                metrics={"best_dev_spearman": best_dev},
                                                tags={"sweep.trial_id": trial, "sweep.checkpoint": f"/nowhere/{trial}",
                                                      "sweep.model": "untrained", "sweep.method": "none"}))


def test_export_refuses_a_skipping_trial_before_reading_it(tmp_path):
    refused = "trial t1 is not exported: pooling_skip_frequent=34: .*sentence-transformers"
    with pytest.raises(ExportError, match=refused):
        export_trial(run("34"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert exportable(run("34")) == "no (pooling)" and exportable(run("0")) == "yes (untuned)"


def test_the_end_of_a_sweep_logs_no_model_for_a_skipping_trial(monkeypatch, capsys):
    from sweep.run import retention

    logged = []
    monkeypatch.setattr(retention, "log_model", lambda uri, chosen, register=None: logged.append(chosen))
    monkeypatch.setattr(retention, "delete_resume_states", lambda uri: None)
    best, other = run("34", "t1", best_dev=90.0), run("0", "t2", best_dev=80.0)
    tracker = SimpleNamespace(child_runs=lambda: [best, other], tracking_uri="sqlite://",
                              runs=SimpleNamespace(model_state=lambda *args: None))
    spec = SimpleNamespace(keep_models="all", metric="best_dev_spearman", mode="max", log_models=True)
    retention.finish_models(spec, tracker)
    assert logged == [other]  # the best trial skips tokens: said, not logged; the other is logged
    assert "trial t1: no model logged to MLflow: pooling_skip_frequent=34" in capsys.readouterr().out


def test_figure4_spec_plans_one_seed_free_trial_per_k(tiny_bert):
    spec = load_spec(SPECS / "consert_frequent_tokens.yaml")
    ks = [t.config["pooling_skip_frequent"] for t in spec.trials]
    assert ks[0] == 0 and 34 in ks and ks == sorted(ks)
    assert {(t.config["method"], t.config["pooling"]) for t in spec.trials} == {("none", "last2avg")}
    with pytest.raises(SpecError, match="pooling_skip_frequent: leaves tokens out of an average"):
        load_spec(SPECS / "consert_frequent_tokens.yaml", {"pooling": "cls"})
