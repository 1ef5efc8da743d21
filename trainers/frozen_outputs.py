"""Outputs of frozen models, computed once per input and shared by the trials on a node.

A frozen model in eval mode (SG's BERT_F, SCT's distillation teacher) maps an
input text to the same output in every step, epoch and trial. A
:class:`FrozenOutputs` computes each output once and keeps it: in the process
(so the next epoch, and the next trial a reused Ray worker runs, reads it from
memory) and on node-local disk (so the other trials of the node read it).

The cache is a pure function of its key: everything an output depends on.
That is the frozen model's weights (a digest of every tensor, so a cut
``model_layers`` or a trained copy is another key), its tokenizer's
vocabulary, what the method asks of it (max length, pooling, layers kept),
the device type, the autocast precision in effect and the number of threads.
Each output is the frozen model run on its text alone (:func:`each_alone`),
shared or not: a batched forward's last bits depend on the other texts of the
batch, and training amplifies them. Inputs that change at
random (masked-LM rewrites, synonym swaps) are never looked up here: their
owners compute them directly.

Disk: ``<folder>/<key digest>/`` holds ``key.json`` and shards of
``(texts, outputs)`` written atomically (``torch.save`` then rename) and read
memory-mapped. ``folder`` is the ``frozen_outputs_dir`` knob, by default
``$SWEEP_FROZEN_OUTPUTS_DIR`` or ``<system temp>/sweep-frozen-outputs`` (node
local; a trial on another node computes its own). The whole folder is bounded
by ``frozen_outputs_gb``: the least recently written other keys are deleted
first; past the bound new outputs stay in memory only, and past it in memory
too they are simply computed every time (still exact).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

ENVIRONMENT_FOLDER = "SWEEP_FROZEN_OUTPUTS_DIR"
KEY_FILE = "key.json"


def default_folder() -> Path:
    return Path(os.environ.get(ENVIRONMENT_FOLDER) or Path(tempfile.gettempdir()) / "sweep-frozen-outputs")


def weights_digest(model: nn.Module) -> str:
    """A digest of every parameter and buffer (names, dtypes, shapes and bytes)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def tokenizer_digest(tokenizer) -> str:
    """A digest of the tokenizer's class, lower-casing and vocabulary."""
    vocabulary = sorted(tokenizer.get_vocab().items())
    text = json.dumps([type(tokenizer).__name__, getattr(tokenizer, "do_lower_case", None), vocabulary])
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def model_key(model: nn.Module, tokenizer) -> dict[str, str]:
    """The part of a key that names a frozen model exactly: its weights and its tokenizer."""
    return {"weights": weights_digest(model), "tokenizer": tokenizer_digest(tokenizer)}


def each_alone(compute: Callable[[list[str]], Tensor], texts: Sequence[str]) -> Tensor:
    """``compute`` run on each text alone, stacked: a text's output never depends on which other texts
    share its batch (their padding and the batch's size change the last bits of a batched forward, and
    training amplifies those bits). Shared or not, a frozen output is this one value."""
    return torch.cat([compute([text]) for text in texts])


def _autocast_state(device_type: str) -> str:
    if torch.is_autocast_enabled(device_type):
        return f"autocast:{torch.get_autocast_dtype(device_type)}"
    return "none"


def _digest(key: Mapping[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16).hexdigest()


@dataclass
class _Store:
    """One key's outputs in this process: input text -> output tensor (on the CPU)."""

    folder: Path | None
    values: dict[str, Tensor] = field(default_factory=dict)
    shards_read: set[str] = field(default_factory=set)
    bytes: int = 0

    def read_new_shards(self) -> None:
        """Take in the shards other trials of the node wrote since the last look."""
        if self.folder is None or not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("*.pt")):
            if path.name in self.shards_read:
                continue
            self.shards_read.add(path.name)
            shard = torch.load(path, mmap=True, weights_only=True)
            for text, value in zip(shard["texts"], shard["values"]):
                if text not in self.values:
                    self.values[text] = value
                    self.bytes += value.numel() * value.element_size()


# Key digest -> store, for the life of the process: a reused Ray worker's next trial starts warm.
_STORES: dict[str, _Store] = {}


class FrozenOutputs:
    """One trial's access to the shared outputs of one frozen model; counts what it computed."""

    def __init__(self, key: Mapping[str, Any], folder: str | Path | None, max_gb: float):
        self.key = dict(key)
        self.root = Path(folder) if folder else default_folder()
        self.max_bytes = int(max_gb * 1e9)
        self.computed = 0  # inputs this trial ran through the frozen model
        self.reused = 0  # inputs served without a forward pass

    @classmethod
    def from_config(cls, config: Mapping[str, Any], key: Mapping[str, Any]) -> "FrozenOutputs":
        """The shared outputs of ``key`` where a trial's config (``frozen_outputs_*`` knobs) keeps them."""
        return cls(key, config["frozen_outputs_dir"], config["frozen_outputs_gb"])

    def _store(self, device_type: str) -> _Store:
        key = {**self.key, "device": device_type, "autocast": _autocast_state(device_type),
               "threads": torch.get_num_threads()}  # kernels may sum in another order with other thread counts
        digest = _digest(key)
        if digest not in _STORES:
            folder = self.root / digest
            _STORES[digest] = _Store(folder)
            if self.max_bytes:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / KEY_FILE).write_text(json.dumps(key, indent=2, sort_keys=True), encoding="utf-8")
        return _STORES[digest]

    def get(self, texts: Sequence[str], compute: Callable[[list[str]], Tensor], device: torch.device) -> Tensor:
        """The outputs for ``texts`` (row i for text i) on ``device``; ``compute`` runs the frozen model,
        on each distinct text no trial of this node has computed yet alone (:func:`each_alone`)."""
        store = self._store(device.type)
        missing = [t for t in dict.fromkeys(texts) if t not in store.values]
        if missing:
            store.read_new_shards()
            missing = [t for t in missing if t not in store.values]
        computed: dict[str, Tensor] = {}
        if missing:
            outputs = each_alone(compute, missing).detach()
            computed = dict(zip(missing, outputs))
            self._keep(store, missing, outputs.cpu())
        self.computed += len(missing)
        self.reused += len(texts) - len(missing)
        rows = [computed[t] if t in computed else store.values[t].to(device) for t in texts]
        return torch.stack(rows)

    def _keep(self, store: _Store, texts: list[str], outputs: Tensor) -> None:
        size = outputs.numel() * outputs.element_size()
        if store.bytes + size > self.max_bytes:
            return  # past the bound: computed again when next needed
        store.values.update(zip(texts, outputs))
        store.bytes += size
        if store.folder is not None and self._make_room(store.folder, size):
            name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.pt"
            partial = store.folder / f".{name}.partial"
            try:
                torch.save({"texts": list(texts), "values": outputs.contiguous()}, partial)
                os.replace(partial, store.folder / name)  # readers never see half a shard
            except OSError:  # the folder was evicted meanwhile: the outputs stay in memory
                return
            store.shards_read.add(name)

    def _make_room(self, keep: Path, size: int) -> bool:
        """Whether ``size`` more bytes fit under the bound, deleting the least recently written other keys."""
        if not keep.is_dir():
            return False
        folders = [f for f in self.root.iterdir() if f.is_dir()]
        used = {f: sum(p.stat().st_size for p in f.iterdir() if p.is_file()) for f in folders}
        total = sum(used.values())
        for folder in sorted((f for f in folders if f != keep), key=lambda f: f.stat().st_mtime):
            if total + size <= self.max_bytes:
                break
            shutil.rmtree(folder, ignore_errors=True)
            total -= used[folder]
        return total + size <= self.max_bytes

    def statistics(self, name: str) -> dict[str, float]:
        """``<name>_computed`` and ``<name>_reused``: inputs run through the frozen model, and served
        without a forward pass, in this trial."""
        return {f"{name}_computed": float(self.computed), f"{name}_reused": float(self.reused)}
