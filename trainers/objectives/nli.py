"""Training on labelled NLI pairs with SBERT's classification objective: the SBERT-NLI encoder that ConSERT's
'sup' settings and BERT-flow's NLI-supervised setting start from."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from trainers.data.nli_examples import NLIPair
from trainers.losses.nli import NLI_CLASSES, nli_classification_loss, nli_feature_count
from trainers.method import Config
from trainers.models.batches import TokenBatch
from trainers.models.encoder import SentenceEncoder
from trainers.models.pooling import masked_mean
from trainers.objectives.base import Objective

BERT_INITIALIZER_RANGE = 0.02
"""BERT's ``initializer_range``: the std of its truncated-normal initialiser."""


def mean_last_layer(states: Sequence[Tensor], features: dict[str, Tensor]) -> Tensor:
    """SBERT's (and ConSERT's, Section 3.1) training pooling: the mean of the last layer's token vectors."""
    return masked_mean(states[-1], features["attention_mask"])


def nli_classifier(kind: str, features: int) -> nn.Linear:
    """SBERT's classifier over ``features`` pair features (``nli_classifier``): 'linear' is torch's ``nn.Linear``
    as sentence-transformers' SoftmaxLoss builds it; 'bert' has no bias and draws its weights as TensorFlow's
    ``truncated_normal_initializer(stddev=0.02)`` does, a normal redrawn beyond two standard deviations (BERT-flow's
    ``run_siamese.py``, ``output_weights``)."""
    if kind == "linear":
        return nn.Linear(features, NLI_CLASSES)
    layer = nn.Linear(features, NLI_CLASSES, bias=False)
    nn.init.trunc_normal_(layer.weight, std=BERT_INITIALIZER_RANGE, a=-2 * BERT_INITIALIZER_RANGE,
                          b=2 * BERT_INITIALIZER_RANGE)
    return layer


class SBERTNLIObjective(Objective):
    """L_ce (:func:`nli_classification_loss`) over each pair's premise and hypothesis vectors, the mean of the
    last layer whatever the config's evaluation pooling, with a linear classifier trained beside the encoder."""

    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        self.max_square = config["nli_max_square"]
        features = nli_feature_count(self.max_square) * encoder.model.config.hidden_size
        self.classifier = nli_classifier(config["nli_classifier"], features)
        self.max_length = config["max_seq_length"]

    def pair_vectors(
        self, batch: Sequence[NLIPair]
    ) -> tuple[list[TokenBatch], list[tuple[Tensor, ...]], list[Tensor], Tensor]:
        """Each side's features, hidden states and pooled vectors (premises, then hypotheses), and the labels."""
        premises, hypotheses, labels = zip(*batch)
        sides = [self.encoder.tokenize(sentences, self.max_length) for sentences in (premises, hypotheses)]
        states = [self.encoder.hidden_states(features) for features in sides]
        pooled = [mean_last_layer(s, features) for s, features in zip(states, sides)]
        return sides, states, pooled, torch.tensor(labels, device=pooled[0].device)

    def classification_loss(self, pooled: Sequence[Tensor], labels: Tensor) -> Tensor:
        return nli_classification_loss(pooled[0], pooled[1], labels, self.classifier.weight, self.classifier.bias,
                                       self.max_square)

    def loss(self, batch: Sequence[NLIPair]) -> Tensor:
        _, _, pooled, labels = self.pair_vectors(batch)
        return self.classification_loss(pooled, labels)
