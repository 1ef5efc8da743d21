"""ConSERT (Yan et al., ACL 2021): contrastive learning with token-level augmentations.

One shared encoder; each sentence gets two views made at the embedding layer
by transformations T1 (``aug1``) and T2 (``aug2``); the views are mean-pooled
over the last layer and NT-Xent over the 2N views pulls each pair together
(Section 3, Eq. 1). BERT's own dropout is removed, as the paper does, because
cutoff and dropout augmentations replace it. Defaults are Section 4.1's.

The supervised settings of Section 3.3 (joint, sup-unsup, joint-unsup, and
adversarial attack, which needs their supervision) are not implemented.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from trainers.augmentations import AUGMENTATIONS, augmented_hidden_states
from trainers.encoder import SentenceEncoder, masked_mean
from trainers.knobs import Knob, KnobSet
from trainers.losses.contrastive import nt_xent
from trainers.method import Config, Method, Objective


def remove_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


class ConSERTObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        if config["remove_bert_dropout"]:
            remove_dropout(encoder.model)
        self.augmentations = (config["aug1"], config["aug2"])
        self.rates = {
            "token_cutoff": config["token_cutoff_rate"],
            "feature_cutoff": config["feature_cutoff_rate"],
            "dropout": config["dropout_rate"],
            "span_cutoff": config["span_cutoff_rate"],
        }
        self.temperature = config["temperature"]
        self.max_length = config["max_seq_length"]

    def view(self, features: dict[str, Tensor], augmentation: str) -> Tensor:
        states = augmented_hidden_states(self.encoder, features, augmentation, self.rates.get(augmentation, 0.0))
        return masked_mean(states[-1], features["attention_mask"])

    def loss(self, batch: Sequence[str]) -> Tensor:
        features = self.encoder.tokenize(batch, self.max_length)
        first, second = (self.view(features, augmentation) for augmentation in self.augmentations)
        return nt_xent(first, second, self.temperature)


METHOD = Method(
    name="consert",
    summary="ConSERT: two token-level augmented views of each sentence, NT-Xent over the 2N views.",
    knobs=KnobSet(
        (
            Knob("aug1", str, "shuffle", "Transformation T1 at the embedding layer.", choices=AUGMENTATIONS),
            Knob("aug2", str, "feature_cutoff", "Transformation T2 at the embedding layer (Shuffle + Feature "
                 "Cutoff is the paper's best pair).", choices=AUGMENTATIONS),
            Knob("token_cutoff_rate", float, 0.15, "Share of each sentence's tokens erased by token_cutoff.",
                 low=0.0, high=1.0),
            Knob("feature_cutoff_rate", float, 0.2, "Share of feature dimensions erased by feature_cutoff.",
                 low=0.0, high=1.0),
            Knob("dropout_rate", float, 0.2, "Share of embedding elements zeroed by dropout.", low=0.0, high=1.0),
            Knob("span_cutoff_rate", float, 0.2, "Length of the span erased by span_cutoff, as a share of the "
                 "sentence.", low=0.0, high=1.0),
            Knob("temperature", float, 0.1, "Temperature tau of NT-Xent.", low=1e-4, high=10.0),
            Knob("remove_bert_dropout", bool, True, "Set BERT's own dropout to 0, as the paper does."),
        )
    ),
    defaults={
        "pooling": "last2avg",  # the authors' README: reported numbers average the last two layers
        "max_seq_length": 64,
        "batch_size": 96,
        "optimizer": "adam",
        "learning_rate": 5e-7,
        "warmup_ratio": 0.1,
        "eval_every": 200,
        "train_corpus": "sts_all_sentences",
    },
    build=ConSERTObjective,
)
