"""SCT's objective (declared in :mod:`trainers.methods.sct`): cross-view distributions over instance
queues, with the distillation teacher when one is set."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainers.common_knobs import AUGMENTATIONS
from trainers.data.wordnet import wordnet_synonyms
from trainers.losses.sct import in_batch_contrastive_loss, queue_contrastive_loss, sct_loss
from trainers.method import Config
from trainers.methods.sct import REWRITE_VIEWS, teacher_table, view_texts
from trainers.metrics import Metric
from trainers.models.batches import TokenBatch
from trainers.models.encoder import SentenceEncoder
from trainers.models.queues import InstanceQueue
from trainers.objectives.base import Objective
from trainers.objectives.nli import mean_last_layer
from trainers.objectives.sct_distillation import Teacher
from trainers.views.embedding import augmentation_rates, augmented_states, drawn_augmentation
from trainers.views.text import MaskedLMRewriter, replace_one_synonym


class View(NamedTuple):
    """One view of a batch as the step's host work leaves it on the device: its tokens, and the draw of the
    embedding-layer augmentation that makes it (None for a text view or dropout_mask)."""

    tokens: TokenBatch
    drawn: Tensor | None


def projector(width: int, expansion: int) -> nn.Sequential:
    """h: three MLP layers, each Linear(u -> u*w), ReLU, Linear(u*w -> u) (Section 4.1)."""
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(width, width * expansion), nn.ReLU(), nn.Linear(width * expansion, width)]
    return nn.Sequential(*layers)


REWRITE_BATCH = 128
"""Sentences a batch of the rewrites made once (``rewrite_views`` 'once'), in the corpus's order."""
ONLINE_REFERENCES = ("online", "online_same_pass")
"""The ``reference`` settings whose f_ref is the online encoder f_theta itself (no copy of it)."""


class SCTObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        self.reference = None
        if config["reference"] not in ONLINE_REFERENCES:
            self.reference = copy.deepcopy(encoder).eval().requires_grad_(False)
        width = encoder.output_width  # with a student's map (distillation_map 'encoder'), the teacher's
        self.head = projector(width, config["projector_expansion"]) if config["projector"] else nn.Identity()
        generator = torch.Generator().manual_seed(config["seed"])
        count = 1 if config["queues"] == "one" else 2
        self.queue_list = nn.ModuleList(InstanceQueue(config["queue_size"], width, generator) for _ in range(count))
        self.teacher = Teacher(config, width, generator) if config["distillation"] != "none" else None
        self.config = dict(config)
        self.views = (config["view1"], config["view2"])
        self.augmentations = tuple(view if view in AUGMENTATIONS else "none" for view in self.views)
        self.rates = augmentation_rates(config)
        self.rewrite_generator = torch.Generator().manual_seed(config["seed"])
        self.mlm = MaskedLMRewriter(config["mlm_model"]) if "mlm" in self.views else None
        # rewrite_views 'once': each view's fixed rewrite of every training sentence, made in prepare()
        self.fixed_rewrites: list[dict[str, str] | None] = [None, None]
        self.to_max_length = config["pad_to_max_length"]
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

    def prepare(self, examples: Sequence[Any]) -> None:
        """The teacher's table; with ``rewrite_views`` 'once', each rewriting view's rewrite of every distinct
        sentence, view 1's then view 2's, in the corpus's order and batches, from a generator of the seed alone:
        the same on resume."""
        if self.teacher is not None:
            self.teacher.prepare(teacher_table(self.config).texts(examples))
        rewriting = [(position, view) for position, view in enumerate(self.views) if view in REWRITE_VIEWS]
        if self.config["rewrite_views"] != "once" or not rewriting:
            return
        sentences = list(dict.fromkeys(view_texts(example, "sentence") for example in examples))
        generator = torch.Generator().manual_seed(self.config["seed"])
        for position, view in rewriting:
            rewritten = [text for start in range(0, len(sentences), REWRITE_BATCH)
                         for text in self._rewrite(sentences[start : start + REWRITE_BATCH], view, generator)]
            self.fixed_rewrites[position] = dict(zip(sentences, rewritten))

    def _rewrite(self, sentences: list[str], view: str, generator: torch.Generator) -> list[str]:
        if view == "mlm":
            return self.mlm(sentences, generator, self.config["max_seq_length"])
        return [replace_one_synonym(s, wordnet_synonyms, generator) for s in sentences]

    def _texts(self, batch: Sequence[Any], view: str, position: int) -> list[str]:
        """The texts of view ``view`` (view 1's or view 2's: ``position``) of a batch."""
        if view not in REWRITE_VIEWS:
            return [view_texts(example, view) for example in batch]
        sentences = [view_texts(example, "sentence") for example in batch]
        if self.config["rewrite_views"] == "per_step":
            return self._rewrite(sentences, view, self.rewrite_generator)
        fixed = self.fixed_rewrites[position]
        if fixed is None:
            raise RuntimeError("rewrite_views 'once' rewrites the sentences in prepare(), which has not run")
        return [fixed[sentence] for sentence in sentences]

    def inputs(self, batch: Sequence[Any]) -> tuple[View, View, tuple[Tensor, Tensor] | None]:
        """The step's host work: each view's :class:`View` (its texts, a rewriting view's looked up in its fixed
        copy or rewritten on the host's generator, their tokens, its augmentation drawn on the CPU's), and the
        teacher's vectors of both views' texts when there is a teacher (its table's rows, or its pass over a
        rewrite), on the device."""
        views, teacher = [], []
        for position, (view, augmentation) in enumerate(zip(self.views, self.augmentations)):
            texts = self._texts(batch, view, position)
            tokens = self.encoder.tokenize(texts, self.config["max_seq_length"], self.to_max_length)
            # One draw for both passes: the online and the reference encoder see the same transformation.
            drawn = drawn_augmentation(self.encoder, tokens, augmentation, self.rates.get(augmentation, 0.0))
            views.append(View(tokens, drawn))
            if self.teacher is not None:
                teacher.append(self.teacher.vectors(texts, fixed_texts=view not in REWRITE_VIEWS))
        return views[0], views[1], (teacher[0], teacher[1]) if teacher else None

    def pooled(self, encoder: SentenceEncoder, view: View, augmentation: str) -> Tensor:
        """``encoder``'s mean-pooled vectors of a view, its drawn ``augmentation`` applied at the embedding layer,
        through the encoder's map after pooling where it has one (a distilled student's)."""
        states = augmented_states(encoder, view.tokens, augmentation, view.drawn)
        return encoder.mapped(mean_last_layer(states, view.tokens))

    def device_loss(self, features: tuple[View, View, tuple[Tensor, Tensor] | None]) -> Tensor:
        """L_SCT (Eq. 2), plus the distillation loss with a teacher, of a batch :meth:`inputs` made, from the
        device's tensors alone: what a CUDA graph of the step records (:mod:`trainers.training.graphs`). The
        batch's reference vectors wait in ``_pending`` for :meth:`after_update`, in the same step."""
        config = self.config
        *views, teacher_pair = features
        pooled, reference = [], []
        for view, augmentation in zip(views, self.augmentations):
            pooled.append(self.pooled(self.encoder, view, augmentation))
            if config["reference"] == "online_same_pass":  # f_theta's vectors of this pass, under stop-gradient
                reference.append(F.normalize(pooled[-1].detach(), dim=1))
                continue
            # f_ref encodes the view again (Section 3.1): f_theta itself, with a dropout mask of its own, or its copy
            encoder = self.encoder if self.reference is None else self.reference
            with torch.no_grad():
                reference.append(F.normalize(self.pooled(encoder, view, augmentation), dim=1))
        self._pending = ((reference[0], reference[1]), teacher_pair)
        total = torch.zeros((), device=pooled[0].device)
        if config["self_supervised"]:
            online = tuple(F.normalize(self.head(z), dim=1) for z in pooled)
            total = total + self._self_supervised_loss(online, (reference[0], reference[1]))
        if teacher_pair is not None:
            total = total + self.teacher.loss(config, (pooled[0], pooled[1]), teacher_pair)
        return total

    def loss(self, batch: Sequence[Any]) -> Tensor:
        return self.device_loss(self.inputs(batch))

    def _self_supervised_loss(self, online: tuple[Tensor, ...], reference: tuple[Tensor, Tensor]) -> Tensor:
        config = self.config
        if config["objective"] == "contrastive" and config["queues"] == "in_batch":
            return in_batch_contrastive_loss(online, reference, config["tau_theta"])
        if config["objective"] == "contrastive":
            return queue_contrastive_loss(online, reference, self._queues(reference), config["tau_theta"])
        return sct_loss(
            online, reference, self.candidates(reference), config["tau_theta"], config["tau_ref"],
            divergence=config["objective"], cross_view=config["cross_view"],
        )

    def _queues(self, reference: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """D1 and D2 as they stand before this step."""
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
        return self.teacher.table.statistics(Metric.FROZEN_OUTPUTS) if self.teacher is not None else {}

    @torch.no_grad()
    def after_update(self) -> None:
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
