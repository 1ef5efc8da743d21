"""BERT-flow (Li et al. 2020) on the tiny BERT: the loss against a slow per-sample version, the flow's
log-determinant against autograd's Jacobian, each knob's effect on the flow, a frozen encoder, exact resume, and
an export that sentence-transformers loads with the trial's vectors and scores."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModel

from tests.exported import assert_scores_as_logged
from tests.test_checkpoint import assert_resumes_exactly
from trainers.knobs import KnobSet
from trainers.losses.flow import flow_nll_bits
from trainers.models.glow import ActNorm, Coupling, FlowStep, Glow, InvertibleLinear
from trainers.objectives.flow import flow_from_config
from trainers.registry import get_method
from trainers.training.checkpoint import LocalSession
from trainers.training.loop import run_trial
from trainers.training.optimization import make_optimizer

TRIAL = {"method": "flow", "batch_size": 8, "train_limit": 40, "max_steps": 4, "eval_every": 2,
         "eval_precision": "fp32"}


def slow_nll_bits(latent: torch.Tensor, log_det: torch.Tensor) -> float:
    """One sample at a time: -(log N(z; 0, I) + log det) / (dim ln 2), averaged, in float64."""
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    total = 0.0
    for z, det in zip(latent.double(), log_det.double()):
        total += float(-(sum(normal.log_prob(value) for value in z) + det) / (len(z) * math.log(2)))
    return total / len(latent)


def test_the_loss_is_the_negative_log_likelihood_in_bits_per_dimension():
    generator = torch.Generator().manual_seed(0)
    latent, log_det = torch.randn(5, 12, generator=generator) * 2, torch.randn(5, generator=generator) * 3
    assert float(flow_nll_bits(latent, log_det)) == pytest.approx(slow_nll_bits(latent, log_det), rel=1e-6)


def trained_looking(flow: Glow, seed: int) -> Glow:
    """``flow`` initialised from data, then every parameter moved: its zero layers are no longer zero."""
    generator = torch.Generator().manual_seed(seed)
    flow.initialize(torch.randn(64, flow.settings["dim"], generator=generator) * 3 + 1)
    with torch.no_grad():
        for parameter in flow.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return flow


@pytest.mark.parametrize("coupling", ["additive", "affine"])
@pytest.mark.parametrize("permutation", [True, False])
def test_the_log_determinant_is_the_jacobians(coupling, permutation):
    torch.manual_seed(0)
    flow = trained_looking(Glow(8, levels=2, depth=2, width=6, coupling=coupling, permutation=permutation).double(), 1)
    u = torch.randn(3, 8, dtype=torch.float64)
    _, log_det = flow.latent_and_log_det(u)
    for x, ours in zip(u, log_det):
        jacobian = torch.autograd.functional.jacobian(lambda v: flow.latent_and_log_det(v[None])[0][0], x)
        assert float(ours.detach()) == pytest.approx(float(torch.linalg.slogdet(jacobian).logabsdet), abs=1e-9)


def test_the_latent_is_the_split_halves_then_the_top():
    """With identity steps (actnorm at zero, reversal undone twice per level, zero couplings), the latent of
    a 2-level flow is u's second half after one reversal, then the first half reversed twice."""
    flow = Glow(8, levels=2, depth=2)
    u = torch.arange(8.0)[None]
    latent = flow(u)[0].tolist()
    # Level 0 (two reversals): u; its second half [4..7] leaves. Level 1 (two reversals) on [0..3]: unchanged.
    assert latent == [4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0]


def expected_structure(config) -> dict:
    """What each flow knob asks for, counted from the module: levels, steps per level, the coupling net's
    width and output, and whether the 1x1 convolution has weights."""
    return {"levels": config["flow_levels"], "depth": config["flow_depth"], "width": config["flow_width"],
            "affine": config["flow_coupling"] == "affine", "learned_mix": not config["flow_permutation"]}


def structure(flow: Glow) -> dict:
    steps = [step for level in flow.levels for step in level]
    coupling = steps[0].coupling
    return {"levels": len(flow.levels), "depth": len(flow.levels[0]), "width": coupling.net[0].linear.out_features,
            "affine": coupling.net[-1].linear.out_features == 32, "learned_mix": any(
                isinstance(step.mix, InvertibleLinear) and any(True for _ in step.mix.parameters()) for step in steps)}


@pytest.mark.parametrize("knob, value", [(None, None), ("flow_levels", 2), ("flow_depth", 1), ("flow_width", 8),
                                         ("flow_coupling", "affine"), ("flow_permutation", False)])
def test_each_knob_builds_its_flow(tiny_bert, knob, value):
    config = get_method("flow").resolve({"model": tiny_bert, **({knob: value} if knob else {})})
    assert structure(flow_from_config(config, 32)) == expected_structure(config)


def test_the_knobs_default_to_the_authors_config():
    knobs: KnobSet = get_method("flow").all_knobs
    expected = {
        "flow_levels": 3, "flow_depth": 3, "flow_width": 32, "flow_coupling": "additive", "flow_permutation": True,
        "pooling": "first_last_avg", "learning_rate": 1e-3, "batch_size": 32, "flow_batch": "pairs",
        "max_seq_length": 64,
        "lr_schedule": "constant", "weight_decay": 0.01, "adam_epsilon": 1e-6, "max_grad_norm": 1.0,
        "final_state": "last", "nli_supervision": False, "nli_learning_rate": 2e-5, "weight_decay_exempt": "none",
        "adam_implementation": "bert_tf", "adam_bias_correction": False, "nli_classifier": "bert"}
    assert {name: knobs[name].default for name in expected} == expected


@pytest.mark.parametrize("exempt", ["none", "biases_and_norms"])
def test_the_flows_biases_are_decayed_as_the_authors_code_decays_them(exempt):
    """BERT-flow's exempt names (LayerNorm, layer_norm, bias) match none of its flow's TensorFlow variables (b,
    logs, W, ...): every one decays. 'biases_and_norms' spares ours named 'bias' (the actnorms' and the zero
    dense layers'), as fit() would."""
    flow = Glow(8, levels=1, depth=1)
    config = get_method("flow").resolve({"weight_decay_exempt": exempt} if exempt != "none" else {})
    optimizer = make_optimizer(config, flow)
    decay = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
    names = {name: decay[id(p)] for name, p in flow.named_parameters()}
    biases = [name for name in names if "bias" in name]
    assert biases and len(names) > len(biases)
    assert all(names[name] == (0.01 if exempt == "none" else 0.0) for name in biases)
    assert all(rate == 0.01 for name, rate in names.items() if name not in biases)


def test_a_width_the_levels_cannot_halve_is_refused(tiny_bert):
    method = get_method("flow")
    problems = method.environment_problems(method.resolve({"model": tiny_bert, "flow_levels": 6}))
    assert [p.key for p in problems] == ["flow_levels"] and "not divisible by 64" in problems[0].message


def test_actnorm_starts_from_the_first_batch():
    """Glow's data-dependent initialisation: each actnorm's output on the first batch has zero mean, unit variance."""
    torch.manual_seed(0)
    flow = Glow(8, levels=1, depth=1)
    u = torch.randn(100, 8) * 5 + 3
    flow.initialize(u)
    normalized, _ = flow.levels[0][0].actnorm(u)
    torch.testing.assert_close(normalized.mean(0), torch.zeros(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(normalized.pow(2).mean(0), torch.ones(8), atol=1e-4, rtol=0)
    assert bool(flow.initialized)
    assert isinstance(flow.levels[0][0], FlowStep) and isinstance(flow.levels[0][0].coupling, Coupling)
    assert all(not m.initializing for m in flow.modules() if isinstance(m, ActNorm))


@pytest.mark.parametrize("setting", ["released", "data"])
def test_the_actnorms_start_as_flow_actnorm_init_says(tiny_bert, setting):
    """'released': the authors' code never runs Glow's data-dependent initialisation, so each actnorm keeps
    TensorFlow's Glorot-uniform draw for its (1, 1, 1, C) variables, U(+-sqrt(6 / (1 + C))), and the first batch
    changes nothing; 'data': the first batch sets them."""
    from tests.conftest import build_objective

    torch.manual_seed(0)
    objective = build_objective("flow", tiny_bert, 0, flow_actnorm_init=setting)
    actnorms = [module for module in objective.flow.modules() if isinstance(module, ActNorm)]
    assert {a.bias.numel() for a in actnorms} == {32, 16, 8}  # levels of 32, 16 and 8 channels; couplings of width 32
    before = [(a.bias.clone(), a.logs.clone()) for a in actnorms]
    objective.loss([("A man plays a guitar.", "Two dogs run in a field."), ("The stock market fell.", "It rains.")])
    if setting == "data":
        assert not bool(before[0][0].any()) and bool(actnorms[0].bias.any())
        return
    assert bool(objective.flow.initialized)
    for actnorm, (bias, logs) in zip(actnorms, before):
        limit = math.sqrt(6 / (1 + bias.numel()))
        assert torch.equal(actnorm.bias, bias) and torch.equal(actnorm.logs, logs)  # no initialisation from data
        for drawn in (bias, logs):
            assert bool((drawn.abs() <= limit).all()) and float(drawn.abs().max()) > limit / 2
    everything = torch.cat([torch.cat([b, s]) / math.sqrt(6 / (1 + b.numel())) for b, s in before])
    assert float(everything.std()) == pytest.approx(1 / math.sqrt(3), rel=0.1)  # a uniform's spread


PAIRS = [("A man plays a guitar.", "A man is playing music."), ("Two dogs run in a field.", "A cat sleeps."),
         ("The stock market fell sharply today.", "Shares dropped.")]


def test_a_batch_of_pairs_sums_each_sides_mean_loss_as_the_authors_code(tiny_bert):
    """run_siamese.py: flow_loss_batch_a + flow_loss_batch_b, each side's mean bits per dimension over its own
    pass; here against the flow's likelihood of each sentence's vector encoded alone."""
    from tests.conftest import build_objective

    objective = build_objective("flow", tiny_bert, 0, flow_batch="pairs").eval()  # no dropout: one vector a text
    loss = float(objective.loss(PAIRS))
    expected = 0.0
    for side in zip(*PAIRS):
        with torch.no_grad():
            vectors = torch.cat([objective.encoder.pooled(objective.encoder.tokenize([text], 64)) for text in side])
            expected += slow_nll_bits(*objective.flow.latent_and_log_det(vectors))
    assert loss == pytest.approx(expected, rel=1e-5)
    sentences = build_objective("flow", tiny_bert, 0, flow_batch="sentences").eval()
    assert float(sentences.loss([text for pair in PAIRS for text in pair])) == pytest.approx(expected / 2, rel=1e-5)
    with pytest.raises(TypeError, match="pairs"):
        objective.loss([text for pair in PAIRS for text in pair])


@pytest.mark.parametrize("corpus", ["stsb_sentences", "sts_all_sentences"])
def test_the_pairs_are_the_sts_corpus_pairs_in_its_order(tiny_bert, use_tiny_sts, corpus):
    from trainers.data.sources import load_corpus
    from trainers.methods.flow import flow_examples

    method = get_method("flow")
    pairs = flow_examples(method.resolve({"model": tiny_bert, "train_corpus": corpus}))
    assert all(isinstance(pair, tuple) and len(pair) == 2 for pair in pairs)
    assert [text for pair in pairs for text in pair] == load_corpus(corpus)
    sentences = flow_examples(method.resolve({"model": tiny_bert, "train_corpus": corpus, "flow_batch": "sentences"}))
    assert sentences == load_corpus(corpus)


TARGET_SPLITS = {"stsb_target": ["stsb-train", "stsb-dev", "stsb-test"],
                 "sickr_target": ["sickr-train", "sickr-dev", "sickr-test"], "sts12_target": ["sts12-test"] * 3,
                 "sts16_target": ["sts16-test"] * 3}
"""Li et al.'s run_siamese.py --use_full_for_training: train, dev and test; STS12-16 read full.txt as each."""


@pytest.mark.parametrize("corpus", sorted(TARGET_SPLITS))
def test_a_target_corpus_is_the_pairs_of_its_sets_three_splits_as_bert_flow_reads_them(use_tiny_sts, corpus):
    from trainers.data.sources import corpus_problem, load_corpus_pairs

    expected = []
    for name in TARGET_SPLITS[corpus]:
        lines = (use_tiny_sts / f"{name}.tsv").read_text(encoding="utf-8").splitlines()[1:]
        expected += [tuple(line.split("\t")[:2]) for line in lines]
    assert load_corpus_pairs(corpus) == expected
    assert corpus_problem(corpus) is None
    hub = corpus_problem(corpus, "hub")  # the hub has STS-B's splits and the STS12-16 test sets, not SICK-R's train
    assert (hub is None) == (corpus != "sickr_target"), hub


@pytest.mark.parametrize("last_batch", ["drop", "keep"])
def test_a_flow_trial_trains_only_full_batches_in_every_epoch_unless_told_to_keep(tiny_bert, use_tiny_sts,
                                                                                  monkeypatch, tmp_path, last_batch):
    """BERT-flow's default 'drop': 44 pairs at batch 16 are two full batches an epoch (their drop_remainder), so
    two epochs train four batches of 16; 'keep' trains the 12 left over in each epoch too."""
    from trainers.objectives.flow import FlowObjective

    sizes = []
    loss = FlowObjective.loss
    monkeypatch.setattr(FlowObjective, "loss", lambda self, batch: sizes.append(len(batch)) or loss(self, batch))
    config = {**TRIAL, "model": tiny_bert, "batch_size": 16, "train_limit": 44, "max_steps": 0, "epochs": 2,
              "eval_every": 100}
    run_trial(config if last_batch == "drop" else {**config, "last_batch": last_batch},
              LocalSession(tmp_path, keep=1))
    assert sizes == ([16, 16] * 2 if last_batch == "drop" else [16, 16, 12] * 2)


def test_pairs_of_a_corpus_without_pairs_are_refused_naming_the_knob(tiny_bert, tmp_path):
    corpus = tmp_path / "texts.txt"
    corpus.write_text("A first sentence.\nA second one.\n", encoding="utf-8")
    method = get_method("flow")
    problems = method.environment_problems(method.resolve({"model": tiny_bert, "train_corpus": str(corpus)}))
    assert [p.key for p in problems] == ["flow_batch"] and "has none: set flow_batch 'sentences'" in problems[0].message
    accepted = method.resolve({"model": tiny_bert, "train_corpus": str(corpus), "flow_batch": "sentences"})
    assert method.environment_problems(accepted) == []
    missing = method.resolve({"model": tiny_bert, "train_corpus": str(tmp_path / "gone.txt"),
                              "flow_batch": "sentences"})
    assert [p.key for p in method.environment_problems(missing)] == ["train_corpus"]


@pytest.fixture
def finished_trial(tiny_bert, use_tiny_sts, tmp_path):
    """A short flow trial with its checkpoints kept: (its final report, its final checkpoint folder)."""
    folder = tmp_path / "checkpoints"
    final = run_trial({**TRIAL, "model": tiny_bert}, LocalSession(folder, keep=1))
    (checkpoint,) = folder.glob("checkpoint_*")
    return final, checkpoint


@pytest.mark.slow
def test_only_the_flow_trains_and_the_export_scores_as_logged(finished_trial, tiny_bert, tmp_path):
    from sentence_transformers import SentenceTransformer

    from sweep.run.models import load_trial_encoder, save_sentence_transformer

    final, checkpoint = finished_trial
    encoder, record = load_trial_encoder(checkpoint)
    pristine = AutoModel.from_pretrained(tiny_bert).state_dict()
    for name, weight in encoder.model.state_dict().items():  # the encoder is frozen
        torch.testing.assert_close(weight, pristine[name], rtol=0, atol=0)
    assert bool(encoder.after_pooling.initialized)
    untrained = flow_from_config(record.config, 32)
    assert any(not torch.equal(a, b) for a, b in zip(encoder.after_pooling.parameters(), untrained.parameters()))

    save_sentence_transformer(encoder, tmp_path / "export", record.config["eval_max_length"])
    model = SentenceTransformer(str(tmp_path / "export"), device="cpu", trust_remote_code=True)
    assert_scores_as_logged(model, final, encoder)


@pytest.mark.slow
def test_a_resumed_flow_trial_equals_the_uninterrupted_one(tiny_bert, use_tiny_sts, tmp_path):
    assert_resumes_exactly({**TRIAL, "model": tiny_bert, "max_steps": 5, "eval_every": 1}, tmp_path / "a", stop_at=3)
    # The learned 1x1 convolution and the affine coupling hold more state: they resume exactly too.
    assert_resumes_exactly({**TRIAL, "model": tiny_bert, "max_steps": 5, "eval_every": 1, "flow_permutation": False,
                            "flow_coupling": "affine"}, tmp_path / "b", stop_at=2)


def test_flow_is_listed_by_sweep_knobs(capsys):
    from sweep.commands.cli import main

    assert main(["knobs", "flow"]) == 0
    listing = capsys.readouterr().out
    for name in ("flow_levels", "flow_depth", "flow_width", "flow_coupling", "flow_permutation"):
        assert name in listing


# BERT-flow's NLI-supervised setting (ConSERT Table 3's BERT-flow rows), on a fake labelled NLI set: the hub is
# not reachable here.

NLI = [("A man plays a guitar on stage.", "A man is performing music.", 0),
       ("A man plays a guitar on stage.", "Nobody is playing anything.", 2),
       ("Two dogs run in a field.", "The dogs are brothers.", 1),
       ("Two dogs run in a field.", "Animals are outside.", 0),
       ("The market fell sharply today.", "Stocks went up.", 2),
       ("She cooks dinner for her family.", "She is a good cook.", 1)] * 6


@pytest.fixture
def fake_nli(monkeypatch):
    import trainers.data.nli_examples as nli

    monkeypatch.setattr(nli, "load_nli_pairs", lambda pair_set: list(NLI))


def test_nli_supervision_adds_sberts_nli_stage_at_the_authors_settings(tiny_bert):
    method = get_method("flow")
    (flow,) = method.stages(method.resolve({"model": tiny_bert}))
    nli, after = method.stages(method.resolve({"model": tiny_bert, "nli_supervision": True,
                                               "nli_learning_rate": 3e-5}))
    assert after == flow and flow.objective == "trainers.objectives.flow:FlowObjective"
    assert nli.objective == "trainers.objectives.nli:SBERTNLIObjective"
    assert dict(nli.overrides) == {"learning_rate": 3e-5, "batch_size": 16, "epochs": 1, "patience": 0,
                                   "warmup_ratio": 0.1, "lr_schedule": "linear", "final_state": "last",
                                   "weight_decay_exempt": "biases_and_norms"}


def test_the_nli_stage_spares_berts_biases_and_norms_where_the_flow_decays_every_weight(tiny_bert):
    """BERT-flow's optimisers exempt names holding LayerNorm, layer_norm or bias: BERT's biases and norms in its
    NLI fine-tuning (optimization.py), none of the flow's variables (optimization_bert_flow.py)."""
    from tests.test_optimizer import SENTENCE_TRANSFORMERS_NO_DECAY, tiny_bert_model

    method = get_method("flow")
    config = method.resolve({"model": tiny_bert, "nli_supervision": True})
    nli, flow = method.stages(config)
    model = tiny_bert_model()
    for stage, spared in ((nli, True), (flow, False)):
        optimizer = make_optimizer(method.resolve({**config, **stage.overrides}), model)
        decay = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
        for name, p in model.named_parameters():
            exempt = spared and any(part in name for part in SENTENCE_TRANSFORMERS_NO_DECAY)
            assert decay[id(p)] == (0.0 if exempt else 0.01), (stage.name, name)


def test_the_nli_classifier_is_the_authors_bias_free_truncated_normal_for_the_flow():
    """BERT-flow's run_siamese.py: output_weights from truncated_normal_initializer(stddev=0.02), no bias; ConSERT's
    (sentence-transformers' SoftmaxLoss) an nn.Linear with a bias."""
    from trainers.objectives.nli import nli_classifier

    assert get_method("flow").resolve({})["nli_classifier"] == "bert"
    assert get_method("consert").resolve({})["nli_classifier"] == "linear"
    torch.manual_seed(0)
    bert = nli_classifier("bert", 3 * 768)
    weights = bert.weight.detach()
    assert bert.bias is None and weights.shape == (3, 3 * 768)
    assert weights.abs().max() <= 0.04 and weights.abs().max() > 0.039  # cut at two standard deviations
    # A normal truncated at +-2 sigma has std 0.02 x 0.8796; 6,912 draws put it within 2% of that.
    assert weights.std().item() == pytest.approx(0.02 * 0.8796, rel=0.02)
    linear = nli_classifier("linear", 3 * 768)
    assert linear.bias is not None and linear.weight.abs().max() <= 1 / math.sqrt(3 * 768)


def test_nli_supervision_is_refused_offline_naming_the_knob(tiny_bert, monkeypatch):
    import trainers.data.nli_examples as nli

    monkeypatch.setattr(nli, "hub_reachable", lambda: False)
    method = get_method("flow")
    problems = method.environment_problems(method.resolve({"model": tiny_bert, "nli_supervision": True}))
    assert [p.key for p in problems] == ["nli_supervision"] and "Hugging Face hub" in problems[0].message
    assert method.environment_problems(method.resolve({"model": tiny_bert})) == []


def test_the_sbert_nli_loss_is_ce_over_mean_pooled_pairs(tiny_bert):
    """SBERTNLIObjective against the loss written out: each side the mean of the last layer's token vectors,
    L_ce of [u, v, |u - v|] (tests/test_consert.py's slow version); ConSERT's 'sup' is the same objective."""
    from tests.conftest import build_objective
    from tests.test_consert import slow_nli_classification_loss
    from trainers.models.encoder import SentenceEncoder
    from trainers.models.pooling import masked_mean
    from trainers.objectives.nli import SBERTNLIObjective

    config = get_method("flow").resolve({"model": tiny_bert, "nli_supervision": True})
    torch.manual_seed(0)
    objective = SBERTNLIObjective(config, SentenceEncoder.from_config(config)).eval()
    batch = NLI[:6]
    sides = [objective.encoder.tokenize([pair[i] for pair in batch], 64) for i in (0, 1)]
    pooled = [masked_mean(objective.encoder.hidden_states(f)[-1], f["attention_mask"]).double() for f in sides]
    assert objective.classifier.bias is None  # BERT-flow's classifier: no bias
    weight, bias = objective.classifier.weight.double(), torch.zeros(3, dtype=torch.float64)
    expected = slow_nli_classification_loss(pooled[0], pooled[1], torch.tensor([p[2] for p in batch]), weight, bias)
    assert objective.loss(batch).item() == pytest.approx(expected.item(), rel=1e-5)
    consert_sup = build_objective("consert", tiny_bert, 0, supervision="sup", remove_bert_dropout=False).eval()
    consert_sup.classifier.load_state_dict({**objective.classifier.state_dict(), "bias": torch.zeros(3)})
    assert consert_sup.loss(batch).item() == pytest.approx(objective.loss(batch).item(), rel=1e-6)


@pytest.mark.parametrize("nli_supervision", [False, True])
def test_nli_supervision_fine_tunes_the_encoder_that_the_flow_then_fits_frozen(nli_supervision, tiny_bert,
                                                                               use_tiny_sts, fake_nli, monkeypatch,
                                                                               tmp_path):
    """With nli_supervision the NLI stage trains the encoder at nli_learning_rate (36 pairs at batch 16: 2 steps,
    the short last batch dropped as the authors' drop_remainder drops it; linear decay to 0), and the flow's
    stage starts from, and ends with, that encoder; without it the flow's stage starts from the pristine encoder."""
    from sweep.run.models import load_trial_encoder
    from trainers.objectives.flow import FlowObjective

    at_flow_start = []
    build = FlowObjective.__init__

    def recording(self, config, encoder):
        at_flow_start.append({k: v.clone() for k, v in encoder.model.state_dict().items()})
        build(self, config, encoder)

    monkeypatch.setattr(FlowObjective, "__init__", recording)
    reports = []
    config = {**TRIAL, "model": tiny_bert, "learning_rate": 5e-3, "nli_learning_rate": 1e-3,
              "nli_supervision": nli_supervision}
    run_trial(config, LocalSession(tmp_path, reports.append, keep=1))
    final = load_trial_encoder(next(tmp_path.glob("checkpoint_*")))[0].model.state_dict()
    (start,) = at_flow_start
    assert all(torch.equal(final[name], weight) for name, weight in start.items())  # frozen in the flow's stage
    pristine = AutoModel.from_pretrained(tiny_bert).state_dict()
    changed = any(not torch.equal(start[name], weight) for name, weight in pristine.items())
    assert changed == nli_supervision
    progress = reports[:-1]
    if nli_supervision:
        nli_stage = [r for r in progress if r["stage"] == 0]
        assert [r["step"] for r in nli_stage] == [2]
        assert [r["lr"] for r in nli_stage] == pytest.approx([0.0])
        assert [r["lr"] for r in progress if r["stage"] == 1] == pytest.approx([5e-3, 5e-3])
    else:
        assert [r["lr"] for r in progress] == pytest.approx([5e-3, 5e-3])


def test_a_resumed_nli_supervised_flow_trial_equals_the_uninterrupted_one(tiny_bert, use_tiny_sts, fake_nli,
                                                                          tmp_path):
    """Stopped at the NLI stage's end (step 2: a trial that trains that stage itself, share_stages off) and in the
    flow's stage (step 4, after an NLI stage read from the uninterrupted trial's)."""
    config = {**TRIAL, "model": tiny_bert, "nli_supervision": True, "nli_learning_rate": 1e-3, "eval_every": 1}
    assert_resumes_exactly({**config, "share_stages": False}, tmp_path / "a", stop_at=2)
    assert_resumes_exactly(config, tmp_path / "b", stop_at=4)


def test_a_flow_not_yet_fitted_only_permutes_the_dimensions():
    """What the NLI stage's dev evaluations see (docs/methods.md): the default flow before its data-dependent
    initialisation maps each vector to a permutation of its coordinates, so the cosines are the pooling's."""
    torch.manual_seed(0)
    u = torch.randn(5, 32)
    latent, _ = Glow(32).latent_and_log_det(u)
    assert torch.equal(latent.sort(dim=-1).values, u.sort(dim=-1).values)
    order = latent[0].unsqueeze(-1).eq(u[0]).nonzero()[:, 1]  # where each latent coordinate comes from
    torch.testing.assert_close(latent, u[:, order], rtol=0, atol=0)


def test_planning_an_nli_supervised_trial_reads_no_nli(tiny_bert, monkeypatch):
    """`sweep plan` counts a trial's steps from its examples; a stage on labelled NLI (hub only) is not read:
    it is counted by the split's known size, one epoch at batch 16, the last short batch dropped (or max_steps)."""
    import trainers.data.nli_examples as nli
    from sweep.spec.regime import planned_steps

    def hub_read(pair_set):
        raise AssertionError("planning read the NLI pairs")

    monkeypatch.setattr(nli, "load_nli_pairs", hub_read)
    method = get_method("flow")
    alone = planned_steps(method, method.resolve({"model": tiny_bert}), {})  # the flow's stage on STS-B's sentences
    assert planned_steps(method, method.resolve({"model": tiny_bert, "nli_supervision": True}), {}) == (
        (942_069 + 9_842 + 9_824) // 16 + alone)  # all-nli's train split and SNLI's labelled validation and test
    assert planned_steps(method, method.resolve({"model": tiny_bert, "nli_supervision": True,
                                                 "nli_pairs": "all_nli"}), {}) == 942_069 // 16 + alone
    assert planned_steps(method, method.resolve({"model": tiny_bert, "nli_supervision": True, "max_steps": 7}),
                         {}) == 7 + 7  # each stage's own cap
    assert planned_steps(method, method.resolve({"model": tiny_bert}), {}) > 0  # the STS-B sentences, read
