from pathlib import Path

import numpy as np
import pytest

from trainers.data.sources import (
    ALL_FILES,
    SHIPPED_STS_DIR,
    DataError,
    load_corpus,
    load_sts_local,
    read_sts_tsv,
    read_text_corpus,
    sts_from_hub_rows,
)

STANDARD_ROWS = {
    "stsb-train": 5749, "stsb-dev": 1500, "stsb-test": 1379, "sickr-train": 4500, "sickr-dev": 500,
    "sickr-test": 4927, "sts12-test": 3108, "sts13-test": 1500, "sts14-test": 3750, "sts15-test": 3000,
    "sts16-test": 1186,
}


def test_shipped_copy_has_standard_counts_and_provenance():
    sets = load_sts_local()
    assert {name: len(s) for name, s in sets.items()} == STANDARD_ROWS
    assert (SHIPPED_STS_DIR / "SOURCES.md").is_file()
    assert sets["sts12-test"].subsets.count("MSRpar") == 750
    assert set(sets["sts13-test"].subsets) == {"FNWN", "headlines", "OnWN"}
    sick = sets["sickr-test"].scores
    assert sick.min() >= 1 and sick.max() <= 5


def test_quotes_are_kept_verbatim():
    # STS14 row 2's first sentence starts with a double quote: no quoting rules apply.
    assert load_sts_local(["sts14-test"])["sts14-test"].sentence1[1] == '"Then the captain was gone.'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stsb-dev.tsv"
    path.write_text(text, encoding="utf-8")
    return path


HEADER = "sentence1\tsentence2\tscore\tsubset\n"


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("", "empty file"),
        ("sentence1\tsentence2\tsubset\nA\tB\t\n", ":1: header lacks column(s) ['score']"),
        (HEADER + "A\tB\t2.5\t\nC\tD\thigh\t\n", ":3: column 'score': expected a number in [0.0, 5.0], got 'high'"),
        (HEADER + "A\tB\t7.5\t\n", ":2: column 'score': expected a number in [0.0, 5.0], got 7.5"),
        (HEADER + "A\tB\t2.5\n", ":2: expected 4 tab-separated fields, got 3"),
        (HEADER, "no sentence pairs"),
    ],
)
def test_bad_input_names_file_line_and_expectation(tmp_path, body, fragment):
    path = write(tmp_path, body)
    with pytest.raises(DataError) as error:
        read_sts_tsv(path)
    assert str(path) in str(error.value) and fragment in str(error.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match="stsb-dev.tsv: file not found"):
        load_sts_local(["stsb-dev"], tmp_path)


def test_sick_scores_below_one_rejected(tmp_path):
    path = tmp_path / "sickr-test.tsv"
    path.write_text(HEADER + "A\tB\t0.5\t\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"\[1.0, 5.0\]"):
        read_sts_tsv(path)


def test_hub_rows_map_to_the_same_records_as_the_local_file():
    local = load_sts_local(["stsb-dev"])["stsb-dev"]
    # The mteb/stsbenchmark-sts rows: sentence1, sentence2 and a float score (plus extra columns).
    rows = [
        {"split": "dev", "genre": "x", "sentence1": a, "sentence2": b, "score": float(s)}
        for a, b, s in zip(local.sentence1, local.sentence2, local.scores)
    ]
    from_hub = sts_from_hub_rows("stsb-dev", rows, "fixture")
    assert from_hub.sentence1 == local.sentence1 and from_hub.sentence2 == local.sentence2
    np.testing.assert_array_equal(from_hub.scores, local.scores)


def test_hub_rows_missing_column_is_named():
    with pytest.raises(DataError, match="fixture row 0: lacks column"):
        sts_from_hub_rows("stsb-dev", [{"sentence1": "a", "sentence2": "b"}], "fixture")


def test_named_corpora_counts():
    sets = load_sts_local()
    stsb = load_corpus("stsb_sentences")
    assert len(stsb) == 2 * (5749 + 1500 + 1379)
    everything = load_corpus("sts_all_sentences")
    assert len(everything) == 2 * sum(len(s) for s in sets.values()) == 62198
    # ConSERT counts 89,192 texts: ours plus both sentences of the 5,500 + 7,997
    # STS15/16 pairs without a gold score, which this data leaves out (SOURCES.md).
    assert len(everything) + 2 * (5500 + 7997) == 89192
    assert stsb[0] == sets["stsb-train"].sentence1[0] and stsb[1] == sets["stsb-train"].sentence2[0]


def test_text_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("first sentence\n\n  second one  \n", encoding="utf-8")
    assert load_corpus(str(path)) == ["first sentence", "second one"]
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(DataError, match="empty.txt: no sentences"):
        read_text_corpus(tmp_path / "empty.txt")
    with pytest.raises(DataError, match="nowhere.txt: file not found"):
        load_corpus(str(tmp_path / "nowhere.txt"))


def test_all_files_listed():
    assert set(ALL_FILES) == set(STANDARD_ROWS)
