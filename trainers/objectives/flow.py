"""BERT-flow's objective (declared in :mod:`trainers.methods.flow`): only the flow trains."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from trainers.losses.flow import flow_nll_bits
from trainers.method import Config
from trainers.models.encoder import SentenceEncoder
from trainers.models.glow import Glow
from trainers.objectives.base import Objective


def flow_from_config(config: Config, width: int) -> Glow:
    """The flow a config asks for, on sentence vectors of ``width`` dimensions (the method's ``after_pooling``),
    its actnorms drawn now where ``flow_actnorm_init`` is 'released' (a record written before the knob existed
    initialised them from data)."""
    flow = Glow(width, config["flow_levels"], config["flow_depth"], config["flow_width"], config["flow_coupling"],
                config["flow_permutation"])
    if config.get("flow_actnorm_init", "data") == "released":
        flow.initialize_as_released()
    return flow


class FlowObjective(Objective):
    """The encoder is frozen; the flow (the encoder's map after pooling) is fit by maximum likelihood on the
    pooled vectors of each batch. The loop's ``train()`` leaves the encoder's dropout on while the flow trains,
    as the authors' code does (``is_training`` reaches BERT too)."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        if not isinstance(encoder.after_pooling, Glow):
            raise ValueError("the flow method needs the encoder's flow (SentenceEncoder.from_config builds it)")
        encoder.model.requires_grad_(False)
        self.max_length = config["max_seq_length"]
        self.pairs = config["flow_batch"] == "pairs"
        # Whether the flow's initialisation was seen done: its buffer is read on the first step only (a checkpoint
        # may bring an initialised flow), since reading a device tensor makes the host wait for the device.
        self._flow_ready = False

    @property
    def flow(self) -> Glow:
        return self.encoder.after_pooling

    def loss(self, batch: Sequence[Any]) -> Tensor:
        """The negative log-likelihood in bits per dimension (:func:`flow_nll_bits`); of a batch of pairs, each
        side's mean, summed, as the authors' run_siamese.py computes it (flow_loss_batch_a + flow_loss_batch_b):
        each side is pooled in a pass of its own."""
        if self.pairs != isinstance(batch[0], tuple):  # zip(*sentences) would pair their characters
            raise TypeError(f"flow_batch {'pairs' if self.pairs else 'sentences'} takes "
                            f"{'(sentence 1, sentence 2) pairs' if self.pairs else 'sentences'}, got {batch[0]!r}")
        sides = tuple(zip(*batch)) if self.pairs else (batch,)
        with torch.no_grad():
            vectors = [self.encoder.pooled(self.encoder.tokenize(list(side), self.max_length)).float()
                       for side in sides]
        if not self._flow_ready:
            if not self.flow.initialized:  # Glow's data-dependent initialisation, on the first batch
                self.flow.initialize(torch.cat(vectors))
            self._flow_ready = True
        return torch.stack([flow_nll_bits(*self.flow.latent_and_log_det(side)) for side in vectors]).sum()
