"""SCT: self-supervised cross-view training with instance queues (Limkonchotiwat et al.).

Two views of each sentence go through the online encoder f_theta (plus the
projector h) and through a frozen reference encoder f_ref. The online
distribution of view 1 over queue D2 is trained to match the reference
distribution of view 2 over D2, and vice versa (Eq. 2); D1 and D2 are FIFO
queues of the reference vectors of views 1 and 2 (Section 3.1). Mean pooling,
all encoder outputs normalised. Queues are read before the step and the
batch's reference vectors are enqueued after it.

Views: back-translations from a precomputed file (``bt1``/``bt2``, the paper's
default, ``bt1`` twice for "same BT"), ConSERT's embedding-layer
augmentations (the same random transformation is applied to the online and
the reference pass of a view), or ``dropout_mask``. Offline, the defaults are
ConSERT's shuffle and feature cutoff on the unlabelled STS sentences, and
they are recorded in every run's params. Distillation (Section 3.4, Tables 6
and 7), MLM and synonym views are not implemented.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainers.augmentations import AUGMENTATIONS, augmented_hidden_states
from trainers.data import DataError, corpus_problem, load_corpus
from trainers.encoder import SentenceEncoder, masked_mean
from trainers.knobs import Knob, KnobSet
from trainers.losses.sct import queue_contrastive_loss, sct_loss
from trainers.method import Config, Method, Objective
from trainers.queues import InstanceQueue

TEXT_VIEWS = ("bt1", "bt2")
VIEWS = AUGMENTATIONS + ("dropout_mask",) + TEXT_VIEWS
BT_COLUMNS = ("sentence", "bt1", "bt2")
HEADER = "\t".join(BT_COLUMNS)


def projector(width: int, expansion: int) -> nn.Sequential:
    """h: three MLP layers, each Linear(u -> u*w), ReLU, Linear(u*w -> u) (Section 4.1)."""
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(width, width * expansion), nn.ReLU(), nn.Linear(width * expansion, width)]
    return nn.Sequential(*layers)


def keep_first_layers(encoder: SentenceEncoder, layers: int) -> None:
    """Cut a student from a deeper model: keep its first ``layers`` transformer layers."""
    blocks = encoder.model.encoder.layer
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"student_layers={layers}: the model has {len(blocks)} layers")
    encoder.model.encoder.layer = blocks[:layers]
    encoder.model.config.num_hidden_layers = layers


def read_backtranslations(path: str | Path) -> list[tuple[str, str, str]]:
    """(sentence, bt1, bt2) rows of a TSV written by ``python -m trainers.backtranslate``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a TSV with columns {', '.join(BT_COLUMNS)})")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or tuple(rows[0]) != BT_COLUMNS:
        raise DataError(f"{path}:1: expected the header {HEADER!r}")
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != 3:
            raise DataError(f"{path}:{number}: expected 3 tab-separated fields, got {len(row)}")
    return [tuple(row) for row in rows[1:]]


class SCTObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        if config["student_layers"]:
            keep_first_layers(encoder, config["student_layers"])
        self.reference = copy.deepcopy(encoder).eval()
        self.reference.requires_grad_(False)
        width = encoder.model.config.hidden_size
        self.head = projector(width, config["projector_expansion"]) if config["projector"] else nn.Identity()
        generator = torch.Generator().manual_seed(config["seed"])
        count = 1 if config["queues"] == "one" else 2
        self.queue_list = nn.ModuleList(InstanceQueue(config["queue_size"], width, generator) for _ in range(count))
        self.config = dict(config)
        self.views = (config["view1"], config["view2"])
        self.rates = {"token_cutoff": 0.15, "feature_cutoff": 0.2, "dropout": 0.2, "span_cutoff": 0.2}
        self._pending: tuple[Tensor, Tensor] | None = None

    def train(self, mode: bool = True) -> "SCTObjective":
        super().train(mode)
        self.reference.eval()
        return self

    def _texts(self, batch: Sequence[Any], view: str) -> list[str]:
        if view in TEXT_VIEWS:
            return [example[BT_COLUMNS.index(view)] for example in batch]
        return [example if isinstance(example, str) else example[0] for example in batch]

    def _encode(self, encoder: SentenceEncoder, features: dict[str, Tensor], view: str, seed: int) -> Tensor:
        augmentation = view if view in AUGMENTATIONS else "none"
        # The same seed gives the online and the reference pass the same random transformation.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            states = augmented_hidden_states(encoder, features, augmentation, self.rates.get(augmentation, 0.0))
        return masked_mean(states[-1], features["attention_mask"])

    def loss(self, batch: Sequence[Any]) -> Tensor:
        config = self.config
        online, reference = [], []
        for view in self.views:
            features = self.encoder.tokenize(self._texts(batch, view), config["max_seq_length"])
            seed = int(torch.randint(2**31 - 1, ()))
            online.append(F.normalize(self.head(self._encode(self.encoder, features, view, seed)), dim=1))
            with torch.no_grad():
                reference.append(F.normalize(self._encode(self.reference, features, view, seed), dim=1))
        self._pending = (reference[0], reference[1])
        queues = self._queues(reference)
        if config["objective"] == "contrastive":
            return queue_contrastive_loss(tuple(online), tuple(reference), queues, config["tau_theta"])
        return sct_loss(
            tuple(online), tuple(reference), queues, config["tau_theta"], config["tau_ref"],
            divergence=config["objective"], cross_view=config["cross_view"],
        )

    def _queues(self, reference: list[Tensor]) -> tuple[Tensor, Tensor]:
        if self.config["queues"] == "in_batch":
            return reference[0], reference[1]
        vectors = [q.vectors for q in self.queue_list]
        return (vectors[0], vectors[-1])

    @torch.no_grad()
    def after_step(self) -> None:
        if self.config["reference"] == "momentum":
            m = self.config["momentum"]
            for ref, online in zip(self.reference.parameters(), self.encoder.parameters()):
                ref.mul_(m).add_(online.detach(), alpha=1 - m)
        if self._pending is None or not self.config["queue_update"] or self.config["queues"] == "in_batch":
            return
        first, second = self._pending
        if self.config["queues"] == "one":
            self.queue_list[0].enqueue(torch.cat([first, second]))
        else:
            self.queue_list[0].enqueue(first)
            self.queue_list[1].enqueue(second)
        self._pending = None


def sct_examples(config: Config) -> Sequence[Any]:
    if set((config["view1"], config["view2"])) & set(TEXT_VIEWS):
        return read_backtranslations(config["bt_file"])
    return load_corpus(config["train_corpus"], config["sts_source"])


def sct_problems(config: Config) -> list[str]:
    problems = []
    if set((config["view1"], config["view2"])) & set(TEXT_VIEWS):
        if not config["bt_file"] or not Path(config["bt_file"]).is_file():
            problems.append(
                f"view1/view2: a back-translation view needs bt_file, a TSV ({', '.join(BT_COLUMNS)}) that "
                f"`python -m trainers.backtranslate` writes on a machine with translation models; got {config['bt_file']!r}"
            )
    else:
        if config["bt_file"]:
            problems.append("bt_file: given, but neither view uses it (set view1/view2 to bt1/bt2)")
        problem = corpus_problem(config["train_corpus"])
        if problem:
            problems.append(f"train_corpus: {problem}")
    if config["objective"] == "contrastive" and not config["cross_view"]:
        problems.append("cross_view: the contrastive objective is always cross-view")
    return problems


METHOD = Method(
    name="sct",
    summary="SCT: cross-view similarity-distribution matching against instance queues of a frozen reference.",
    knobs=KnobSet(
        (
            Knob("view1", str, "shuffle", "Augmentation making view 1: bt1/bt2 (back-translation file), a ConSERT "
                 "augmentation, or dropout_mask. The paper uses bt1.", choices=VIEWS),
            Knob("view2", str, "feature_cutoff", "Augmentation making view 2 (paper: bt2; 'same BT' = bt1).",
                 choices=VIEWS),
            Knob("bt_file", str, "", "TSV of (sentence, bt1, bt2) for back-translation views."),
            Knob("tau_theta", float, 0.03, "Temperature of the online distributions.", low=1e-4, high=10.0),
            Knob("tau_ref", float, 0.02, "Temperature of the reference distributions.", low=1e-4, high=10.0),
            Knob("queue_size", int, 65536, "Length k of each instance queue.", low=1),
            Knob("queues", str, "two", "'two' (D1, D2), 'one' (a single shared queue) or 'in_batch' (no queue: "
                 "the batch's reference vectors).", choices=("two", "one", "in_batch")),
            Knob("queue_update", bool, True, "Enqueue the reference vectors after each step (False: the random "
                 "initial negatives stay)."),
            Knob("objective", str, "kl", "'kl' (L_SCT), 'ce' (KL -> CE: hard reference targets), or "
                 "'contrastive' (distribution -> contrastive).", choices=("kl", "ce", "contrastive")),
            Knob("cross_view", bool, True, "Compare across views (False: the identical-view ablation)."),
            Knob("reference", str, "frozen", "f_ref: a frozen copy ('frozen') or a momentum encoder ('momentum').",
                 choices=("frozen", "momentum")),
            Knob("momentum", float, 0.999, "EMA factor of the momentum reference.", low=0.0, high=1.0),
            Knob("projector", bool, True, "Use the projector h (False: the 'no MLPs' ablation)."),
            Knob("projector_expansion", int, 10, "Expansion factor w of the projector.", low=1),
            Knob("student_layers", int, 0, "Keep only the first N transformer layers of the model (0 = all): small "
                 "students cut from the bundled model.", low=0),
        )
    ),
    defaults={
        "pooling": "mean",
        "batch_size": 128,
        "epochs": 10,
        "learning_rate": 3e-4,
        "warmup_ratio": 0.1,
        "eval_every": 64,
        "max_seq_length": 64,
        "train_corpus": "sts_all_sentences",
    },
    build=SCTObjective,
    check=sct_problems,
    examples=sct_examples,
)
