"""The stages before a trial's last, trained once per node for every trial that trains them alike.

ConSERT Table 3's seven BERT-flow rows (Li et al.'s "SBERT-base-flow (target)") each fine-tune the encoder on
labelled NLI, then fit a flow on one test set's texts: the NLI stage is the same in all seven, and on BERT-base
it is most of a row's time. A corpus axis over ConSERT's sup-unsup or joint-unsup shares their NLI stage the
same way. With ``share_stages`` (the default), a trial of a method with several stages that starts afresh:

- computes the key of its stages before the last (:func:`prefix_key`);
- under a file lock on ``<shared_stages_dir>/<key digest>.lock``, reads what the node's first trial of that key
  kept in ``<digest>/``: the encoder's state after those stages, the RNG states (Python's, NumPy's, torch's,
  CUDA's) and the reports those stages made (the dev evaluations of the metric history), which it replays to its
  own session; or, finding none, trains them itself, its reports recorded as they pass, and keeps them. The
  node's other trials of the key wait on the lock meanwhile;
- then trains its last stage from there, as it would have.

So the trial reports, checkpoints and ends exactly as one that trained every stage (``tests/test_shared_stages.py``
compares both ways bit for bit). A trial resumed from a checkpoint has its stages' state in it and shares
nothing. ``stages_reused`` (a final figure) says how many stages a trial read.

The key holds what those stages' numbers depend on: every knob but the bookkeeping ones and, when none of the
stages reads the training corpus (:attr:`~trainers.method.Stage.reads_corpus`: the NLI stages), the knobs that
only choose its texts (:attr:`~trainers.knobs.Knob.corpus`: ``train_corpus``, what the seven flow rows differ
in; ``bt_file``; ConSERT's ``transfer_limit``, what Figure 6's few-shot points differ in); the stages and their
overrides; each model a knob names, by content or hub revision; the stages' examples and the STS sets, by
content; the precisions as resolved here; the device (its name on a GPU), the number of threads, torch's and
transformers' versions and the training code.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from filelock import FileLock

from trainers.common_knobs import precision_settings
from trainers.data.sources import STSSet
from trainers.identity import MODEL_KNOBS, code_digest, json_digest, model_identity
from trainers.knobs import KnobSet
from trainers.method import Stage, settings_read
from trainers.node_cache import make_room, node_folder, write_whole
from trainers.training import precision
from trainers.training.checkpoint import TrialSession
from trainers.training.rng import rng_states, set_rng_states

ENVIRONMENT_FOLDER = "SWEEP_SHARED_STAGES_DIR"
KEY_FILE = "key.json"
REPORTS_FILE = "reports.json"
STATE_FILE = "state.pt"


def examples_digest(examples: Sequence[Any]) -> str:
    """A stage's examples by content, in their order."""
    digest = hashlib.blake2b(digest_size=16)
    for example in examples:
        digest.update(repr(example).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def sets_digest(sets: Mapping[str, STSSet]) -> str:
    """The STS sets an evaluator holds (its dev evaluations are part of the stages' reports), by content."""
    return json_digest({name: [list(s.sentence1), list(s.sentence2), s.scores.tolist()] for name, s in sets.items()})


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def prefix_key(config: Mapping[str, Any], stages: Sequence[Stage], examples: Sequence[Sequence[Any]],
               sets: Mapping[str, STSSet], device: torch.device, knobs: KnobSet) -> dict[str, Any]:
    """The key of ``stages`` (a trial's stages before its last) as ``config`` (of a method with ``knobs``) trains
    them on ``examples`` (one list per stage), evaluating on ``sets``, on ``device``."""
    return {
        **settings_read(config, stages, knobs),
        "models": {knob: model_identity(config[knob]) for knob in MODEL_KNOBS if config.get(knob)},
        "examples": [examples_digest(stage_examples) for stage_examples in examples],
        "sts": sets_digest(sets),
        "precision": {knob: precision.resolve(setting, device, graphed)
                      for knob, (setting, graphed) in precision_settings(config).items()},
        "device": device_name(device),
        "threads": torch.get_num_threads(),  # kernels may sum in another order with other thread counts
        "libraries": f"torch {version('torch')}, transformers {version('transformers')}",
        "code": code_digest(),
    }


class _Recording(TrialSession):
    """Passes a trial's reports on to its session and keeps a copy of their metrics."""

    def __init__(self, session: TrialSession):
        super().__init__()
        self.session = session
        self.keeps_checkpoints = session.keeps_checkpoints
        self.may_pause = session.may_pause
        self.reports: list[dict[str, Any]] = []

    def report(self, metrics: dict[str, Any], checkpoint: Path | None = None) -> None:
        self.reports.append(dict(metrics))
        self.session.report(metrics, checkpoint)


@dataclass(frozen=True)
class SharedStages:
    """A node's folder of shared stages (``shared_stages_dir``), bounded by ``shared_stages_gb``."""

    root: Path
    max_bytes: int

    @classmethod
    def of_trial(cls, config: Mapping[str, Any], stages: int) -> SharedStages | None:
        """The folder a trial of ``stages`` stages shares its stages before the last in; None when it shares
        none (one stage, or ``share_stages`` off)."""
        if stages < 2 or not config["share_stages"]:
            return None
        root = node_folder(config["shared_stages_dir"], ENVIRONMENT_FOLDER, "sweep-shared-stages")
        return cls(root, int(config["shared_stages_gb"] * 1e9))

    def train_once(self, key: Mapping[str, Any], encoder: torch.nn.Module, session: TrialSession,
                   train: Callable[[TrialSession], int]) -> tuple[int, bool]:
        """Leave ``encoder`` and the RNGs as ``train`` (the stages, reporting to the session it is given; returns
        the steps they took) leaves them, reading them where the node keeps the key's; returns the steps and
        whether they were read."""
        digest = json_digest(key)
        folder = self.root / digest
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / f"{digest}.lock")):  # the node's other trials of the key wait, then read
            if (folder / STATE_FILE).is_file():
                return self._read(folder, encoder, session), True
            recording = _Recording(session)
            steps = train(recording)
            self._keep(folder, key, encoder, steps, recording.reports)
            return steps, False

    @staticmethod
    def _read(folder: Path, encoder: torch.nn.Module, session: TrialSession) -> int:
        state = torch.load(folder / STATE_FILE, map_location=next(encoder.parameters()).device, weights_only=True)
        encoder.load_state_dict(state["encoder"])
        for metrics in json.loads((folder / REPORTS_FILE).read_text(encoding="utf-8")):
            session.report(metrics)
        set_rng_states(state["rng"])  # after the replay: a session's report draws nothing, but leave no doubt
        os.utime(folder)  # recently used: evicted last
        return int(json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))["steps"])

    def _keep(self, folder: Path, key: Mapping[str, Any], encoder: torch.nn.Module, steps: int,
              reports: list[dict[str, Any]]) -> None:
        state = {"encoder": encoder.state_dict(), "rng": rng_states()}
        size = sum(t.numel() * t.element_size() for t in state["encoder"].values())

        def write(partial: Path) -> None:
            torch.save(state, partial / STATE_FILE)
            (partial / REPORTS_FILE).write_text(json.dumps(reports, default=float), encoding="utf-8")
            (partial / KEY_FILE).write_text(json.dumps({**key, "steps": steps}, indent=2, sort_keys=True), "utf-8")

        try:
            if make_room(self.root, folder, size, self.max_bytes):
                write_whole(folder, write)
        except OSError:  # a full disk: this trial has trained its stages; the next trains them again
            pass
