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
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import pyarrow.fs

from results.names import UsageError, split_name

SWEEP_RECORD = "sweep.json"


@dataclass(frozen=True)
class Variant:
    """One variant's Ray folder (a path or a URI, as Ray's storage is) and what ``resume`` needs to rebuild
    it (from its record)."""

    folder: str
    record: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.folder.rstrip("/").rsplit("/", 1)[-1]

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


def filesystem(location: str) -> tuple[pyarrow.fs.FileSystem, str]:
    """The filesystem and path of a Ray storage location, a local path or a URI (``s3://``, ``gs://``,
    ``file://``), opened with pyarrow as Ray opens its storage: a sweep's record lives beside Ray's state."""
    import pyarrow.fs

    if "://" in location:
        return pyarrow.fs.FileSystem.from_uri(location)
    return pyarrow.fs.LocalFileSystem(), str(Path(location).resolve())


def read_record(folder: str) -> dict[str, Any] | None:
    """The record of the variant whose Ray folder is ``folder`` (None when it has none)."""
    import pyarrow.fs

    fs, path = filesystem(folder)
    record = f"{path}/{SWEEP_RECORD}"
    if fs.get_file_info(record).type != pyarrow.fs.FileType.File:
        return None
    with fs.open_input_stream(record) as stream:
        return json.loads(stream.read().decode("utf-8"))


def write_record(folder: str, record: Mapping[str, Any]) -> None:
    """Write ``record`` into the variant's Ray folder (created if new), wherever Ray's storage is."""
    fs, path = filesystem(folder)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{SWEEP_RECORD}") as stream:
        stream.write(json.dumps(record, indent=2).encode("utf-8"))


def variant_folder(root: str, name: str, spec_hash: str) -> str:
    """The Ray experiment folder of one variant: ``ROOT/NAME-HASH``. A folder ``ROOT/NAME`` written
    before variants had their own folders is kept in use for the variant it holds."""
    legacy = f"{root}/{name}"
    if (read_record(legacy) or {}).get("spec_hash") == spec_hash:
        return legacy
    return f"{root}/{name}-{spec_hash}"


def recorded_variants(root: str, text: str) -> list[Variant]:
    """The recorded variants under ``root`` (a path or a URI) that ``text`` (NAME or NAME-HASHPREFIX) names."""
    import pyarrow.fs

    fs, path = filesystem(root)
    entries = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    folders = [f"{root.rstrip('/')}/{entry.base_name}" for entry in entries
               if entry.type == pyarrow.fs.FileType.Directory]
    records = {folder: record for folder in folders if (record := read_record(folder)) is not None}
    variants = [Variant(folder, record) for folder, record in records.items()]
    name, prefix = split_name(text, {_sweep_name(v) for v in variants})
    return sorted(
        (v for v in variants
         if v.name == text or (_sweep_name(v) == name and str(v.record.get("spec_hash", "")).startswith(prefix))),
        key=lambda v: v.name,
    )


def _sweep_name(variant: Variant) -> str:
    spec_hash = str(variant.record.get("spec_hash", ""))
    folder = variant.name
    return folder[: -len(spec_hash) - 1] if spec_hash and folder.endswith(f"-{spec_hash}") else folder


def choose_variant(root: str, text: str) -> Variant:
    """The one variant ``text`` names under ``root``; refuses none or several, listing the choices."""
    found = recorded_variants(root, text)
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(f"no sweep named {text!r} under {root} (no {SWEEP_RECORD} there)")
    choices = "\n  ".join(variant.describe() for variant in found)
    raise UsageError(
        f"{text!r} names {len(found)} variants under {root}; choose one by its folder name (NAME-HASH, "
        f"or a unique prefix of the hash):\n  {choices}"
    )
