"""Shared fixtures and helpers, each defined once: a tiny randomly initialised BERT (and RoBERTa) saved as a
Hugging Face folder, a method's objective built on it, tiny STS files, a local Ray, an MLflow store of a
test's own, and specs written as YAML.

Tests pass the tiny model's path as the ``model`` knob, exactly as a user passes any model,
so the whole code path (from_pretrained, tokenizer, pooling) is exercised in
well under a second per forward pass.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest
import yaml
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Shared frozen-model outputs of the tests go to a folder of their own, never the machine's default one.
os.environ.setdefault("SWEEP_FROZEN_OUTPUTS_DIR", tempfile.mkdtemp(prefix="test-frozen-outputs-"))

REPOSITORY = Path(__file__).resolve().parents[1]
MLFLOW_DEFAULTS = ("mlruns", "mlflow.db", "mlartifacts")
"""What MLflow writes in the folder a process runs in when told no other place: the default artifact root of
an experiment created in a SQLite store (and of a file store), the default store, a server's artifacts."""

TINY_LAYERS = 2


@pytest.fixture(autouse=True)
def shared_stages_of_the_test(tmp_path_factory, monkeypatch):
    """Each test's shared stages (``share_stages``) in a folder of its own: stages that one test trained, perhaps
    with code it patched, are never read by another."""
    monkeypatch.setenv("SWEEP_SHARED_STAGES_DIR", str(tmp_path_factory.mktemp("shared-stages")))


def build_tiny_bert(folder: Path, seed: int = 0, layers: int = TINY_LAYERS, hidden_size: int = 32,
                    masked_lm: bool = False) -> Path:
    import torch

    from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(BUNDLED_MODEL))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    (BertForMaskedLM if masked_lm else BertModel)(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


ROBERTA_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
"""RoBERTa's special tokens, ids 0..4 in this order as in roberta-base (<pad> = 1: positions count from 2)."""


def build_tiny_roberta(folder: Path, seed: int = 0, layers: int = TINY_LAYERS, hidden_size: int = 32,
                       merges_limit: int | None = None) -> Path:
    """A random RoBERTa with its own byte-level BPE tokenizer (vocab.json + merges.txt), trained on the
    first 2,000 STS-B train pairs; ``merges_limit`` keeps only the first merges (another tokenizer with the
    same vocabulary)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    from trainers.data.sources import SHIPPED_STS_DIR

    lines = (SHIPPED_STS_DIR / "stsb-train.tsv").read_text(encoding="utf-8").splitlines()[1:2001]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([s for line in lines for s in line.split("\t")[:2]], vocab_size=1000,
                            special_tokens=list(ROBERTA_SPECIAL_TOKENS), show_progress=False)
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(folder))  # vocab.json, merges.txt: what RoBERTa's tokenizer reads
    if merges_limit is not None:
        merges = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        (folder / "merges.txt").write_text("\n".join(merges[: merges_limit + 1]) + "\n", encoding="utf-8")
    tokenizer = RobertaTokenizer.from_pretrained(folder, model_max_length=512)
    torch.manual_seed(seed)
    config = RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=514, type_vocab_size=1, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    RobertaModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> str:
    """Path of a 2-layer, 32-dim random RoBERTa with a 1,000-token byte-level BPE tokenizer."""
    return str(build_tiny_roberta(tmp_path_factory.mktemp("tiny-roberta")))


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> str:
    """Path of a 2-layer, 32-dim random BERT with the bundled model's tokenizer."""
    return str(build_tiny_bert(tmp_path_factory.mktemp("tiny-bert")))


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory) -> str:
    """A wider (48-dim) random BERT than the 32-dim student, so the student needs a map into its space."""
    return str(build_tiny_bert(tmp_path_factory.mktemp("teacher"), seed=1, hidden_size=48))


@pytest.fixture(scope="session")
def tiny_masked_lm(tmp_path_factory) -> str:
    """The tiny BERT with a masked-LM head (SCT's mlm view)."""
    return str(build_tiny_bert(tmp_path_factory.mktemp("tiny-mlm"), masked_lm=True))


@pytest.fixture(scope="session")
def tiny_sts_dir(tmp_path_factory) -> Path:
    """A folder of small STS TSVs (first 40 pairs of each shipped file), for fast trials."""
    from trainers.data.sources import ALL_FILES, SHIPPED_STS_DIR

    folder = tmp_path_factory.mktemp("tiny-sts")
    for name in ALL_FILES:
        lines = (SHIPPED_STS_DIR / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
        (folder / f"{name}.tsv").write_text("\n".join(lines[:41]) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def use_tiny_sts(tiny_sts_dir, monkeypatch) -> Path:
    """Point the STS loader at the tiny copy for this test."""
    monkeypatch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
    return tiny_sts_dir


@pytest.fixture
def local_ray(use_tiny_sts):
    """A sweep in this test starts its own local Ray (on the tiny STS files), shut down after it."""
    with fresh_ray():
        yield


@contextmanager
def fresh_ray() -> Iterator[None]:
    """The sweeps inside start their own local Ray (one left by an earlier test would refuse their start), shut
    down after them however they end."""
    import ray

    ray.shutdown()
    try:
        yield
    finally:
        ray.shutdown()


def mlflow_defaults_in(folder: Path) -> set[Path]:
    """MLflow's default stores and artifact roots in ``folder``, and each experiment's and run's folder in them."""
    found = set()
    for name in MLFLOW_DEFAULTS:
        if (folder / name).exists():
            found |= {folder / name, *(folder / name).glob("*"), *(folder / name).glob("*/*")}
    return found


@pytest.fixture(scope="session", autouse=True)
def run_in_a_folder_of_the_sessions_own(tmp_path_factory):
    """The tests run in a folder of the session's own, never in the repository: a sweep that a test runs in its
    process creates its experiments with MLflow's default artifact root, ./mlruns of the folder it runs in (as for a
    user who runs `python -m sweep run` in a folder), and a command given no --tracking-uri opens ./mlflow.db there.
    The session fails if it leaves any of them in the repository all the same. The repository stays first on the
    path of the processes the tests start (Ray's workers start in the driver's folder, and unpickle trainables
    defined in ``tests``)."""
    before = mlflow_defaults_in(REPOSITORY)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("cwd"))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPOSITORY), os.environ.get("PYTHONPATH")))))
        yield
    left = sorted(str(path.relative_to(REPOSITORY)) for path in mlflow_defaults_in(REPOSITORY) - before)
    assert not left, f"the tests left MLflow's default folders in the repository: {left[:5]}"


@pytest.fixture
def tracking_uri(tmp_path) -> str:
    """An MLflow store of this test's own: SQLite in its tmp_path."""
    return f"sqlite:///{tmp_path}/mlflow.db"


def child_runs(uri: str, name: str):
    """The trial runs of sweep ``name`` in the MLflow store at ``uri``. A SQLite store is opened as the driver
    opens it, under its lock, and not at all before the driver has created it: a test that polls a store while
    a driver creates it would otherwise run MLflow's migrations beside the driver's, which kills the driver
    (``table ... already exists``)."""
    from results.reader import sqlite_path
    from sweep.tracking.store import open_client

    path = sqlite_path(uri)
    if path is not None and not path.exists():
        return []
    client = open_client(uri)
    experiment = client.get_experiment_by_name(name)
    return client.search_runs([experiment.experiment_id], "tags.`sweep.role` = 'trial'", max_results=1000)


def write_spec(folder: Path, spec: Mapping[str, Any]) -> Path:
    """``spec`` written as YAML to ``folder/NAME.yaml``, NAME the spec's own name."""
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(dict(spec), sort_keys=False), encoding="utf-8")
    return path


def row_configs(spec: Path) -> dict[str, Mapping[str, Any]]:
    """Each row's resolved config (its first seed's) in the spec at ``spec``, read for its layout alone (what this
    machine lacks, the hub or a file, is not asked)."""
    from sweep.spec.sweep_spec import load_spec

    return {trial.point.row: trial.config for trial in load_spec(spec, check_environment=False).distinct_trials()}


def differing_knobs(config: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs in which ``config`` differs from ``base``, with ``config``'s values."""
    return {knob: value for knob, value in config.items() if value != base.get(knob)}


def recorded_layout(path: Path) -> str:
    """The layout (JSON) a sweep of the spec at ``path`` records on its runs when it starts, as a collected
    trials frame carries it (:data:`results.schema.LAYOUT`)."""
    from results.record import LAYOUT_TAG
    from sweep.spec.sweep_spec import load_spec
    from sweep.tracking.tracker import sweep_tags  # Ray: only for the tests that build collected frames by hand

    return sweep_tags(load_spec(path, check_environment=False))[LAYOUT_TAG]


def spec_file(folder: Path, tiny_bert: str, name: str, **extra) -> Path:
    """A small sweep of the tiny BERT: an untuned row (seed-free) and a SimCSE row of 4 steps, seeds 1 and 2,
    two trials at a time; ``extra`` adds or replaces top-level keys."""
    return write_spec(folder, {
        "name": name,
        "tags": {"paper": "test", "table": "e2e"},
        "method": "simcse",
        "base": {"model": tiny_bert, "batch_size": 8, "train_limit": 48, "max_steps": 4, "eval_every": 2},
        "rows": [
            {"name": "untuned", "set": {"method": "none", "pooling": "mean"}},
            {"name": "simcse", "set": {}},
        ],
        "seeds": [1, 2],
        "resources": {"cpu": 1},
        "max_concurrent_trials": 2,
        **extra,
    })


def build_objective(method: str, model: str, init_seed: int = 0, /, **knobs: Any):
    """The objective of ``method``'s one training stage on ``model``, as a trial builds it (knobs resolved,
    the encoder its config asks for, the stage's overrides); its random parts (heads, projectors,
    classifiers) are drawn right after ``torch.manual_seed(init_seed)``: two builds of one config are the
    same objective."""
    import torch

    from trainers.models.encoder import SentenceEncoder
    from trainers.registry import get_method

    declared = get_method(method)
    config = declared.resolve({"model": model, **knobs})
    (stage,) = declared.stages(config)
    encoder = SentenceEncoder.from_config(config)
    torch.manual_seed(init_seed)
    return stage.build({**config, **stage.overrides}, encoder)


def wait_for(condition, seconds: float = 240, what: str = "the awaited state", log: Path | None = None,
             driver=None):
    """``condition()``'s first true value, asked every 0.2 s for up to ``seconds`` (while ``driver``, a
    process, runs); an error inside it (a store not yet created, being written) counts as not yet."""
    deadline, last = time.monotonic() + seconds, None
    while time.monotonic() < deadline and (driver is None or driver.poll() is None):
        try:
            found = condition()
        except Exception as error:
            found, last = None, error
        if found:
            return found
        time.sleep(0.2)
    ended = "" if driver is None or driver.poll() is None else f"; the driver exited {driver.returncode}"
    output = log.read_text()[-4000:] if log else ""
    raise AssertionError(f"never: {what} (last error: {last!r}{ended})\n{output}")


def bert_initialised_head(width: int, std: float = 0.02):
    """SimCSE's training head (dense + tanh) as its authors' Hugging Face model initialises it, written out: a
    ``nn.Linear`` whose weights are then drawn from N(0, std^2) and whose biases are zeroed (BERT's
    ``init_weights``)."""
    from torch import nn

    dense = nn.Linear(width, width)
    nn.init.normal_(dense.weight, mean=0.0, std=std)
    nn.init.zeros_(dense.bias)
    return nn.Sequential(dense, nn.Tanh())
