"""SCT's distillation teacher f_large (its knobs declared in :mod:`trainers.methods.sct`, whose
docstring says what it computes)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainers.losses.distillation import cd_loss, ckd_loss, congen_loss, mse_loss
from trainers.method import Config
from trainers.models.encoder import SentenceEncoder
from trainers.models.frozen_outputs import FrozenOutputs, model_key
from trainers.models.pretrained import model_config
from trainers.models.queues import InstanceQueue
from trainers.models.student_map import StudentMap


def student_map_from_config(config: Config, student_width: int) -> StudentMap | None:
    """The student's map into the teacher's space as part of its sentence vector (``distillation_map``
    'encoder', the SCT method's map after pooling); None without a teacher, with 'loss', or at equal widths."""
    if config["distillation"] == "none" or config["distillation_map"] != "encoder":
        return None
    teacher_width = model_config(config["teacher"]).hidden_size
    return None if teacher_width == student_width else StudentMap(student_width, teacher_width, config["seed"])


class Teacher(nn.Module):
    """f_large for distillation: a frozen encoder, its two instance queues (T1, T2), and the map
    of the student's pooled vectors into its space."""

    def __init__(self, config: Config, student_width: int, generator: torch.Generator):
        super().__init__()
        self.encoder = SentenceEncoder.from_pretrained(config["teacher"], config["teacher_pooling"])
        self.encoder.eval().requires_grad_(False)
        key = {"outputs": "sct-teacher", **model_key(self.encoder.model, self.encoder.tokenizer),
               "pooling": self.encoder.pooling, "layer": self.encoder.layer,
               "max_length": config["max_seq_length"], "normalized": True}
        self.table = FrozenOutputs.from_config(config, key)
        width = self.encoder.model.config.hidden_size
        # distillation_map 'loss': the map lives here; 'encoder': in the student, whose vectors are then this wide
        same = width == student_width
        self.to_teacher = nn.Identity() if same else StudentMap(student_width, width, config["seed"])
        self.queue_list = nn.ModuleList(InstanceQueue(config["queue_size"], width, generator) for _ in range(2))
        self.max_length = config["max_seq_length"]

    def train(self, mode: bool = True) -> "Teacher":
        super().train(mode)
        self.encoder.eval()
        return self

    @torch.no_grad()
    def compute_vectors(self, texts: Sequence[str]) -> Tensor:
        return F.normalize(self.encoder(self.encoder.tokenize(texts, self.max_length)), dim=1)

    def prepare(self, texts: Sequence[str]) -> None:
        """Tabulate the vectors of the fixed texts of the training corpus (one batched pass)."""
        self.table.prepare(texts, self.compute_vectors, self.encoder.device)

    def vectors(self, texts: Sequence[str], fixed_texts: bool) -> Tensor:
        """The teacher's vectors of ``texts``: rows of the table when the texts are fixed, else (a random
        rewrite) the teacher run on them as one batch."""
        if not fixed_texts:
            return self.compute_vectors(texts)
        return self.table.get(texts, self.compute_vectors, self.encoder.device)

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
