"""Variants of a sweep: one spec run with other ``--set``, ``--seeds`` or ``--budget`` values.

Each variant has its own spec hash (the spec, its overrides and budget), its own
MLflow parent run in the spec's experiment, and its own Ray experiment folder
``STORAGE/NAME-HASH``. Running the same spec with the same options again finds
the same folder and resumes it; another variant never collides with it.
``resume NAME`` and ``status NAME`` take the spec name when it has one variant,
or ``NAME-HASH`` (any unique prefix of the hash) to choose among several.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from results.names import UsageError, split_name

SWEEP_RECORD = "sweep.json"


@dataclass(frozen=True)
class Variant:
    """One variant's Ray folder and what ``resume`` needs to rebuild it (from its record)."""

    folder: Path
    record: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.folder.name

    def describe(self) -> str:
        return f"{self.name}  ({describe_options(self.record)})"


def describe_options(record: Mapping[str, Any]) -> str:
    """The options that make a variant, as command-line flags (``spec as written`` when none)."""
    parts = [f"--set {key}={value}" for key, value in sorted(dict(record.get("overrides") or {}).items())]
    if record.get("seeds"):
        parts.append("--seeds " + ",".join(map(str, record["seeds"])))
    if record.get("budget"):
        parts.append(f"--budget {record['budget']}")
    return " ".join(parts) or "the spec as written"


def read_record(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / SWEEP_RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def variant_folder(root: str, name: str, spec_hash: str) -> str:
    """The Ray experiment folder of one variant: ``ROOT/NAME-HASH``. A folder ``ROOT/NAME`` written
    before variants had their own folders is kept in use for the variant it holds."""
    legacy = f"{root}/{name}"
    if "://" not in root and (read_record(legacy) or {}).get("spec_hash") == spec_hash:
        return legacy
    return f"{root}/{name}-{spec_hash}"


def local_variants(root: str, text: str) -> list[Variant]:
    """The recorded variants under ``root`` that ``text`` (NAME or NAME-HASHPREFIX) names."""
    folders = [f for f in Path(root).iterdir() if (f / SWEEP_RECORD).is_file()] if Path(root).is_dir() else []
    records = {f: read_record(f) for f in folders}
    names = {f.name for f in folders if f.name == text}
    name, prefix = split_name(text, names | {_sweep_name(f, r) for f, r in records.items()})
    return sorted(
        (Variant(f, r) for f, r in records.items()
         if _sweep_name(f, r) == name and str(r.get("spec_hash", "")).startswith(prefix)),
        key=lambda v: v.name,
    )


def _sweep_name(folder: Path, record: Mapping[str, Any]) -> str:
    spec_hash = str(record.get("spec_hash", ""))
    return folder.name[: -len(spec_hash) - 1] if spec_hash and folder.name.endswith(f"-{spec_hash}") else folder.name


def choose_variant(root: str, text: str) -> Variant:
    """The one variant ``text`` names under ``root``; refuses none or several, listing the choices."""
    found = local_variants(root, text)
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(f"no sweep named {text!r} under {root} (no {SWEEP_RECORD} there)")
    choices = "\n  ".join(variant.describe() for variant in found)
    raise UsageError(
        f"{text!r} names {len(found)} variants under {root}; choose one by its folder name (NAME-HASH, "
        f"or a unique prefix of the hash):\n  {choices}"
    )
