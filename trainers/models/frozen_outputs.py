"""Outputs of frozen models: one batched pass over the training texts, the same table in every trial.

A frozen model in eval mode (SG's BERT_F with ``bert_f_dropout`` false, SCT's
distillation teacher) maps a fixed input text to the same output in every step,
epoch and trial. Before a trial trains, :class:`FrozenOutputs` runs the model
over all the fixed texts of its training corpus at once (:func:`table_batches`): the distinct texts
sorted by length (characters, then the text), cut into batches of
:data:`TABLE_BATCH_SIZE`. Neither depends on the trial's batch size, its seed
or its sharing, so every trial that reads the table reads the same bits: a
batched forward's last bits depend on the other texts of its batch, and here
those are fixed by the corpus alone. Steps then read their rows from the
table.

``share_frozen_outputs`` only says where the table lives:

- on: on node-local disk, ``<folder>/<key digest>/`` (``key.json``, ``texts.json``
  and ``table.npy``, read memory-mapped), computed by the node's first trial
  under a file lock while the others wait, then read by them (and kept in the
  process for a reused Ray worker's next trial). ``folder`` is the
  ``frozen_outputs_dir`` knob, by default ``$SWEEP_FROZEN_OUTPUTS_DIR`` or
  ``<system temp>/sweep-frozen-outputs``; writing a table deletes the least
  recently used other tables past ``frozen_outputs_gb``.
- off: the same table computed inside the trial, in its memory.

The table is kept in the model's output precision (float32 for BERT's
LayerNorm output, bf16 when a model returns it). When it is larger than
``frozen_outputs_gb`` (``sweep plan`` says so before the sweep starts), every
trial falls back to running the model on each step's batch, shared or not;
still exact across sharing, but not the table's bits. Inputs that change at
random (masked-LM rewrites, synonym swaps) are never looked up here: their
owners run the model on each step's batch.

The pass is timed: its seconds are written beside the table (``key.json``'s ``build_seconds``, not part of
the key) and reported by every trial that uses the table, whether it computed it or read it from another
trial (``<name>_seconds``): SG-BERT Table 6 counts BERT_F's forwards in the training time of each trial.

The key holds everything an output depends on: the frozen model's weights (a
digest of every tensor, so a cut ``model_layers`` or a trained copy is another
key), its tokenizer (vocabulary, a BPE's merges), what the method asks of it
(max length, pooling, layers kept), the texts, their order and batch size, the device type,
the autocast precision in effect and the number of threads.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from filelock import FileLock
from torch import Tensor, nn

from trainers.identity import json_digest
from trainers.node_cache import make_room, node_folder, write_whole

ENVIRONMENT_FOLDER = "SWEEP_FROZEN_OUTPUTS_DIR"
KEY_FILE = "key.json"
TEXTS_FILE = "texts.json"
TABLE_FILE = "table.npy"
TABLE_BATCH_SIZE = 128
"""Texts per forward of the table pass: fixed, so no trial's batch size reaches the table's bits."""
TABLE_ORDER = "characters-then-text"
"""How the table's distinct texts are sorted before they are cut into batches (part of the key)."""

Compute = Callable[[list[str]], Tensor]
# numpy has no bfloat16: its bits are stored as int16 and viewed back.
_STORED_AS = {torch.float32: torch.float32, torch.float16: torch.float16, torch.bfloat16: torch.int16}


def weights_digest(model: nn.Module) -> str:
    """A digest of every parameter and buffer (names, dtypes, shapes and bytes)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def tokenizer_digest(tokenizer) -> str:
    """A digest of the tokenizer's class, lower-casing, vocabulary and, for a fast tokenizer, its whole
    pipeline (normaliser, pre-tokeniser, model: a BPE's merges (RoBERTa's) as well as its vocabulary,
    post-processor), less the truncation and padding that each call sets."""
    vocabulary = sorted(tokenizer.get_vocab().items())
    pipeline = None
    if getattr(tokenizer, "backend_tokenizer", None) is not None:
        pipeline = json.loads(tokenizer.backend_tokenizer.to_str())
        pipeline.pop("truncation", None)
        pipeline.pop("padding", None)
    text = json.dumps([type(tokenizer).__name__, getattr(tokenizer, "do_lower_case", None), vocabulary, pipeline],
                      sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def model_key(model: nn.Module, tokenizer) -> dict[str, str]:
    """The part of a key that names a frozen model exactly: its weights and its tokenizer."""
    return {"weights": weights_digest(model), "tokenizer": tokenizer_digest(tokenizer)}


def table_texts(texts: Sequence[str]) -> list[str]:
    """The table's rows: the distinct texts, shortest first (:data:`TABLE_ORDER`), so that a batch pads little."""
    return sorted(set(texts), key=lambda text: (len(text), text))


def table_batches(texts: Sequence[str]) -> list[list[str]]:
    """The table pass's forwards: :func:`table_texts` cut into batches of :data:`TABLE_BATCH_SIZE`."""
    rows = table_texts(texts)
    return [rows[i : i + TABLE_BATCH_SIZE] for i in range(0, len(rows), TABLE_BATCH_SIZE)]


def _autocast_state(device_type: str) -> str:
    """The precision outputs are computed in: bf16 autocast, fp32 matrix products in TF32, or plain fp32."""
    if torch.is_autocast_enabled(device_type):
        return f"autocast:{torch.get_autocast_dtype(device_type)}"
    matmuls = torch.get_float32_matmul_precision()
    return "none" if matmuls == "highest" else f"fp32 matmuls:{matmuls}"


class _Table:
    """Text -> row of one key's outputs (rows on the CPU, in memory or memory-mapped), and the seconds the pass
    that computed them took (NaN for a table written before that was recorded)."""

    def __init__(self, texts: list[str], values: Tensor, build_seconds: float = math.nan):
        self.rows = {text: i for i, text in enumerate(texts)}
        self.values = values
        self.build_seconds = build_seconds

    def lookup(self, texts: Sequence[str]) -> Tensor:
        return self.values[torch.tensor([self.rows[t] for t in texts])]

    @classmethod
    def read(cls, folder: Path) -> "_Table":
        texts = json.loads((folder / TEXTS_FILE).read_text(encoding="utf-8"))
        meta = json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))
        # copy on write: torch wants a writable array; the file is never changed
        stored = np.load(folder / TABLE_FILE, mmap_mode="c")
        return cls(texts, torch.from_numpy(stored).view(getattr(torch, meta["dtype"])),
                   meta.get("build_seconds", math.nan))

    def write(self, folder: Path, key: Mapping[str, Any]) -> None:
        """``folder`` with the key, the texts and the table, written whole (:func:`write_whole`)."""
        dtype = str(self.values.dtype).removeprefix("torch.")
        meta = {**key, "dtype": dtype, "build_seconds": self.build_seconds}

        def write(partial: Path) -> None:
            (partial / KEY_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True), "utf-8")
            (partial / TEXTS_FILE).write_text(json.dumps(list(self.rows)), encoding="utf-8")
            np.save(partial / TABLE_FILE, self.values.view(_STORED_AS[self.values.dtype]).numpy())

        write_whole(folder, write)


# Key digest -> table, for the life of the process: a reused Ray worker's next trial starts warm.
_STORES: dict[str, _Table] = {}


def _compute_table(texts: Sequence[str], compute: Compute, max_bytes: int) -> _Table | None:
    """The table of ``texts`` (one batched pass, :func:`table_batches`), or None when it is larger than
    ``max_bytes`` (known from the first batch's rows: texts x row width x bytes)."""
    batches = table_batches(texts)
    values: Tensor | None = None
    start = 0
    for batch in batches:
        outputs = compute(batch).detach().cpu()
        if values is None:
            rows = sum(len(b) for b in batches)
            if rows * outputs[0].numel() * outputs.element_size() > max_bytes:
                return None
            values = torch.empty((rows, *outputs.shape[1:]), dtype=outputs.dtype)
        values[start : start + len(batch)] = outputs
        start += len(batch)
    return _Table([t for b in batches for t in b], values)


class FrozenOutputs:
    """One trial's access to the table of one frozen model's outputs; counts what it computed and read."""

    def __init__(self, key: Mapping[str, Any], folder: str | Path | None, max_gb: float, share: bool = True):
        self.key = dict(key)
        self.root = node_folder(folder, ENVIRONMENT_FOLDER, "sweep-frozen-outputs")
        self.max_bytes = int(max_gb * 1e9)
        self.share = share
        self.table: _Table | None = None  # None before prepare(), and when the table does not fit
        self.computed = 0  # inputs this trial ran through the frozen model
        self.reused = 0  # outputs read from the table
        self.seconds: float | None = None  # the table pass's (None before prepare())

    @classmethod
    def from_config(cls, config: Mapping[str, Any], key: Mapping[str, Any]) -> "FrozenOutputs":
        """The frozen outputs of ``key`` as a trial's config (``*frozen_outputs*`` knobs) keeps them."""
        return cls(key, config["frozen_outputs_dir"], config["frozen_outputs_gb"], config["share_frozen_outputs"])

    def full_key(self, texts: Sequence[str], device_type: str) -> dict[str, Any]:
        return {**self.key, "texts": json_digest(table_texts(texts)), "order": TABLE_ORDER,
                "table_batch_size": TABLE_BATCH_SIZE, "device": device_type,
                "autocast": _autocast_state(device_type),
                "threads": torch.get_num_threads()}  # kernels may sum in another order with other thread counts

    def prepare(self, texts: Sequence[str], compute: Compute, device: torch.device) -> None:
        """Make the table of ``texts`` (the fixed texts of the trial's corpus) ready: read it where the
        node has it, else compute it in one batched pass (and keep it on disk when shared)."""
        key = self.full_key(texts, device.type)
        digest = json_digest(key)
        if not self.share:
            self._compute(texts, compute)
            return
        if digest in _STORES:
            self.table = _STORES[digest]
            self.seconds = self.table.build_seconds
            return
        folder = self.root / digest
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / f"{digest}.lock")):  # the node's other trials wait, then read it
            if (folder / TABLE_FILE).is_file():
                self.table = _Table.read(folder)
                self.seconds = self.table.build_seconds  # the pass of the trial that built it
                os.utime(folder)  # recently used: evicted last
            else:
                self._compute(texts, compute)
                if self.table is None:
                    return
                size = self.table.values.numel() * self.table.values.element_size()
                if make_room(self.root, folder, size, self.max_bytes):
                    try:
                        self.table.write(folder, key)
                    except OSError:  # a full disk: this trial keeps its table in memory
                        pass
        _STORES[digest] = self.table

    def _compute(self, texts: Sequence[str], compute: Compute) -> None:
        """The table pass in this trial, timed (the time counts even when the table does not fit: the first
        batch was run to find out)."""
        started = time.perf_counter()
        self.table = _compute_table(texts, compute, self.max_bytes)
        self.seconds = time.perf_counter() - started
        if self.table is not None:
            self.table.build_seconds = self.seconds
            self.computed += len(set(texts))

    def get(self, texts: Sequence[str], compute: Compute, device: torch.device) -> Tensor:
        """The outputs for ``texts`` (row i for text i) on ``device``: rows of the table, or, when the
        table did not fit, ``compute`` run on ``texts`` as one batch."""
        if self.table is None:
            self.computed += len(texts)
            return compute(list(texts)).detach()
        rows = self.table.lookup(texts)
        self.reused += len(texts)
        return rows.to(device)

    def statistics(self, name: str) -> dict[str, float]:
        """``<name>_seconds``: the table pass's seconds (this trial's, or those recorded with a table it read;
        NaN where an older table has none), once prepared; ``<name>_computed`` and ``<name>_reused``: inputs
        run through the frozen model, and outputs read from the table, in this trial, only when the table is
        shared (the run's tag ``sweep.shared_frozen_outputs`` follows these figures)."""
        seconds = {} if self.seconds is None else {f"{name}_seconds": self.seconds}
        if not self.share:
            return seconds
        return {f"{name}_computed": float(self.computed), f"{name}_reused": float(self.reused), **seconds}
