"""SG and SG-OPT: self-guided contrastive learning (Kim et al., ACL 2021).

BERT is cloned into BERT_F (fixed) and BERT_T (tuned). BERT_T's last-layer
[CLS] vector c_i is pulled towards views h_{i,k} = p(H_{i,k}) that BERT_F's
layers k = 0..l give of the same sentence, and pushed from other sentences'
views (Section 3). After training only BERT_T is kept, and its [CLS] is the
sentence vector. Defaults are the paper's (Table 8).

BERT_F runs without dropout (the authors' code puts it in eval mode), so a
sentence's views are a fixed function of the sentence: with
``share_frozen_outputs`` (on by default) they are computed once per sentence
and shared across steps, epochs and the trials of a node
(:mod:`trainers.frozen_outputs`), which gives the same numbers as computing
them every step.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
from torch import Tensor, nn

from trainers.encoder import SentenceEncoder, masked_max, masked_mean
from trainers.frozen_outputs import FROZEN_OUTPUT_KNOBS, FrozenOutputs, each_alone, model_key
from trainers.knobs import Knob, KnobSet
from trainers.losses.self_guided import parameter_distance, sg_base_loss, sg_opt1_loss, sg_opt2_loss, sg_opt3_loss
from trainers.method import Config, Method, Objective, single_stage

SINGLE_VIEW_LOSSES = {"sg": sg_base_loss, "opt1": sg_opt1_loss, "opt2": sg_opt2_loss}
VIEW_POOLINGS = {"max": masked_max, "mean": masked_mean}


def projection_head(width: int, hidden: int) -> nn.Sequential:
    """f: two linear layers, each followed by GELU (Section 3.1, footnote 4)."""
    return nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())


class SelfGuidedObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        self.fixed = copy.deepcopy(encoder.model).eval()
        self.fixed.requires_grad_(False)
        # Layer 0 of BERT_T is frozen "for stable learning" (Section 3.1, footnote 5).
        encoder.model.embeddings.requires_grad_(False)
        width = encoder.model.config.hidden_size
        self.head = projection_head(width, config["projection_hidden"]) if config["projection_head"] else nn.Identity()
        self.loss_name = config["loss"]
        self.temperature = config["temperature"]
        self.reg_lambda = config["reg_lambda"]
        self.max_length = config["max_seq_length"]
        self.first_layer = config["skip_first_layers"]
        self.view_pooling = config["view_pooling"]
        if not 0 <= self.first_layer <= encoder.num_layers:
            raise ValueError(
                f"skip_first_layers={self.first_layer} leaves no view: the model has layers 0..{encoder.num_layers}"
            )
        self.shared = None
        if config["share_frozen_outputs"]:
            key = {"outputs": "sg-views", **model_key(self.fixed, encoder.tokenizer), "max_length": self.max_length,
                   "view_pooling": self.view_pooling, "first_layer": self.first_layer}
            self.shared = FrozenOutputs.from_config(config, key)

    def train(self, mode: bool = True) -> "SelfGuidedObjective":
        super().train(mode)
        self.fixed.eval()  # BERT_F gives fixed views: never dropout
        return self

    def rebuilt_modules(self) -> tuple[str, ...]:
        return ("fixed",)  # BERT_F: a frozen copy of the pretrained model, loaded again on resume

    @torch.no_grad()
    def compute_views(self, sentences: Sequence[str]) -> Tensor:
        """h_{i,k} for k = first_layer..l: BERT_F's layers pooled with p, ``[b, views, d]``."""
        features = self.encoder.tokenize(sentences, self.max_length)
        states = self.fixed(**features, output_hidden_states=True, return_dict=True).hidden_states
        pool = VIEW_POOLINGS[self.view_pooling]
        mask = features["attention_mask"]
        return torch.stack([pool(layer, mask) for layer in states[self.first_layer :]], dim=1)

    def views(self, sentences: Sequence[str]) -> Tensor:
        if self.shared is None:
            return each_alone(self.compute_views, sentences)
        return self.shared.get(sentences, self.compute_views, self.encoder.device)

    def statistics(self) -> dict[str, float]:
        return self.shared.statistics("frozen_outputs") if self.shared else {}

    def loss(self, batch: Sequence[str]) -> Tensor:
        features = self.encoder.tokenize(batch, self.max_length)
        sentence_vectors = self.encoder.model(**features, return_dict=True).last_hidden_state[:, 0]
        c = self.head(sentence_vectors)
        h = self.views(batch)
        if self.loss_name == "opt3":
            contrastive = sg_opt3_loss(c, self.head(h), self.temperature)
        else:
            # sigma: one layer per sentence, uniformly (the authors' sampler).
            layer = torch.randint(h.shape[1], (len(batch),))
            picked = h[torch.arange(len(batch)), layer.to(h.device)]
            contrastive = SINGLE_VIEW_LOSSES[self.loss_name](c, self.head(picked), self.temperature)
        if self.reg_lambda == 0:
            return contrastive
        return contrastive + self.reg_lambda * parameter_distance(self.encoder.model, self.fixed)


METHOD = Method(
    name="sg",
    summary="SG / SG-OPT: BERT_T's [CLS] contrasted with views from every layer of a frozen BERT_F.",
    knobs=KnobSet(
        (
            Knob("loss", str, "opt3", "Objective: 'sg' (L_base, NT-Xent over c and h), 'opt1', 'opt2' (single "
                 "sampled view), 'opt3' (SG-OPT: all l+1 views).", choices=("sg", "opt1", "opt2", "opt3")),
            Knob("temperature", float, 0.01, "Temperature tau of phi.", low=1e-5, high=10.0),
            Knob("reg_lambda", float, 0.1, "Weight lambda of L_reg = ||BERT_F - BERT_T||^2.", low=0.0),
            Knob("view_pooling", str, "max", "Pooling p of BERT_F's layers into views. The paper uses max; the "
                 "authors' public code defaults to mean.", choices=tuple(VIEW_POOLINGS)),
            Knob("projection_head", bool, True, "Pass c and h through the projection head f before the loss."),
            Knob("projection_hidden", int, 4096, "Width of both layers of f.", low=1),
            Knob("skip_first_layers", int, 0, "Drop views of layers 0..N-1 (the paper's SentEval variant).", low=0),
        )
    )
    + FROZEN_OUTPUT_KNOBS,
    defaults={
        "pooling": "cls",
        "batch_size": 16,
        "learning_rate": 5e-5,
        "adam_beta2": 0.9,
        "epochs": 1,
        "eval_every": 50,
        "patience": 10,
        "max_seq_length": 128,
        "train_corpus": "stsb_sentences",
    },
    stages=single_stage(SelfGuidedObjective),
    shared_outputs=lambda config: "BERT_F's views" if config["share_frozen_outputs"] else None,
)
