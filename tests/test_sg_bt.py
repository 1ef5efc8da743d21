"""SG-BERT's back-translated positives, on a tiny back-translation file: SG-OPT with them (Table 7, "BT +
SG-OPT"), each ``bt_into`` giving the loss written out independently from the paper; and the Contrastive (BT)
baseline (``loss: bt``, Appendix A.2), Contrastive (SG)'s L_base with the back-translation as the positive."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertModel

from tests.conftest import build_tiny_bert, differing_knobs, row_configs
from tests.test_sg import BATCH, TEST_DEFAULTS, authors_head, build, objective_loss
from tests.test_sg_losses import slow_base, slow_opt_bt
from trainers.data.backtranslate import write_file
from trainers.registry import get_method
from trainers.training.loop import run_trial

SPECS = Path(__file__).resolve().parent.parent / "search_spaces"

ROWS = [(s, f"{s[:-1]} indeed.", f"Well, {s[0].lower()}{s[1:]}") for s in BATCH]
"""(sentence, bt1, bt2): stand-ins for two round trips through a pivot language."""


@pytest.fixture
def bt_file(tmp_path):
    return str(write_file(ROWS * 3, tmp_path / "bt.tsv"))  # 12 rows, as `python -m trainers.data.backtranslate` writes


def expected_bt_loss(tiny_bert: str, bt_view: str = "bt1", bt_into: str = "fixed") -> float:
    """The loss at initialisation (BERT_T = BERT_F, no dropout, L_reg = 0), written out from Sections 3 and 6
    independently of the objective: each text encoded alone (no padding); c_i = the original's last-layer
    [CLS]; BERT_F's views = its layers 0..l max-pooled; the back-translation's views (fixed, fixed_join) or
    its BERT_T [CLS] (tuned) join as guides; all through f, then L^opt3 by loops, in float64."""
    knobs = get_method("sg").resolve({"model": tiny_bert, **TEST_DEFAULTS})
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)

    def states(text: str):
        ids = tokenizer([text], truncation=True, max_length=knobs["max_seq_length"], return_tensors="pt")
        return model(**ids, output_hidden_states=True).hidden_states

    column = ("sentence", "bt1", "bt2").index(bt_view)
    with torch.no_grad():
        c = torch.stack([states(row[0])[-1][0, 0] for row in ROWS])
        views = torch.stack([torch.stack([layer[0].max(0).values for layer in states(row[0])]) for row in ROWS])
        bt_views = torch.stack([torch.stack([layer[0].max(0).values for layer in states(row[column])])
                                for row in ROWS])
        bt_cls = torch.stack([states(row[column])[-1][0, 0] for row in ROWS])
        head = authors_head(c.shape[1], knobs["projection_hidden"], model.config.initializer_range)
        c, views, bt_views, bt_cls = (head(x).double() for x in (c, views, bt_views, bt_cls))
    return float(slow_opt_bt(c, views, bt_cls if bt_into == "tuned" else bt_views, knobs["temperature"], bt_into))


BT_KNOB_CASES = [("bt_into", "fixed"), ("bt_into", "tuned"), ("bt_into", "fixed_join"), ("bt_view", "bt2")]


@pytest.mark.parametrize("knob, value", BT_KNOB_CASES)
def test_each_bt_knob_gives_the_loss_of_its_value(tiny_bert, knob, value):
    """The objective's loss on (sentence, bt1, bt2) rows equals the reference's for the knob's value, and that
    value's reference differs from the default's (bt_view bt1, bt_into fixed; the first case is the control)."""
    knobs = {"bt_view": "bt1", "bt_into": "fixed", knob: value}
    expected = expected_bt_loss(tiny_bert, knobs["bt_view"], knobs["bt_into"])
    objective = build(tiny_bert, **knobs)
    objective.eval()
    torch.manual_seed(0)
    assert objective.loss(ROWS).item() == pytest.approx(expected, rel=1e-5)
    if (knob, value) != ("bt_into", "fixed"):
        assert expected != pytest.approx(expected_bt_loss(tiny_bert), rel=1e-3)


def test_joining_a_back_translation_changes_sg_opt(tiny_bert):
    plain = objective_loss(build(tiny_bert)).item()
    assert plain != pytest.approx(expected_bt_loss(tiny_bert), rel=1e-3)


@pytest.mark.parametrize("bt_into, tabled", [("fixed", [1]), ("tuned", [0]), ("fixed_join", [0, 1])])
def test_bert_f_tables_the_texts_it_reads(tiny_bert, monkeypatch, bt_into, tabled):
    objective = build(tiny_bert, bt_view="bt1", bt_into=bt_into, bert_f_dropout=False)
    objective.prepare(ROWS)
    assert sorted(objective.table.table.rows) == sorted({row[c] for row in ROWS for c in tabled})
    monkeypatch.setattr(objective, "compute_views", lambda texts: pytest.fail(f"views of {texts} recomputed"))
    objective.loss(ROWS).backward()


def test_a_bt_sg_opt_trial_trains_on_the_files_rows(tiny_bert, bt_file, use_tiny_sts):
    reports = []
    final = run_trial({"method": "sg", "model": tiny_bert, "projection_hidden": 16, "bt_view": "bt1",
                       "bt_file": bt_file, "batch_size": 4, "eval_every": 2, "eval_max_pairs": 20}, reports.append)
    assert final["steps"] == 3  # one epoch of the file's 12 rows, not of the corpus


@pytest.mark.parametrize("knobs, problem", [
    ({"bt_view": "bt1"}, "bt_file: bt_view 'bt1' needs a TSV (sentence, bt1, bt2) that "
                         "`python -m trainers.data.backtranslate` writes; no bt_file is set"),
    ({"bt_view": "bt1", "bt_file": "missing.tsv"}, "bt_file: bt_view 'bt1' needs a TSV (sentence, bt1, bt2) that "
                                                   "`python -m trainers.data.backtranslate` writes; 'missing.tsv' does "
                                                   "not exist"),
    ({"bt_file": "missing.tsv"}, "bt_file: 'missing.tsv' does not exist (it would be ignored: bt_view is 'none' "
                                 "(set bt_view to bt1 or bt2))"),
    ({"bt_view": "bt2", "bt_file": "FILE", "loss": "sg"},
     "bt_view: a back-translation joins SG-OPT's loss (loss 'opt3', SG-BERT Table 7) or is Contrastive (BT)'s "
     "positive (loss 'bt', Appendix A.2); got loss 'sg'"),
    ({"loss": "bt"}, "loss: 'bt' (Contrastive (BT), SG-BERT Appendix A.2) takes each sentence's back-translation "
                     "as its positive: set bt_view to bt1 or bt2, a column of bt_file"),
    ({"loss": "bt", "bt_view": "bt1"}, "bt_file: bt_view 'bt1' needs a TSV (sentence, bt1, bt2)"),
    ({"loss": "bt", "bt_view": "bt2", "bt_file": "missing.tsv"}, "bt_file: bt_view 'bt2' needs a TSV"),
])
def test_bt_problems_are_named_before_a_sweep(tiny_bert, bt_file, knobs, problem):
    method = get_method("sg")
    config = method.resolve({"model": tiny_bert, **{k: bt_file if v == "FILE" else v for k, v in knobs.items()}})
    problems = method.check(config)
    assert len(problems) == 1 and str(problems[0]).startswith(problem)


def test_a_bt_sg_opt_trial_resumes_exactly(tiny_bert, bt_file, use_tiny_sts, tmp_path):
    from tests.test_checkpoint import BASE, assert_resumes_exactly

    config = {**BASE, "model": tiny_bert, "method": "sg", "projection_hidden": 16, "bt_view": "bt2",
              "bt_into": "tuned", "bt_file": bt_file, "eval_max_pairs": 20, "epochs": 2}  # 2 x 3 steps
    assert_resumes_exactly(config, tmp_path / "checkpoints")


# --- Contrastive (BT): loss 'bt' (SG-BERT Appendix A.2) ------------------------------------------------------


@pytest.fixture(scope="module")
def spread_bert(tmp_path_factory) -> str:
    """The tiny BERT with its weight matrices scaled 10x. At the 0.02 initialisation every text's last-layer
    [CLS] is nearly the same vector (cosines within about 1e-6 of each other), so L_base between two [CLS]
    vectors sits at log(2b - 1) whatever the texts, and a wrong positive moves it by less than float32 noise;
    here the texts' vectors differ, and so do the losses of different positives (by a factor of 5 below)."""
    folder = build_tiny_bert(tmp_path_factory.mktemp("spread-bert"))
    model = BertModel.from_pretrained(folder)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.mul_(10.0)
    model.save_pretrained(folder)
    return str(folder)


def bt_trial(tiny_bert: str, bt_file: str, **overrides) -> dict:
    return {"method": "sg", "model": tiny_bert, "projection_hidden": 16, "loss": "bt", "bt_view": "bt1",
            "bt_file": bt_file, "batch_size": 4, "eval_every": 2, "eval_max_pairs": 20, **overrides}


def reference_contrastive_bt(tiny_bert: str, rows, bt_view: str = "bt1") -> tuple[torch.Tensor, dict]:
    """Contrastive (BT)'s loss at initialisation (BERT_T = BERT_F, so L_reg = 0) and its gradient in BERT_T's
    transformer layers, written out from Appendix A.2 and Section 3.1 independently of the objective: each text
    read alone by BERT_T (no padding, no dropout, with gradient); c_i its sentence's last-layer [CLS], c'_i its
    back-translation's; both through f; L_base by loops (:func:`slow_base`) over the 2b vectors."""
    knobs = get_method("sg").resolve({"model": tiny_bert, **TEST_DEFAULTS})
    model, tokenizer = AutoModel.from_pretrained(tiny_bert).eval(), AutoTokenizer.from_pretrained(tiny_bert)

    def cls(text: str) -> torch.Tensor:
        ids = tokenizer([text], truncation=True, max_length=knobs["max_seq_length"], return_tensors="pt")
        return model(**ids).last_hidden_state[0, 0]

    column = ("sentence", "bt1", "bt2").index(bt_view)
    head = authors_head(model.config.hidden_size, knobs["projection_hidden"], model.config.initializer_range)
    c = head(torch.stack([cls(row[0]) for row in rows])).double()
    c_bt = head(torch.stack([cls(row[column]) for row in rows])).double()
    loss = slow_base(c, c_bt, knobs["temperature"])
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.encoder.named_parameters()}


@pytest.mark.parametrize("bt_view", ["bt1", "bt2"])
def test_contrastive_bt_is_l_base_between_a_sentence_and_its_back_translation(spread_bert, bt_view):
    """The objective's loss on (sentence, bt1, bt2) rows, and its gradient in BERT_T, equal the reference's: BERT_T
    reads the back-translation of ``bt_view``, with gradient, and it is the sentence's one positive."""
    expected, expected_grads = reference_contrastive_bt(spread_bert, ROWS, bt_view)
    objective = build(spread_bert, loss="bt", bt_view=bt_view)
    objective.eval()
    loss = objective.loss(ROWS)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()
    grads = dict(objective.encoder.model.encoder.named_parameters())
    ours = torch.cat([grads[name].grad.flatten() for name in expected_grads])
    reference = torch.cat([grad.flatten() for grad in expected_grads.values()])
    assert (ours - reference).norm() < 1e-4 * reference.norm()


def test_contrastive_bt_takes_its_positive_from_the_back_translation(spread_bert):
    """Another back-translation in the rows gives another loss, the reference's for the new rows: a loss that
    ignored the back-translation column would give the same figure twice."""
    rewritten = [(s, f"In short, {b.lower()}", b2) for s, b, b2 in ROWS]
    objective = build(spread_bert, loss="bt", bt_view="bt1")
    objective.eval()
    original, changed = objective.loss(ROWS).item(), objective.loss(rewritten).item()
    assert changed != pytest.approx(original, rel=0.01)
    assert changed == pytest.approx(reference_contrastive_bt(spread_bert, rewritten)[0].item(), rel=1e-5)


def test_contrastive_bt_adds_lambda_times_the_distance_to_bert_f(spread_bert):
    objective = build(spread_bert, loss="bt", bt_view="bt1", reg_lambda=0.0)
    optimizer = torch.optim.SGD([p for p in objective.parameters() if p.requires_grad], lr=1e-2)
    objective.loss(ROWS).backward()
    optimizer.step()
    distance = sum(((p.detach() - q) ** 2).sum().item()
                   for p, q in zip(objective.encoder.model.parameters(), objective.fixed.parameters()))
    assert distance > 0
    objective.eval()
    without = objective.loss(ROWS).item()
    objective.reg_lambda = 2.0
    assert objective.loss(ROWS).item() - without == pytest.approx(2.0 * distance, rel=1e-4)


def test_contrastive_bt_builds_no_table_of_bert_f_views(tiny_bert, bt_file, monkeypatch):
    config = get_method("sg").resolve({"model": tiny_bert, "loss": "bt", "bt_view": "bt1", "bt_file": bt_file})
    assert get_method("sg").frozen_table(config) is None  # what `sweep plan` sizes
    objective = build(tiny_bert, loss="bt", bt_view="bt1")
    monkeypatch.setattr(objective, "compute_views", lambda texts: pytest.fail(f"BERT_F's views of {texts} computed"))
    objective.prepare(ROWS)
    objective.loss(ROWS).backward()
    assert objective.table is None and objective.statistics() == {}


def test_a_contrastive_bt_trial_trains_on_the_files_rows(tiny_bert, bt_file, use_tiny_sts):
    final = run_trial(bt_trial(tiny_bert, bt_file))
    assert final["steps"] == 3  # one epoch of the file's 12 rows
    assert "frozen_outputs_computed" not in final  # no table of BERT_F's views was built or read


def test_a_contrastive_bt_trial_resumes_exactly(tiny_bert, bt_file, use_tiny_sts, tmp_path):
    from tests.test_checkpoint import BASE, assert_resumes_exactly

    config = {**BASE, **bt_trial(tiny_bert, bt_file, bt_view="bt2", eval_every=1), "epochs": 2}  # 2 x 3 steps
    assert_resumes_exactly(config, tmp_path / "checkpoints")


def test_the_backtranslation_file_has_a_row_per_corpus_sentence_duplicates_included():
    """Contrastive (BT) is Contrastive (SG) but for its positives (Appendix A.2): its examples, the file's rows,
    are the corpus's, duplicates included (STS-B's 17,256 sentences, not its 15,457 distinct ones); each distinct
    sentence is translated once."""
    from trainers.data.backtranslate import corpus_rows

    translated: list[str] = []

    def fake_translate(sentences, source, target):
        translated.extend(sentences if source == "en" else [])
        return [f"{s}|{target}" for s in sentences]

    corpus = ["A cat sat.", "Dogs run.", "A cat sat.", "Birds fly.", "Dogs run."]
    rows = corpus_rows(corpus, ["de", "fr"], fake_translate)
    assert [row[0] for row in rows] == corpus
    assert rows[2] == rows[0] == ("A cat sat.", "A cat sat.|de|en", "A cat sat.|fr|en")
    assert translated == ["A cat sat.", "Dogs run.", "Birds fly."] * 2  # once per pivot, distinct sentences only


def test_backtranslate_refuses_a_model_it_cannot_load_offline_with_exit_2_and_no_traceback(tmp_path):
    """`python -m trainers.data.backtranslate` where a translation model is neither on a reachable hub, nor in the
    Hugging Face cache, nor a local folder: one line on stderr naming the model and where it was looked for, exit
    code 2, no traceback, and no file written."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A cat sat.\nDogs run.\n")
    out = tmp_path / "bt.tsv"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf-home"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, "-m", "trainers.data.backtranslate", "--corpus", str(corpus),
                           "--out", str(out), "--model-template", "no-such-org/opus-mt-{source}-{target}"],
                          capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "'no-such-org/opus-mt-en-de'" in done.stderr
    assert "--model-template" in done.stderr and "HF_HUB_OFFLINE" in done.stderr and "local folder" in done.stderr
    assert done.stdout == "" and not out.exists()


def test_hf_translator_loads_every_round_trip_model_before_translating(monkeypatch):
    """The four models of two pivots are loaded before any sentence is translated, so that a missing fr -> en model
    is refused (a DataError naming it) before the de round trip's work; transformers' other errors pass through."""
    import transformers

    from trainers.data.backtranslate import hf_translator
    from trainers.data.sources import DataError

    loaded: list[str] = []

    def fake_pipeline(task, model):
        if model.endswith("fr-en"):
            raise OSError(f"{model} is not a local folder and is not a valid model identifier")
        loaded.append(model)
        return lambda sentences, batch_size: [{"translation_text": f"{s}|{model}\t"} for s in sentences]

    monkeypatch.setattr(transformers, "pipeline", fake_pipeline)
    with pytest.raises(DataError, match=r"cannot load the fr -> en translation model 'org/m-fr-en' \(org/m-fr-en is "):
        hf_translator("org/m-{source}-{target}", ["de", "fr"])
    assert loaded == ["org/m-en-de", "org/m-de-en", "org/m-en-fr"]

    monkeypatch.setattr(transformers, "pipeline", lambda task, model: fake_pipeline(task, model.replace("fr", "it")))
    translate = hf_translator("org/m-{source}-{target}", ["de", "fr"])
    assert translate(["A cat sat."], "en", "de") == ["A cat sat.|org/m-en-de"]

    def broken_pipeline(task, model):
        raise RuntimeError("a bug, not a missing model")

    monkeypatch.setattr(transformers, "pipeline", broken_pipeline)
    with pytest.raises(RuntimeError, match="a bug"):
        hf_translator("org/m-{source}-{target}", ["de", "fr"])


MULTILINGUAL_EVALUATIONS = [{"suite": "sts"}, {"suite": "multilingual_sts"}]


@pytest.mark.parametrize("spec_file, changed", [
    ("sg_multilingual.yaml", {"model": "bert-base-multilingual-cased", "evaluations": MULTILINGUAL_EVALUATIONS}),
    ("sg_roberta.yaml", {"model": "roberta-base"}),
])
def test_the_other_models_contrastive_bt_rows_are_table_7s_on_their_model(spec_file, changed):
    """SG-BERT Tables 2-3 (MBERT, tested on other languages too) and 11 (RoBERTa): the same baseline on the
    same English back-translations (Appendix A.2), so each row differs from Table 7's in its model (and its
    tests) alone and reads the same file."""
    table7 = row_configs(SPECS / "sg_bt.yaml")["Contrastive (BT)"]
    other = row_configs(SPECS / spec_file)["Contrastive (BT)"]
    assert differing_knobs(other, table7) == changed
    assert other["bt_file"].endswith("data/bt_stsb.tsv")
