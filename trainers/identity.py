"""What a result depends on, each named by content: files and folders, models, the training code.

A trial's key (:mod:`sweep.spec.trial_key`) and a shared stage's (:mod:`trainers.training.shared_stages`) are
made of these digests, so that two results with the same key are the same numbers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from trainers.models.pretrained import resolve_model_path

TRAINERS = Path(__file__).resolve().parent
MODEL_KNOBS = ("model", "teacher", "mlm_model", "complementary_model", "generator")
"""The knobs that name a model: each model a trial loads, by its identity (:func:`model_identity`)."""


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def json_digest(value: Any) -> str:
    """A key made of JSON values (sorted keys; anything else by its ``str``), as a digest that names a folder."""
    return hashlib.blake2b(json.dumps(value, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


@functools.cache
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    hashed = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hashed.update(block)
    return hashed.hexdigest()[:16]


def path_digest(path: Path) -> str:
    """A file's or a folder's content (every file under it, by relative name), read once per process
    unless a file changes."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    entries = []
    for file in files:
        stat = file.stat()
        entries.append(f"{file.relative_to(path) if file != path else file.name}:"
                       f"{_file_digest(str(file), stat.st_size, stat.st_mtime_ns)}")
    return text_digest("\n".join(entries))


def model_identity(name: str) -> str:
    """A local model by its files' content; a hub id by the revision this machine's cache holds of it."""
    path = Path(resolve_model_path(name))
    if path.is_dir():
        return f"files:{path_digest(path)}"
    cache = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface"))
                 / "hub").expanduser()
    ref = cache / f"models--{name.replace('/', '--')}" / "refs" / "main"
    return f"hub:{name}@{ref.read_text().strip() if ref.is_file() else 'unknown'}"


@functools.cache
def code_digest() -> str:
    """The training code: every source under ``trainers/``."""
    return text_digest("\n".join(f"{p.relative_to(TRAINERS)}:{text_digest(p.read_text(encoding='utf-8'))}"
                                 for p in sorted(TRAINERS.rglob("*.py"))))
