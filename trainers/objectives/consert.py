"""ConSERT's objectives (declared in :mod:`trainers.methods.consert`): unsupervised transfer, and the
NLI stage of the supervised settings."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainers.augmentations import (
    augmentation_rates,
    augmented_hidden_states,
    fgv_perturbation,
    hidden_states_with_embedding_transform,
)
from trainers.encoder import SentenceEncoder, masked_mean
from trainers.losses.contrastive import nt_xent
from trainers.method import Config
from trainers.methods.consert import NLIPair
from trainers.objective import Objective

NLI_CLASSES = 3


def nli_classification_loss(first: Tensor, second: Tensor, labels: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """ConSERT Eq. (2) (SBERT's classification objective): f = Concat(r1, r2, |r1 - r2|),
    L_ce = CrossEntropy(W f + b, y), averaged over the pairs."""
    features = torch.cat([first, second, (first - second).abs()], dim=-1)
    return F.cross_entropy(F.linear(features, weight, bias), labels)


def remove_dropout(model: nn.Module) -> None:
    """Zero the rate of every dropout layer; the layers stay, so the state dict is unchanged."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def mean_last_layer(states: Sequence[Tensor], features: dict[str, Tensor]) -> Tensor:
    """The training pooling of Section 3.1: mean of the last layer's token vectors."""
    return masked_mean(states[-1], features["attention_mask"])


class ConSERTBase(Objective):
    """What both objectives share: BERT's dropout removed when ``remove_bert_dropout`` says so (the
    paper, for unsupervised transfer), the augmentations' rates, tau and the token limit."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        if config["remove_bert_dropout"]:
            remove_dropout(encoder.model)
        self.rates = augmentation_rates(config)
        self.temperature = config["temperature"]
        self.max_length = config["max_seq_length"]


class ConSERTObjective(ConSERTBase):
    """Unsupervised transfer: NT-Xent between the T1 and T2 views of each sentence."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(config, encoder)
        self.augmentations = (config["aug1"], config["aug2"])

    def view(self, features: dict[str, Tensor], augmentation: str) -> Tensor:
        states = augmented_hidden_states(self.encoder, features, augmentation, self.rates.get(augmentation, 0.0))
        return mean_last_layer(states, features)

    def loss(self, batch: Sequence[str]) -> Tensor:
        features = self.encoder.tokenize(batch, self.max_length)
        first, second = (self.view(features, augmentation) for augmentation in self.augmentations)
        return nt_xent(first, second, self.temperature)


class NLIObjective(ConSERTBase):
    """L_ce on labelled NLI pairs ('sup'), plus ``joint_weight`` x L_con in joint training ('joint')."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(config, encoder)
        self.classifier = nn.Linear(3 * encoder.model.config.hidden_size, NLI_CLASSES)
        self.contrastive = config["supervision"].startswith("joint")
        self.joint_weight = config["joint_weight"]
        self.augmentation = config["nli_augmentation"]
        self.adversarial_norm = config["adversarial_norm"]

    def loss(self, batch: Sequence[NLIPair]) -> Tensor:
        premises, hypotheses, labels = zip(*batch)
        sides = [self.encoder.tokenize(sentences, self.max_length) for sentences in (premises, hypotheses)]
        states = [self.encoder.hidden_states(features) for features in sides]
        plain = [mean_last_layer(s, features) for s, features in zip(states, sides)]
        targets = torch.tensor(labels, device=plain[0].device)
        ce = nli_classification_loss(plain[0], plain[1], targets, self.classifier.weight, self.classifier.bias)
        if not self.contrastive:
            return ce
        augmented = self._augmented_views(sides, states, ce)
        contrastive = sum(nt_xent(p, a, self.temperature) for p, a in zip(plain, augmented))
        return ce + self.joint_weight * contrastive

    def _augmented_views(
        self, sides: list[dict[str, Tensor]], states: list[tuple[Tensor, ...]], ce: Tensor
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
