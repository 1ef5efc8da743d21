"""SCT: self-supervised cross-view training with instance queues (Limkonchotiwat et al.).

Two views of each sentence go through the online encoder f_theta (plus the
projector h) and through a reference encoder f_ref. The online distribution
of view 1 over queue D2 is trained to match the reference distribution of
view 2 over D2, and vice versa (Eq. 2); D1 and D2 are FIFO queues of the
reference vectors of views 1 and 2 (Section 3.1). Mean pooling, all encoder
outputs normalised. The batch is enqueued at the start of its step (Section
3.1), so each distribution is over the queue extended by the batch's
reference vectors of that view, as in the authors' code; the oldest entries
make room after the step. The 'contrastive' ablation is MoCo-style: the
positive against the queue alone.

f_ref is by default the online encoder itself under stop-gradient (the paper:
"the architecture and weights of f_ref and f_theta are identical"; the
authors' code runs a second no-grad pass of the same model, which differs only
by its dropout mask); ``reference='momentum'`` is Table 4's momentum encoder
and ``'frozen'`` keeps the model as it was before training.

Views: back-translations from a precomputed file (``bt1``/``bt2``, the paper's
default, ``bt1`` twice for "same BT"), masked-LM rewriting (``mlm``, 15%),
one-word synonym replacement (``synonym``, WordNet), ConSERT's embedding-layer
augmentations (the same random transformation for the online and the
reference pass of a view), or ``dropout_mask``. Offline, the defaults are
ConSERT's shuffle and feature cutoff on the unlabelled STS sentences, and
they are recorded in every run's params.

Distillation (Section 3.4, Tables 6 and 7): a frozen teacher f_large encodes
the text of each view (the plain sentence for embedding-layer views) and
fills its own two queues; the student's pooled vector, mapped into the
teacher's space (a Linear + tanh when the widths differ, as in the authors'
code), is trained with ``distillation`` (L_CD, L_MSE, L_ConGen or L_CKD) plus
L_SCT unless ``self_supervised`` is off. The ablation knobs act on L_SCT. The
teacher is frozen and in eval mode, so its vector of a fixed text is computed
once and shared across steps, epochs and the trials of a node
(``share_frozen_outputs``, :mod:`trainers.frozen_outputs`); random rewrites
(mlm, synonym) are encoded every time.
"""

from __future__ import annotations

import copy
import csv
import math
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainers.augmentations import AUGMENTATIONS, RATE_KNOBS, augmentation_rates, augmented_hidden_states
from trainers.data import DataError, corpus_problem, load_corpus
from trainers.encoder import POOLINGS, SentenceEncoder, masked_mean, model_problem
from trainers.frozen_outputs import FROZEN_OUTPUT_KNOBS, FrozenOutputs, each_alone, model_key
from trainers.knobs import Knob, KnobSet
from trainers.losses.distillation import DISTILLATION_LOSSES, cd_loss, ckd_loss, congen_loss, mse_loss
from trainers.losses.sct import queue_contrastive_loss, sct_loss
from trainers.method import Config, Method, Objective, single_stage
from trainers.queues import InstanceQueue
from trainers.text_augmentations import (
    MaskedLMRewriter,
    mlm_problem,
    replace_one_synonym,
    wordnet_problem,
    wordnet_synonyms,
)

TEXT_VIEWS = ("bt1", "bt2")
REWRITE_VIEWS = ("mlm", "synonym")
VIEWS = AUGMENTATIONS + ("dropout_mask",) + TEXT_VIEWS + REWRITE_VIEWS
BT_COLUMNS = ("sentence", "bt1", "bt2")
HEADER = "\t".join(BT_COLUMNS)


def projector(width: int, expansion: int) -> nn.Sequential:
    """h: three MLP layers, each Linear(u -> u*w), ReLU, Linear(u*w -> u) (Section 4.1)."""
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(width, width * expansion), nn.ReLU(), nn.Linear(width * expansion, width)]
    return nn.Sequential(*layers)


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


class Teacher(nn.Module):
    """f_large for distillation: a frozen encoder, its two instance queues (T1, T2), and the map
    of the student's pooled vectors into its space."""

    def __init__(self, config: Config, student_width: int, generator: torch.Generator):
        super().__init__()
        self.encoder = SentenceEncoder.from_pretrained(config["teacher"], config["teacher_pooling"])
        self.encoder.eval().requires_grad_(False)
        self.shared = None
        if config["share_frozen_outputs"]:
            key = {"outputs": "sct-teacher", **model_key(self.encoder.model, self.encoder.tokenizer),
                   "pooling": self.encoder.pooling, "layer": self.encoder.layer,
                   "max_length": config["max_seq_length"], "normalized": True}
            self.shared = FrozenOutputs.from_config(config, key)
        width = self.encoder.model.config.hidden_size
        same = width == student_width
        self.to_teacher = nn.Identity() if same else nn.Sequential(nn.Linear(student_width, width), nn.Tanh())
        self.queue_list = nn.ModuleList(InstanceQueue(config["queue_size"], width, generator) for _ in range(2))
        self.max_length = config["max_seq_length"]

    def train(self, mode: bool = True) -> "Teacher":
        super().train(mode)
        self.encoder.eval()
        return self

    @torch.no_grad()
    def compute_vectors(self, texts: Sequence[str]) -> Tensor:
        return F.normalize(self.encoder(self.encoder.tokenize(texts, self.max_length)), dim=1)

    def vectors(self, texts: Sequence[str], fixed_texts: bool) -> Tensor:
        """The teacher's vectors of ``texts``; shared across steps and trials when the texts are fixed
        (not a random rewrite) and ``share_frozen_outputs`` is on."""
        if not fixed_texts:
            return self.compute_vectors(texts)
        if self.shared is None:
            return each_alone(self.compute_vectors, texts)
        return self.shared.get(texts, self.compute_vectors, self.encoder.device)

    def loss(self, config: Config, student: tuple[Tensor, Tensor], teacher: tuple[Tensor, Tensor]) -> Tensor:
        online = tuple(F.normalize(self.to_teacher(z), dim=1) for z in student)
        queues = (self.queue_list[0].vectors, self.queue_list[1].vectors)
        tau_online, tau_teacher = config["tau_theta"], config["tau_ref"]
        kind = config["distillation"]
        if kind == "cd":  # over T1, T2 extended by the batch, like L_SCT (and the authors' code)
            extended = (self.queue_list[0].extended(teacher[0]), self.queue_list[1].extended(teacher[1]))
            return cd_loss(online, teacher, extended, tau_online, tau_teacher)
        if kind == "mse":
            return mse_loss(online, teacher)
        if kind == "congen":
            return congen_loss(online, teacher[0], queues[0], tau_online, tau_teacher)
        return ckd_loss(online, teacher, queues, tau_online)

    def enqueue(self, teacher: tuple[Tensor, Tensor]) -> None:
        for queue, vectors in zip(self.queue_list, teacher):
            queue.enqueue(vectors)


class SCTObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        self.reference = None
        if config["reference"] != "online":
            self.reference = copy.deepcopy(encoder).eval().requires_grad_(False)
        width = encoder.model.config.hidden_size
        self.head = projector(width, config["projector_expansion"]) if config["projector"] else nn.Identity()
        generator = torch.Generator().manual_seed(config["seed"])
        count = 1 if config["queues"] == "one" else 2
        self.queue_list = nn.ModuleList(InstanceQueue(config["queue_size"], width, generator) for _ in range(count))
        self.teacher = Teacher(config, width, generator) if config["distillation"] != "none" else None
        self.config = dict(config)
        self.views = (config["view1"], config["view2"])
        self.rates = augmentation_rates(config)
        self.rewrite_generator = torch.Generator().manual_seed(config["seed"])
        self.mlm = MaskedLMRewriter(config["mlm_model"]) if "mlm" in self.views else None
        self._pending: tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor] | None] | None = None

    def train(self, mode: bool = True) -> "SCTObjective":
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()
        return self

    def rebuilt_modules(self) -> tuple[str, ...]:
        # Frozen parts are loaded again from the config on resume; a momentum reference is trained state.
        frozen = ("reference",) if self.config["reference"] == "frozen" else ()
        return frozen + (("teacher.encoder",) if self.teacher is not None else ()) + (("mlm",) if self.mlm else ())

    def get_extra_state(self) -> dict[str, Tensor]:
        return {"rewrite_generator": self.rewrite_generator.get_state()}

    def set_extra_state(self, state: dict[str, Tensor]) -> None:
        self.rewrite_generator.set_state(state["rewrite_generator"])

    def _texts(self, batch: Sequence[Any], view: str) -> list[str]:
        if view in TEXT_VIEWS:
            return [example[BT_COLUMNS.index(view)] for example in batch]
        sentences = [example if isinstance(example, str) else example[0] for example in batch]
        if view == "mlm":
            return self.mlm(sentences, self.rewrite_generator, self.config["max_seq_length"])
        if view == "synonym":
            return [replace_one_synonym(s, wordnet_synonyms, self.rewrite_generator) for s in sentences]
        return sentences

    def _encode(self, encoder: SentenceEncoder, features: dict[str, Tensor], view: str, seed: int) -> Tensor:
        augmentation = view if view in AUGMENTATIONS else "none"
        # The same seed gives the online and the reference pass the same random transformation.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            states = augmented_hidden_states(encoder, features, augmentation, self.rates.get(augmentation, 0.0))
        return masked_mean(states[-1], features["attention_mask"])

    def loss(self, batch: Sequence[Any]) -> Tensor:
        config = self.config
        pooled, reference, teacher = [], [], []
        for view in self.views:
            texts = self._texts(batch, view)
            features = self.encoder.tokenize(texts, config["max_seq_length"])
            seed = int(torch.randint(2**31 - 1, ()))
            pooled.append(self._encode(self.encoder, features, view, seed))
            if self.reference is None:  # f_ref is f_theta under stop-gradient
                reference.append(F.normalize(pooled[-1].detach(), dim=1))
            else:
                with torch.no_grad():
                    reference.append(F.normalize(self._encode(self.reference, features, view, seed), dim=1))
            if self.teacher is not None:
                teacher.append(self.teacher.vectors(texts, fixed_texts=view not in REWRITE_VIEWS))
        teacher_pair = (teacher[0], teacher[1]) if teacher else None
        self._pending = ((reference[0], reference[1]), teacher_pair)
        total = torch.zeros((), device=pooled[0].device)
        if config["self_supervised"]:
            online = tuple(F.normalize(self.head(z), dim=1) for z in pooled)
            total = total + self._self_supervised_loss(online, (reference[0], reference[1]))
        if teacher_pair is not None:
            total = total + self.teacher.loss(config, (pooled[0], pooled[1]), teacher_pair)
        return total

    def _self_supervised_loss(self, online: tuple[Tensor, ...], reference: tuple[Tensor, Tensor]) -> Tensor:
        config = self.config
        if config["objective"] == "contrastive":
            return queue_contrastive_loss(online, reference, self._queues(reference), config["tau_theta"])
        return sct_loss(
            online, reference, self.candidates(reference), config["tau_theta"], config["tau_ref"],
            divergence=config["objective"], cross_view=config["cross_view"],
        )

    def _queues(self, reference: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """D1 and D2 as they stand before this step (the batch's reference vectors without a queue)."""
        if self.config["queues"] == "in_batch":
            return reference
        vectors = [q.vectors for q in self.queue_list]
        return (vectors[0], vectors[-1])

    def candidates(self, reference: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """What SR(., D1) and SR(., D2) range over: each queue extended by the batch's reference
        vectors that enter it (both views for the single queue)."""
        if self.config["queues"] == "in_batch":
            return reference
        if self.config["queues"] == "one":
            shared = self.queue_list[0].extended(torch.cat(reference))
            return shared, shared
        return self.queue_list[0].extended(reference[0]), self.queue_list[1].extended(reference[1])

    def statistics(self) -> dict[str, float]:
        shared = self.teacher.shared if self.teacher is not None else None
        return shared.statistics("frozen_outputs") if shared else {}

    @torch.no_grad()
    def after_step(self) -> None:
        if self.config["reference"] == "momentum":
            m = self.config["momentum"]
            for ref, online in zip(self.reference.parameters(), self.encoder.parameters()):
                ref.mul_(m).add_(online.detach(), alpha=1 - m)
        if self._pending is None:
            return
        (first, second), teacher = self._pending
        self._pending = None
        if teacher is not None:
            self.teacher.enqueue(teacher)
        if not self.config["queue_update"] or self.config["queues"] == "in_batch":
            return
        if self.config["queues"] == "one":
            self.queue_list[0].enqueue(torch.cat([first, second]))
        else:
            self.queue_list[0].enqueue(first)
            self.queue_list[1].enqueue(second)


def sct_examples(config: Config) -> Sequence[Any]:
    if set((config["view1"], config["view2"])) & set(TEXT_VIEWS):
        return read_backtranslations(config["bt_file"])
    return load_corpus(config["train_corpus"], config["sts_source"])


def sct_problems(config: Config) -> list[str]:
    problems = []
    views = {config["view1"], config["view2"]}
    if views & set(TEXT_VIEWS):
        if config["bt_file"] and not Path(config["bt_file"]).is_file():
            problems.append(f"bt_file: {config['bt_file']!r} does not exist (expected a TSV with columns "
                            f"{', '.join(BT_COLUMNS)})")
        elif not config["bt_file"]:
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
    if "mlm" in views:
        problem = mlm_problem(config["mlm_model"])
        if problem:
            problems.append(f"mlm_model: {problem}")
    elif config["mlm_model"]:
        problems.append("mlm_model: given, but neither view is mlm")
    if "synonym" in views and (problem := wordnet_problem()):
        problems.append(f"view1/view2: the synonym view {problem}")
    if config["objective"] == "contrastive" and not config["cross_view"]:
        problems.append("cross_view: the contrastive objective is always cross-view")
    problems += _distillation_problems(config)
    return problems


def queue_fill_warnings(config: Config, steps: int) -> list[str]:
    """An instance queue holds real sentence vectors only after k / (vectors per step) steps; until
    then most of it is the random vectors it started with, far from the paper's regime."""
    if config["queues"] == "in_batch" or not config["queue_update"]:
        return []  # no queue, or the ablation that keeps the random one on purpose
    per_step = config["batch_size"] * (2 if config["queues"] == "one" else 1)
    fill = math.ceil(config["queue_size"] / per_step)
    if steps >= fill:
        return []
    return [
        f"queue_size: a queue of k = {config['queue_size']:,} takes {fill:,} steps to fill at {per_step} "
        f"vectors per step (batch_size {config['batch_size']}); this trial trains {steps:,} steps, so most "
        f"of the queue stays the random vectors it started with: train >= {fill:,} steps (max_steps) "
        f"or lower queue_size to <= {steps * per_step:,}"
    ]


def _distillation_problems(config: Config) -> list[str]:
    if config["distillation"] == "none":
        problems = ["teacher: given, but distillation is 'none'"] if config["teacher"] else []
        if not config["self_supervised"]:
            problems.append("self_supervised: off with distillation 'none' leaves no loss to train")
        return problems
    if not config["teacher"]:
        return [f"teacher: distillation {config['distillation']!r} needs a teacher model (id or folder)"]
    problem = model_problem(config["teacher"])
    return [f"teacher: {problem}"] if problem else []


METHOD = Method(
    name="sct",
    summary="SCT: cross-view similarity-distribution matching against instance queues, optionally distilled.",
    knobs=KnobSet(
        (
            Knob("view1", str, "shuffle", "Augmentation making view 1: bt1/bt2 (back-translation file), mlm "
                 "(masked-LM rewriting of 15% of the tokens), synonym (one WordNet synonym), a ConSERT "
                 "augmentation, or dropout_mask. The paper uses bt1.", choices=VIEWS),
            Knob("view2", str, "feature_cutoff", "Augmentation making view 2 (paper: bt2; 'same BT' = bt1).",
                 choices=VIEWS),
            Knob("bt_file", str, "", "TSV of (sentence, bt1, bt2) for back-translation views."),
            Knob("mlm_model", str, "", "Masked LM (id or folder, with its MLM head) that rewrites the mlm view."),
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
            Knob("reference", str, "online", "f_ref: the online encoder under stop-gradient ('online', the paper), "
                 "a momentum encoder ('momentum', Table 4), or the model as it was before training ('frozen').",
                 choices=("online", "momentum", "frozen")),
            Knob("momentum", float, 0.999, "EMA factor of the momentum reference.", low=0.0, high=1.0),
            Knob("projector", bool, True, "Use the projector h (False: the 'no MLPs' ablation)."),
            Knob("projector_expansion", int, 10, "Expansion factor w of the projector.", low=1),
            Knob("distillation", str, "none", "Distillation loss with a teacher (Tables 6 and 7): 'cd' (L_CD, "
                 "Eq. 4), 'mse', 'congen' or 'ckd'; 'none' trains L_SCT alone.",
                 choices=("none",) + DISTILLATION_LOSSES),
            Knob("self_supervised", bool, True, "Add L_SCT to the distillation loss (False: the distillation "
                 "loss alone, Table 7)."),
            Knob("teacher", str, "", "Teacher f_large for distillation: a Hugging Face model id or folder (the "
                 "paper: princeton-nlp/unsup-simcse-bert-large-uncased)."),
            Knob("teacher_pooling", str, "mean", "How the teacher pools its token vectors.", choices=POOLINGS),
        )
    )
    + RATE_KNOBS
    + FROZEN_OUTPUT_KNOBS,
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
    stages=single_stage(SCTObjective, sct_examples),
    check=sct_problems,
    regime=queue_fill_warnings,
    shared_outputs=lambda config: (
        "the teacher's vectors" if config["share_frozen_outputs"] and config["distillation"] != "none" else None
    ),
)
