"""STS evaluation sets and training corpora.

The seven STS sets come from a folder of TSVs (the project's own copy in
``trainers/data/sts_data``, see its SOURCES.md) or from the Hugging Face hub's
``mteb/*-sts`` datasets; both paths produce the same :class:`STSSet` records.
Training corpora are named sources (see :func:`load_corpus`); SCT's back-translation
views read a TSV of their own (:func:`read_backtranslations`). Both kinds of TSV are
read by :func:`read_tsv`; every message names the file and the line.
"""

from __future__ import annotations

import csv
import functools
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

SHIPPED_STS_DIR = Path(__file__).resolve().parent / "sts_data"
STS_DIR_ENV = "STS_DATA_DIR"

TEST_SETS = ("stsb", "sickr", "sts12", "sts13", "sts14", "sts15", "sts16")
"""The seven test sets, in the order the papers print them."""
DEV_SET = "stsb-dev"
SICKR_DEV_SET = "sickr-dev"
ALL_FILES = ("stsb-train", "stsb-dev", "stsb-test", "sickr-train", "sickr-dev", "sickr-test") + tuple(
    f"sts1{y}-test" for y in range(2, 7)
)
COLUMNS = ("sentence1", "sentence2", "score", "subset")
BT_COLUMNS = ("sentence", "bt1", "bt2")
"""The columns of SCT's back-translation file: each sentence and its two round trips."""

# Hub dataset and split for each file. The hub copies carry no subset column,
# so STS12-16 from the hub support only the 'all' aggregation.
HUB_DATASETS = {
    "stsb-train": ("mteb/stsbenchmark-sts", "train"),
    "stsb-dev": ("mteb/stsbenchmark-sts", "validation"),
    "stsb-test": ("mteb/stsbenchmark-sts", "test"),
    "sickr-test": ("mteb/sickr-sts", "test"),
    **{f"sts1{y}-test": (f"mteb/sts1{y}-sts", "test") for y in range(2, 7)},
}

TARGET_FILES = {"stsb": ("stsb-train", "stsb-dev", "stsb-test"), "sickr": ("sickr-train", "sickr-dev", "sickr-test"),
                **{f"sts1{y}": (f"sts1{y}-test",) * 3 for y in range(2, 7)}}
"""BERT-flow's "target" corpus of each test set (Li et al. 2020, Table 1; ConSERT's Tables 2 and 3 copy its rows):
what its authors' ``run_siamese.py --use_full_for_training`` reads, the train, dev and test splits. SICK-R's are
train, trial and test; STS12-16 have one ``full.txt``, which it reads as each of the three, so each pair three
times."""
TARGET_CORPORA = {f"{name}_target": name for name in TARGET_FILES}
"""``train_corpus`` name -> the test set whose BERT-flow target corpus it is."""

NAMED_CORPORA = ("stsb_sentences", "sts_all_sentences", "nli_sentences", *TARGET_CORPORA)


class DataError(ValueError):
    """Bad input data; the message names the file, the line and what was expected."""


@dataclass(frozen=True)
class STSSet:
    """Sentence pairs with gold similarity scores; ``subsets`` is '' where a set has none."""

    name: str
    sentence1: tuple[str, ...]
    sentence2: tuple[str, ...]
    scores: np.ndarray
    subsets: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.scores)

    def head(self, n: int) -> "STSSet":
        """The first ``n`` pairs (all of them when n is 0)."""
        if n <= 0 or n >= len(self):
            return self
        return STSSet(self.name, self.sentence1[:n], self.sentence2[:n], self.scores[:n], self.subsets[:n])


def score_range(name: str) -> tuple[float, float]:
    return (1.0, 5.0) if name.startswith("sickr") else (0.0, 5.0)


def _parse_score(text: str, where: str, name: str) -> float:
    low, high = score_range(name)
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{where}: column 'score': expected a number in [{low}, {high}], got {text!r}") from None
    if not low <= value <= high:
        raise DataError(f"{where}: column 'score': expected a number in [{low}, {high}], got {value}")
    return value


def read_tsv(path: Path, columns: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """The header and the body rows of a tab-separated file without quoting, the format of the
    project's data files; ``columns`` (what the file should hold) go into the messages."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a TSV with columns {', '.join(columns)})")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise DataError(f"{path}: empty file (expected a header line with columns {', '.join(columns)})")
    return rows[0], rows[1:]


def located_rows(path: Path, header: Sequence[str], body: Sequence[list[str]]) -> Iterator[tuple[str, list[str]]]:
    """``(FILE:LINE, row)`` for each body row, each checked, as it comes, to have the header's number of
    fields: the first bad line of a file is the one named."""
    for number, row in enumerate(body, start=2):
        where = f"{path}:{number}"
        if len(row) != len(header):
            raise DataError(f"{where}: expected {len(header)} tab-separated fields, got {len(row)}")
        yield where, row


def read_sts_tsv(path: str | Path, name: str | None = None) -> STSSet:
    """Read one STS TSV (header ``sentence1 sentence2 score subset``, no quoting)."""
    path = Path(path)
    name = name or path.stem
    header, body = read_tsv(path, COLUMNS)
    missing = [c for c in COLUMNS[:3] if c not in header]
    if missing:
        raise DataError(f"{path}:1: header lacks column(s) {missing} (expected {', '.join(COLUMNS)}, got {header})")
    if not body:
        raise DataError(f"{path}: no sentence pairs after the header")
    index = {column: header.index(column) for column in header}
    s1, s2, scores, subsets = [], [], [], []
    for where, row in located_rows(path, header, body):
        s1.append(row[index["sentence1"]])
        s2.append(row[index["sentence2"]])
        scores.append(_parse_score(row[index["score"]], where, name))
        subsets.append(row[index["subset"]] if "subset" in index else "")
    return STSSet(name, tuple(s1), tuple(s2), np.asarray(scores, dtype=np.float64), tuple(subsets))


def read_backtranslations(path: str | Path) -> list[tuple[str, str, str]]:
    """(sentence, bt1, bt2) rows of SCT's back-translation TSV, as
    ``python -m trainers.data.backtranslate`` writes it."""
    path = Path(path)
    header, body = read_tsv(path, BT_COLUMNS)
    if tuple(header) != BT_COLUMNS:
        expected = "\t".join(BT_COLUMNS)
        raise DataError(f"{path}:1: expected the header {expected!r}")
    return [tuple(row) for _, row in located_rows(path, header, body)]


def sts_dir() -> Path:
    return Path(os.environ.get(STS_DIR_ENV, SHIPPED_STS_DIR))


def load_sts_local(names: Iterable[str] = ALL_FILES, directory: str | Path | None = None) -> dict[str, STSSet]:
    folder = Path(directory) if directory is not None else sts_dir()
    return {name: _read_sts_once(folder / f"{name}.tsv", name) for name in names}


def _read_sts_once(path: Path, name: str) -> STSSet:
    """:func:`read_sts_tsv`, read once per process while the file is unchanged (the next trial of a reused
    worker finds its evaluation sets in memory)."""
    stat = path.stat() if path.is_file() else None
    return _read_sts_file(str(path), name, stat.st_mtime_ns if stat else 0, stat.st_size if stat else -1)


@functools.lru_cache(maxsize=64)
def _read_sts_file(path: str, name: str, mtime_ns: int, size: int) -> STSSet:
    return read_sts_tsv(path, name)


def sts_from_hub_rows(name: str, rows: Iterable[Mapping[str, Any]], origin: str) -> STSSet:
    """Map rows of an ``mteb/*-sts`` split (sentence1, sentence2, score) to an :class:`STSSet`."""
    s1, s2, scores = [], [], []
    for number, row in enumerate(rows):
        where = f"{origin} row {number}"
        missing = [c for c in COLUMNS[:3] if c not in row]
        if missing:
            raise DataError(f"{where}: lacks column(s) {missing}")
        s1.append(str(row["sentence1"]).strip())
        s2.append(str(row["sentence2"]).strip())
        scores.append(_parse_score(str(row["score"]), where, name))
    if not scores:
        raise DataError(f"{origin}: no rows")
    return STSSet(name, tuple(s1), tuple(s2), np.asarray(scores, dtype=np.float64), ("",) * len(scores))


def load_sts_hub(names: Iterable[str] = tuple(HUB_DATASETS)) -> dict[str, STSSet]:
    import datasets

    loaded = {}
    for name in names:
        if name not in HUB_DATASETS:
            raise DataError(f"{name}: not available from the hub (available: {sorted(HUB_DATASETS)})")
        dataset_id, split = HUB_DATASETS[name]
        rows = datasets.load_dataset(dataset_id, split=split)
        loaded[name] = sts_from_hub_rows(name, rows, f"{dataset_id}[{split}]")
    return loaded


def sts_problems(names: Iterable[str], directory: str | Path | None = None) -> list[str]:
    """Why each named local STS file cannot be read (file, line and what was expected), read once per
    version of the file: a sweep checks its evaluation sets before Ray starts."""
    folder = Path(directory) if directory is not None else sts_dir()
    problems = []
    for name in names:
        path = folder / f"{name}.tsv"
        stat = path.stat() if path.is_file() else None
        problem = _sts_file_problem(str(path), name, stat.st_mtime_ns if stat else 0, stat.st_size if stat else -1)
        if problem:
            problems.append(problem)
    return problems


@functools.lru_cache(maxsize=256)
def _sts_file_problem(path: str, name: str, mtime_ns: int, size: int) -> str | None:
    try:
        read_sts_tsv(path, name)
    except DataError as error:
        return str(error)
    return None


def load_sts(source: str = "local", names: Iterable[str] = ALL_FILES) -> dict[str, STSSet]:
    """The named STS sets from ``source`` ('local' or 'hub')."""
    if source == "local":
        return load_sts_local(names)
    if source == "hub":
        return load_sts_hub(names)
    raise ValueError(f"sts_source must be 'local' or 'hub', got {source!r}")


def evaluation_names(selection_metric: str = "stsb") -> tuple[str, ...]:
    """Files the evaluator needs: the dev sets ``selection_metric`` scores (STS-B dev; with 'avg_sts' SICK-R dev
    too) plus the seven test sets."""
    dev = (DEV_SET, SICKR_DEV_SET) if selection_metric == "avg_sts" else (DEV_SET,)
    return dev + tuple(f"{name}-test" for name in TEST_SETS)


def _pairs(sets: Iterable[STSSet]) -> list[tuple[str, str]]:
    return [pair for sts in sets for pair in zip(sts.sentence1, sts.sentence2)]


def _sentences(sets: Iterable[STSSet]) -> list[str]:
    return [s for pair in _pairs(sets) for s in pair]


def pair_sentences(name: str, sts_source: str = "local") -> list[str]:
    """Both sentences of every pair of the STS file ``name``, repeats kept (as its evaluation encodes them)."""
    return _sentences(load_sts(sts_source, (name,)).values())


def read_text_corpus(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a text file with one sentence per line)")
    sentences = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as error:
            raise DataError(f"{path}:{number}: not UTF-8 text ({error.reason} at byte {error.start})") from None
        if line:
            sentences.append(line)
    if not sentences:
        raise DataError(f"{path}: no sentences (expected one sentence per line)")
    return sentences


def load_nli_sentences() -> list[str]:
    """SNLI+MNLI sentences as SimCSE prepared them (hub only)."""
    import datasets

    rows = datasets.load_dataset(
        "princeton-nlp/datasets-for-simcse", data_files="nli_for_simcse.csv", split="train"
    )
    return list(dict.fromkeys(s for column in ("sent0", "sent1", "hard_neg") for s in rows[column]))


def load_corpus(corpus: str, sts_source: str = "local") -> list[str]:
    """Training sentences for the ``train_corpus`` knob.

    ``stsb_sentences``: both sentences of every pair of STS-B train/dev/test,
    labels dropped (SG-BERT's and BERT-flow's setting). ``sts_all_sentences``:
    the same over all seven sets and their splits (ConSERT's setting: 62,198
    texts here; ConSERT counts 89,192 because it also keeps both sentences of
    the 13,497 STS15/16 pairs that have no gold score, which the shipped data
    leaves out, as SentEval does). ``<set>_target`` (``sickr_target``, ``sts12_target``, ...): BERT-flow's
    target corpus of that test set (:data:`TARGET_FILES`). Pairs
    are kept as given, duplicates included, as those papers do.
    ``nli_sentences``: SimCSE's NLI sentences, from the hub. Anything else is
    the path of a text file with one sentence per line.
    """
    if corpus in CORPUS_FILES:
        return _sentences(_corpus_sets(corpus, sts_source))
    if corpus == "nli_sentences":
        return load_nli_sentences()
    return read_text_corpus(corpus)


def load_corpus_pairs(corpus: str, sts_source: str = "local") -> list[tuple[str, str]]:
    """The (sentence 1, sentence 2) pairs of a named STS corpus (:data:`CORPUS_FILES`), in the order
    :func:`load_corpus` gives their sentences: what BERT-flow's authors batch (``flow_batch`` 'pairs')."""
    if corpus not in CORPUS_FILES:
        raise DataError(f"{corpus!r} has no sentence pairs: only the STS corpora {list(CORPUS_FILES)} do")
    return _pairs(_corpus_sets(corpus, sts_source))


def _corpus_sets(corpus: str, sts_source: str) -> list[STSSet]:
    """The STS sets a named corpus is made of, in order, a file read twice given twice (a target corpus's)."""
    names = tuple(HUB_DATASETS) if corpus == "sts_all_sentences" and sts_source != "local" else CORPUS_FILES[corpus]
    sets = load_sts(sts_source, tuple(dict.fromkeys(names)))
    return [sets[name] for name in names]


CORPUS_FILES = {"stsb_sentences": TARGET_FILES["stsb"], "sts_all_sentences": ALL_FILES,
                **{corpus: TARGET_FILES[name] for corpus, name in TARGET_CORPORA.items()}}
"""The STS files each named STS corpus is made of, in order: the corpora whose sentences come in pairs."""


def is_missing_file(corpus: str) -> bool:
    """Whether ``corpus`` names a text file that is not there (it is no named corpus)."""
    return corpus not in NAMED_CORPORA and not Path(corpus).is_file()


def corpus_problem(corpus: str, sts_source: str = "local") -> str | None:
    """Why ``corpus`` cannot be loaded, checked before a sweep starts (a file corpus is read)."""
    if corpus in CORPUS_FILES:
        if sts_source == "local":
            return "; ".join(sts_problems(tuple(dict.fromkeys(CORPUS_FILES[corpus])))) or None
        absent = [] if corpus == "sts_all_sentences" else sorted(set(CORPUS_FILES[corpus]) - set(HUB_DATASETS))
        return f"{corpus!r} reads {absent}, which the hub's STS sets lack: set sts_source 'local'" if absent else None
    if corpus == "nli_sentences":
        return None if hub_reachable() else "'nli_sentences' needs the Hugging Face hub, which cannot be reached"
    if is_missing_file(corpus):
        return f"{corpus!r} is neither a named corpus {list(NAMED_CORPORA)} nor an existing text file"
    try:
        read_text_corpus(corpus)
    except DataError as error:
        return str(error)
    return None


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers (False when HF_HUB_OFFLINE is set)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return False
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(endpoint, timeout=timeout)
    except OSError:
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class DataSource:
    """Where a data set is read from: a local folder named by the environment variable ``env`` (laid out as
    ``layout``, docs/evaluations.md) or, where that variable is unset and ``hub`` names datasets, the Hugging
    Face hub. ``module`` reads it: ``load_local(folder, *which)`` and ``load_hub(*which)``; ``which`` (GLUE's
    tasks) goes to the loader."""

    module: str
    env: str = ""
    layout: str = ""
    hub: tuple[str, ...] = ()

    def implementation(self):
        return importlib.import_module(self.module)

    def folder(self) -> Path | None:
        value = os.environ.get(self.env, "") if self.env else ""
        return Path(value) if value else None

    def data_problem(self, *which: Any) -> str | None:
        """Why the data cannot be read here (None when it can): the folder is read at plan time, as the STS
        files are; the hub only when no folder is given."""
        folder = self.folder()
        if folder is not None:
            try:
                self.implementation().load_local(folder, *which)
            except (ValueError, OSError) as error:  # DataError, and a file that is not UTF-8
                return f"${self.env}={folder}: {error}"
            return None
        if not self.hub:
            return (f"needs its data in a local folder: set ${self.env} to a folder laid out as {self.layout} "
                    "(no Hugging Face hub copy is known; see docs/evaluations.md)")
        if not hub_reachable():
            return (f"needs the Hugging Face hub datasets {list(self.hub)}, which cannot be reached (offline); "
                    f"or set ${self.env} to a folder laid out as {self.layout} (docs/evaluations.md)")
        return None

    def load(self, *which: Any) -> Any:
        folder = self.folder()
        module = self.implementation()
        return module.load_local(folder, *which) if folder is not None else module.load_hub(*which)
