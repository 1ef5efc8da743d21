"""DCLR's objective (declared in :mod:`trainers.methods.dclr`): SimCSE's views, noise negatives and the
complementary model's weights."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from trainers.common_knobs import pooling_named
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
        self.train_pooling = pooling_named(config, "train_pooling")

    def train(self, mode: bool = True) -> "DCLRObjective":
        super().train(mode)
        # frozen; with complementary_dropout its training views are dropout views, as in the authors' module
        self.complementary.train(mode and self.config["complementary_dropout"])
        return self

    def rebuilt_modules(self) -> tuple[str, ...]:
        return ("complementary",)

    def inputs(self, batch: Sequence[Any]) -> tuple[TokenBatch, TokenBatch]:
        """The step's host work: SimCSE's tokens of both views, and the sentences tokenised for the
        complementary model (both views' texts with ``complementary_dropout``), sent; with ``attend_to_padding``,
        both go to their transformer without a mask."""
        views = super().inputs(batch)
        sentences, positives = self.texts(batch)
        read = sentences + positives if self.config["complementary_dropout"] else sentences
        sentences = self.complementary.tokenize(read, self.max_length, self.to_max_length)
        if self.config["attend_to_padding"]:
            return views.attending_to_padding(), sentences.attending_to_padding()
        return views, sentences

    def device_loss(self, features: tuple[TokenBatch, TokenBatch]) -> Tensor:
        """The debiased objective of a batch :meth:`inputs` made, from the device's tensors alone (the noise drawn
        on the device): what a CUDA graph of the step records (:mod:`trainers.training.graphs`)."""
        config = self.config
        views, sentences = features
        with self.encoder.pooling_as(self.train_pooling):
            anchors, positives = self.head(self.encoder(views)).chunk(2)
        with torch.no_grad():
            weighing = self.complementary(sentences).float()
            first, second = weighing.chunk(2) if config["complementary_dropout"] else (weighing, weighing)
            weights = false_negative_weights(first, second, config["phi"])
        count = int(len(anchors) * config["noise_times"])
        noise = torch.randn(count, anchors.shape[1], device=anchors.device) * config["noise_std"]
        noise = refine_noise(anchors, positives, noise, self.temperature, config["noise_steps"],
                             config["noise_step_size"])
        return dclr_loss(anchors, positives, noise, weights, self.temperature)

    def loss(self, batch: Sequence[Any]) -> Tensor:
        return self.device_loss(self.inputs(batch))
