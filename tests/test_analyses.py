"""reports.analyses on the tiny BERT: SG-BERT's t-SNE, ConSERT's gold-vs-cosine, SCT's Table 5; and
WordNet read from a folder (Debian's wordnet-base)."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from reports import analyses
from reports.analyses import main
from trainers.data.sources import load_sts_local
from trainers.models.encoder import SentenceEncoder
from trainers.training.checkpoint import FinalRecord


def levenshtein(a: str, b: str) -> int:
    """The textbook dynamic programme, slow and obvious."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def cosine(encoder: SentenceEncoder, left: list[str], right: list[str]) -> np.ndarray:
    a, b = encoder.encode(left).double().numpy(), encoder.encode(right).double().numpy()
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture
def exported(tiny_bert, tmp_path):
    """A folder as `sweep export` writes it: the model and trial.json (cls pooling, an identity)."""
    folder = tmp_path / "exported"
    shutil.copytree(tiny_bert, folder)
    FinalRecord({"pooling": "cls", "pooling_layer": -1}, {}, True,
                {"sweep": "demo", "row": "SG-OPT", "seed": "3"}).write(folder)
    return folder


def test_tsne_draws_20_positive_and_20_negative_pairs(tiny_bert, tmp_path):
    assert main(["tsne", "--encoder", tiny_bert, "--pooling", "cls", "--out", str(tmp_path)]) == 0
    [csv] = tmp_path.glob("tsne-*.csv")
    assert csv.with_suffix(".png").stat().st_size > 0 and csv.with_suffix(".tex").is_file()
    points = pd.read_csv(csv, keep_default_na=False)
    assert len(points) == 80 and points["pair"].nunique() == 40
    dev = load_sts_local(["stsb-dev"])["stsb-dev"]
    for kind, score in (("positive", 5.0), ("negative", 0.0)):
        rows = points[points["kind"] == kind]
        assert rows["pair"].nunique() == 20
        assert all(dev.scores[p] == score for p in rows["pair"])
        side1 = rows[rows["side"] == 1]
        assert list(side1["sentence"]) == [dev.sentence1[p] for p in side1["pair"]]
    # The pair cosine is the encoder's, computed here independently.
    encoder = SentenceEncoder.from_pretrained(tiny_bert, "cls")
    ordered = points.sort_values(["pair", "side"])
    expected = cosine(encoder, list(ordered["sentence"][0::2]), list(ordered["sentence"][1::2]))
    np.testing.assert_allclose(ordered["pair_cosine"][0::2], expected, rtol=1e-5)
    markdown = csv.with_suffix(".md").read_text()
    assert f"| positive | 20 | {expected[ordered['kind'][0::2].values == 'positive'].mean():.3f} |" in markdown
    # Same seed, same pairs and points; another seed, other pairs.
    again = tmp_path / "again"
    main(["tsne", "--encoder", tiny_bert, "--pooling", "cls", "--out", str(again)])
    pd.testing.assert_frame_equal(points, pd.read_csv(next(again.glob("tsne-*.csv")), keep_default_na=False))
    other = tmp_path / "other"
    main(["tsne", "--encoder", tiny_bert, "--pooling", "cls", "--seed", "1", "--out", str(other)])
    assert set(pd.read_csv(next(other.glob("tsne-*.csv")))["pair"]) != set(points["pair"])


def test_gold_cosine_panels_carry_each_encoders_spearman(tiny_bert, exported, tmp_path, use_tiny_sts, monkeypatch):
    figures = []
    monkeypatch.setattr(analyses, "save", lambda figure, path: figures.append(figure) or path)
    assert main(["gold-cosine", "--encoder", tiny_bert, "--encoder", str(exported), "--pooling", "max",
                 "--pooling", "mean", "--out", str(tmp_path)]) == 0  # the export keeps its own (cls)
    sts = load_sts_local(["stsb-test"])["stsb-test"]
    [figure] = figures
    titles = [ax.get_title() for ax in figure.axes]
    for title, encoder in zip(titles, (SentenceEncoder.from_pretrained(tiny_bert, "max"),
                                       SentenceEncoder.from_pretrained(tiny_bert, "cls"))):
        predicted = cosine(encoder, list(sts.sentence1), list(sts.sentence2))
        assert title.endswith(f"Spearman x 100 = {100 * spearmanr(predicted, sts.scores).statistic:.2f}")
        assert len(figure.axes[titles.index(title)].collections[0].get_offsets()) == len(sts.scores)
    assert titles[1].startswith("demo SG-OPT seed 3")  # the export's identity names its panel
    [markdown] = tmp_path.glob("gold-cosine-*-vs-demo_SG-OPT_seed_3.md")
    assert markdown.read_text().count("| 40 |") == 2


def test_gold_cosine_refuses_three_encoders(tiny_bert, tmp_path, capsys):
    assert main(["gold-cosine", "--encoder", tiny_bert, "--encoder", tiny_bert, "--encoder", tiny_bert,
                 "--out", str(tmp_path)]) == 2
    assert "one or two --encoder" in capsys.readouterr().err
    assert main(["gold-cosine", "--encoder", tiny_bert, "--encoder", tiny_bert, "--pooling", "cls", "--pooling", "mean",
                 "--pooling", "max", "--out", str(tmp_path)]) == 2
    assert "--pooling: give one, or one per --encoder (2); got 3" in capsys.readouterr().err


SYNONYMS = {"man": ["guy"], "woman": ["lady"], "dog": ["hound"]}


def test_augmentation_table_matches_an_independent_count(tiny_bert, tiny_masked_lm, tmp_path, monkeypatch):
    monkeypatch.setattr(analyses, "wordnet_problem", lambda: None)
    monkeypatch.setattr("trainers.data.wordnet.wordnet_synonyms", lambda word: SYNONYMS.get(word.lower(), []))
    bt_file = tmp_path / "bt.tsv"
    bt_rows = [("A man is playing a flute.", "A man plays the flute.", "A man is playing flute."),
               ("A dog runs.", "A dog is running.", "The dog runs.")]
    bt_file.write_text("sentence\tbt1\tbt2\n" + "".join("\t".join(r) + "\n" for r in bt_rows))
    corpus = tmp_path / "corpus.txt"
    sentences = ["A man is eating.", "A woman is eating.", "Nothing to change here.", "The dog barks."]
    corpus.write_text("\n".join(sentences) + "\n")
    assert main(["augmentations", "--encoder", tiny_bert, "--corpus", str(corpus), "--view", "synonym",
                 "--view", "mlm", "--mlm-model", tiny_masked_lm, "--view", "bt", "--bt-file", str(bt_file),
                 "--out", str(tmp_path)]) == 0
    rows = pd.read_csv(next(tmp_path.glob("sct-table5-*.csv"))).set_index("view")
    encoder = SentenceEncoder.from_pretrained(tiny_bert, "mean")
    # The synonym view replaces one word that has synonyms; a sentence without any stays as it was.
    synonyms, changed = rows.loc["synonym"], ["A guy is eating.", "A lady is eating.", sentences[2], "The hound barks."]
    assert synonyms["pairs"] == 4 and synonyms["unchanged"] == 1
    distances = [levenshtein(a, b) for a, b in zip(sentences, changed)]
    assert synonyms["dissim_mean"] == pytest.approx(np.mean(distances))
    assert synonyms["dissim_std"] == pytest.approx(np.std(distances, ddof=1))
    assert synonyms["cosine"] == pytest.approx(cosine(encoder, sentences, changed).mean(), rel=1e-5)
    # BT pairs each original with both of its round trips.
    bt = rows.loc["bt"]
    originals, trips = [r[0] for r in bt_rows] * 2, [r[1] for r in bt_rows] + [r[2] for r in bt_rows]
    assert bt["pairs"] == 4
    assert bt["dissim_mean"] == pytest.approx(np.mean([levenshtein(a, b) for a, b in zip(originals, trips)]))
    assert bt["cosine"] == pytest.approx(cosine(encoder, originals, trips).mean(), rel=1e-5)
    # The MLM view rewrites at least one token of every sentence: no pair is unchanged.
    assert rows.loc["mlm", "pairs"] == 4 and rows.loc["mlm", "unchanged"] == 0 and rows.loc["mlm", "dissim_mean"] > 0
    markdown = next(tmp_path.glob("sct-table5-*.md")).read_text()
    assert "6.59 ± 4.30 | 0.94 / 0.97" in markdown and "12.32 ± 9.31 | 0.98 / 0.97" in markdown


def test_augmentations_refuse_views_they_cannot_make(tiny_bert, tmp_path, capsys):
    code = main(["augmentations", "--encoder", tiny_bert, "--view", "mlm", "--view", "bt",
                 "--bt-file", str(tmp_path / "missing.tsv"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "view mlm: --mlm-model:" in err and "view bt: --bt-file:" in err and "missing.tsv" in err
    assert "Traceback" not in err and not list(tmp_path.glob("sct-table5-*"))


def test_an_encoder_that_is_not_there_is_refused(tmp_path, capsys):
    assert main(["tsne", "--encoder", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "--encoder:" in capsys.readouterr().err


@pytest.fixture
def fresh_wordnet(monkeypatch):
    from trainers.data import wordnet

    wordnet.wordnet_reader.cache_clear()
    yield wordnet
    wordnet.wordnet_reader.cache_clear()


@pytest.mark.skipif(not (analyses.Path("/usr/share/wordnet") / "data.noun").is_file(),
                    reason="Debian's wordnet-base is not installed here")
def test_wordnet_is_read_from_debians_folder(fresh_wordnet, monkeypatch):
    monkeypatch.delenv(fresh_wordnet.WORDNET_DIR_ENV, raising=False)
    assert fresh_wordnet.wordnet_problem() is None
    assert {"beneficial", "dependable"} <= set(fresh_wordnet.wordnet_synonyms("good"))
    assert fresh_wordnet.wordnet_reader().synsets("dog")[0].lexname() == "noun.animal"  # the given lexnames


def test_a_wordnet_dir_without_wordnet_is_named(fresh_wordnet, monkeypatch, tmp_path):
    monkeypatch.setenv(fresh_wordnet.WORDNET_DIR_ENV, str(tmp_path))
    problem = fresh_wordnet.wordnet_problem()
    assert problem and f"WORDNET_DIR={tmp_path}" in problem and "wordnet-base" in problem


def test_tsne_refuses_more_pairs_than_the_set_has(tiny_bert, tmp_path, capsys):
    assert main(["tsne", "--encoder", tiny_bert, "--pairs", "1000", "--out", str(tmp_path)]) == 2
    assert "has only" in capsys.readouterr().err
