"""The steps through an older commit's ``trainers/``, in a child process, beside this checkout's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.gpu.common import ROOT

LEGACY_METHODS = ("simcse", "consert", "sct")
"""The methods timed through the older loop: ConSERT's and SCT's views took the most host work out."""


def legacy_steps(trainers_folder: str, commit: str, tiny: bool) -> list[dict[str, Any]]:
    """:data:`LEGACY_METHODS`' steps through the older loop in ``trainers_folder``, in the precision ``auto``
    picks on a GPU (TF32; fp32 in the tiny version: a CPU has no TF32)."""
    extra = ["--methods", *LEGACY_METHODS, "--precisions", "fp32" if tiny else "tf32", *(["--tiny"] if tiny else [])]
    return [{**row, "commit": commit} for row in steps_in_child(extra, trainers_folder)["steps"]]


def steps_in_child(extra: list[str], trainers_folder: str | None = None) -> dict[str, Any]:
    """This module's steps part (with the arguments ``extra``) in a child process, which imports the
    ``trainers/`` in ``trainers_folder`` (an older commit's) instead of this checkout's when one is given."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = ["benchmarks.gpu", "--steps-only", "--json", out.name, *extra]
        first = f"sys.path.insert(0, {os.path.abspath(trainers_folder)!r}); " if trainers_folder else ""
        code = (f"import runpy, sys; {first}sys.argv = {argv!r}; "
                "runpy.run_module('benchmarks.gpu', run_name='__main__', alter_sys=True)")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        result = json.loads(Path(out.name).read_text())
    if result["errors"]:
        raise RuntimeError("; ".join(result["errors"]))
    return result
