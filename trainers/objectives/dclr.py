"""DCLR's objective (declared in :mod:`trainers.methods.dclr`): SimCSE's views, noise negatives and the
complementary model's weights."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from trainers.losses.dclr import dclr_loss, false_negative_weights, refine_noise
from trainers.method import Config
from trainers.models.batches import TokenBatch
from trainers.models.encoder import SentenceEncoder
from trainers.objectives.simcse import SimCSEObjective


class DCLRObjective(SimCSEObjective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(config, encoder)
        self.complementary = SentenceEncoder.from_pretrained(config["complementary_model"],
                                                             config["complementary_pooling"])
        self.complementary.eval().requires_grad_(False)
        self.config = dict(config)

    def train(self, mode: bool = True) -> "DCLRObjective":
        super().train(mode)
        self.complementary.eval()  # frozen, and without dropout: its cosines depend on the sentences alone
        return self

    def rebuilt_modules(self) -> tuple[str, ...]:
        return ("complementary",)

    def inputs(self, batch: Sequence[Any]) -> tuple[TokenBatch, TokenBatch]:
        """The step's host work: SimCSE's tokens of both views, and the sentences tokenised for the
        complementary model, sent."""
        sentences = self.complementary.tokenize(self.texts(batch)[0], self.max_length, self.to_max_length)
        return super().inputs(batch), sentences

    def device_loss(self, features: tuple[TokenBatch, TokenBatch]) -> Tensor:
        """The debiased objective of a batch :meth:`inputs` made, from the device's tensors alone (the noise drawn
        on the device): what a CUDA graph of the step records (:mod:`trainers.training.graphs`)."""
        config = self.config
        views, sentences = features
        anchors, positives = self.head(self.encoder(views)).chunk(2)
        with torch.no_grad():
            weights = false_negative_weights(self.complementary(sentences).float(), config["phi"])
        count = int(len(anchors) * config["noise_times"])
        noise = torch.randn(count, anchors.shape[1], device=anchors.device) * config["noise_std"]
        noise = refine_noise(anchors, positives, noise, self.temperature, config["noise_steps"],
                             config["noise_step_size"])
        return dclr_loss(anchors, positives, noise, weights, self.temperature)

    def loss(self, batch: Sequence[Any]) -> Tensor:
        return self.device_loss(self.inputs(batch))
