"""ConSERT's objectives (declared in :mod:`trainers.methods.consert`): unsupervised transfer, and the
NLI stage of the supervised settings."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from trainers.data.nli_examples import NLIPair
from trainers.losses.contrastive import nt_xent
from trainers.method import Config
from trainers.models.batches import TokenBatch
from trainers.models.encoder import SentenceEncoder
from trainers.objectives.base import Objective
from trainers.objectives.nli import SBERTNLIObjective, mean_last_layer
from trainers.views.embedding import (
    augmentation_rates,
    augmented_hidden_states,
    augmented_states,
    drawn_augmentation,
    fgv_perturbation,
    hidden_states_with_embedding_transform,
)


def remove_dropout(model: nn.Module) -> None:
    """Zero the rate of every dropout layer; the layers stay, so the state dict is unchanged."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def consert_settings(objective: Objective, config: Config) -> None:
    """What both objectives share: BERT's dropout removed when ``remove_bert_dropout`` says so (the paper,
    for unsupervised transfer), the augmentations' rates, tau and the token limit."""
    if config["remove_bert_dropout"]:
        remove_dropout(objective.encoder.model)
    objective.rates = augmentation_rates(config)
    objective.temperature = config["temperature"]
    objective.max_length = config["max_seq_length"]


class ConSERTObjective(Objective):
    """Unsupervised transfer: NT-Xent between the T1 and T2 views of each sentence, weighted by ``transfer_weight``."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        consert_settings(self, config)
        self.weight = config["transfer_weight"]
        self.augmentations = (config["aug1"], config["aug2"])
        self.to_max_length = config["pad_to_max_length"]

    def inputs(self, batch: Sequence[str]) -> tuple[TokenBatch, Tensor | None, Tensor | None]:
        """The step's host work: the batch's tokens, and T1's and T2's random draws (in that order, on the CPU's
        generator), sent."""
        features = self.encoder.tokenize(batch, self.max_length, self.to_max_length)
        draws = (drawn_augmentation(self.encoder, features, augmentation, self.rates.get(augmentation, 0.0))
                 for augmentation in self.augmentations)
        return (features, *draws)

    def device_loss(self, features: tuple[TokenBatch, Tensor | None, Tensor | None]) -> Tensor:
        """Eq. 1's NT-Xent between the two views of a batch :meth:`inputs` made, times ``transfer_weight``, from the
        device's tensors alone: what a CUDA graph of the step records (:mod:`trainers.training.graphs`)."""
        tokens, *draws = features
        first, second = (mean_last_layer(augmented_states(self.encoder, tokens, augmentation, drawn), tokens)
                         for augmentation, drawn in zip(self.augmentations, draws))
        return self.weight * nt_xent(first, second, self.temperature)

    def loss(self, batch: Sequence[str]) -> Tensor:
        return self.device_loss(self.inputs(batch))


class NLIObjective(SBERTNLIObjective):
    """L_ce on labelled NLI pairs ('sup': SBERT's objective), plus ``joint_weight`` x L_con in joint training
    ('joint')."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(config, encoder)
        consert_settings(self, config)
        self.contrastive = config["supervision"].startswith("joint")
        self.joint_weight = config["joint_weight"]
        self.augmentation = config["nli_augmentation"]
        self.adversarial_norm = config["adversarial_norm"]

    def loss(self, batch: Sequence[NLIPair]) -> Tensor:
        sides, states, plain, labels = self.pair_vectors(batch)
        ce = self.classification_loss(plain, labels)
        if not self.contrastive:
            return ce
        augmented = self._augmented_views(sides, states, ce)
        contrastive = sum(nt_xent(p, a, self.temperature) for p, a in zip(plain, augmented))
        return ce + self.joint_weight * contrastive

    def _augmented_views(
        self, sides: list[TokenBatch], states: list[tuple[Tensor, ...]], ce: Tensor
    ) -> list[Tensor]:
        if self.augmentation != "adversarial":
            rate = self.rates.get(self.augmentation, 0.0)
            return [
                mean_last_layer(augmented_hidden_states(self.encoder, features, self.augmentation, rate), features)
                for features in sides
            ]
        # FGV: perturb each side's embedding-layer output along the gradient of L_ce
        # (hidden state 0 is that output); parameter gradients are left untouched.
        gradients = torch.autograd.grad(ce, [s[0] for s in states], retain_graph=True)
        views = []
        for features, gradient in zip(sides, gradients):
            noise = fgv_perturbation(gradient, self.adversarial_norm)
            adversarial = hidden_states_with_embedding_transform(self.encoder, features, lambda out, n=noise: out + n)
            views.append(mean_last_layer(adversarial, features))
        return views
