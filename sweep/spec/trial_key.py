"""A trial's key: a digest of everything that decides what it trains and how it is scored.

Two trials with the same key compute the same numbers, so a sweep takes a FINISHED trial run of the same
key from the tracking store instead of training it again (:mod:`sweep.run.reuse`). The key is made of parts,
each stored beside it on the run (:attr:`~results.record.Tag.TRIAL_KEY_PARTS`), so that a miss can be
explained part by part:

- ``knobs``: the method and every resolved knob after the budget, the seed and the evaluation suites
  included, bookkeeping knobs left out (``Knob(bookkeeping=True)``: they change no number);
- ``models``: each model a knob names (``model``, ``teacher``, ``mlm_model``, DCLR's ``complementary_model``,
  DiffCSE's ``generator``): a digest of its folder's files,
  or a hub id with the revision in this machine's cache;
- ``data``: the files the trial reads: the STS sets (training sentences and evaluation), a training corpus
  or back-translation file, each chosen suite's data folder;
- ``precision``: what ``eval_precision`` and ``train_precision`` become on this machine (``auto`` is bf16 on
  a CPU with AVX-512 bf16 or AMX, fp32 on other CPUs, TF32 on a GPU and bf16 for its ``cuda_graph`` steps; the
  scores differ in their last digits);
- ``libraries``: the versions of torch and transformers;
- ``code``: a digest of the training code (every ``trainers/`` source).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Mapping

from results.record import Tag, plain
from trainers.common_knobs import precision_settings
from trainers.data.sources import SHIPPED_STS_DIR, STS_DIR_ENV
from trainers.identity import MODEL_KNOBS, code_digest, model_identity, path_digest, text_digest
from trainers.metrics import SuiteName
from trainers.registry import get_method

FILE_KNOBS = ("train_corpus", "bt_file")
PARTS = ("knobs", "models", "data", "precision", "libraries", "code")


def data_parts(config: Mapping[str, Any]) -> dict[str, str]:
    """What the trial reads, each by content: STS (training sentences and evaluation), named files, suites'
    data folders; a hub source by its name."""
    sts = Path(os.environ.get(STS_DIR_ENV) or SHIPPED_STS_DIR)
    found = {"sts": path_digest(sts) if config.get("sts_source", "local") == "local" else "hub"}
    for knob in FILE_KNOBS:
        value = config.get(knob)
        if value and Path(value).exists():
            found[knob] = path_digest(Path(value))
    for entry in config.get(SuiteName.KEY, []):
        if (digest := suite_data_digest(entry["suite"])) is not None:
            found[entry["suite"]] = digest
    return found


def suite_data_digest(name: str) -> str | None:
    """The content of suite ``name``'s local data folder (its environment variable's), or None when it reads
    none here (the hub's copy, or data built in)."""
    from trainers.suites import SUITES

    suite = SUITES.get(name)
    folder = os.environ.get(suite.env) if suite is not None and suite.env else None
    return path_digest(Path(folder)) if folder and Path(folder).exists() else None


GPU_DRIVERS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")
"""Where a GPU that torch could use shows itself (NVIDIA's driver, AMD's ROCm): without any, torch sees none."""
CPU_BF16_FLAGS = frozenset({"amx_tile", "avx512_bf16"})
"""The CPU flags (Linux's ``/proc/cpuinfo``) of :func:`trainers.training.precision.cpu_runs_bf16_fast`'s checks."""


@functools.cache
def _precision(setting: str, graphed: bool = False) -> str:
    if setting in ("fp32", "bf16"):  # the same everywhere; 'auto' and 'tf32' depend on the device
        return setting
    return _cpu_precision(setting) or _torch_precision(setting, graphed)


def _cpu_precision(setting: str) -> str | None:
    """What :func:`trainers.training.precision.resolve` makes of ``setting`` on a Linux machine without a GPU, read
    without importing torch (seconds, most of ``sweep plan``'s time with a store); None elsewhere (a GPU
    driver, no ``/proc/cpuinfo``), where torch is asked (a CPU replays no CUDA graph: ``cuda_graph`` changes
    nothing here)."""
    flags = _cpu_flags()
    if flags is None or any(Path(path).exists() for path in GPU_DRIVERS) or setting not in ("auto", "tf32"):
        return None
    return "bf16" if setting == "auto" and flags & CPU_BF16_FLAGS else "fp32"


def _cpu_flags() -> frozenset[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith("flags")), None)
    return frozenset(line.partition(":")[2].split()) if line is not None else None


def _torch_precision(setting: str, graphed: bool) -> str:
    import torch

    from trainers.training.precision import resolve

    return resolve(setting, torch.device("cuda" if torch.cuda.is_available() else "cpu"), graphed)


@dataclass(frozen=True)
class TrialKey:
    """A trial's key and the parts it is the digest of."""

    parts: Mapping[str, str]

    @property
    def key(self) -> str:
        return text_digest(json.dumps(dict(self.parts), sort_keys=True))

    @property
    def key_without_code(self) -> str:
        """The key of every part but the training code's (``sweep run --reuse-other-code``)."""
        return text_digest(json.dumps({k: v for k, v in self.parts.items() if k != "code"}, sort_keys=True))

    def tags(self) -> dict[str, str]:
        return {Tag.TRIAL_KEY: self.key, Tag.TRIAL_KEY_WITHOUT_CODE: self.key_without_code,
                Tag.TRIAL_KEY_PARTS: json.dumps(dict(self.parts), sort_keys=True)}

    def differing(self, parts: Mapping[str, str]) -> list[str]:
        """The parts in which another trial's key (its stored parts) differs from this one."""
        return [name for name in PARTS if self.parts.get(name) != parts.get(name)]


def changed_knobs(ran: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The counted knobs (bookkeeping left out, as in the key's ``knobs`` part) whose values differ between two
    resolved configs of one method, each as (value in ``ran``, value in ``now``), None where a config lacks it."""
    ran, now = plain(dict(ran)), plain(dict(now))
    bookkeeping = get_method(now["method"]).all_knobs.bookkeeping
    counted = sorted((set(ran) | set(now)) - bookkeeping)
    return {k: (ran.get(k), now.get(k)) for k in counted if ran.get(k) != now.get(k)}


def trial_key(config: Mapping[str, Any]) -> TrialKey:
    """The key of a trial that runs ``config`` (a resolved config, GLUE's fine-tuning knobs included)."""
    method = get_method(config["method"])
    counted = {k: v for k, v in plain(dict(config)).items() if k not in method.all_knobs.bookkeeping}
    models = {knob: model_identity(config[knob]) for knob in MODEL_KNOBS if config.get(knob)}
    precision = {knob: _precision(setting, graphed) for knob, (setting, graphed) in precision_settings(config).items()}
    return TrialKey({
        "knobs": text_digest(json.dumps(counted, sort_keys=True)),
        "models": text_digest(json.dumps(models, sort_keys=True)),
        "data": text_digest(json.dumps(data_parts(config), sort_keys=True)),
        "precision": json.dumps(precision, sort_keys=True),
        "libraries": f"torch {version('torch')}, transformers {version('transformers')}",
        "code": code_digest(),
    })
