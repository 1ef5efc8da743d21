"""SG, SG-OPT and Contrastive (BT)'s objective (declared in :mod:`trainers.methods.sg`)."""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from trainers.data.sources import BT_COLUMNS
from trainers.losses.self_guided import (
    parameter_distance,
    sg_base_loss,
    sg_opt1_loss,
    sg_opt2_loss,
    sg_opt3_loss,
    sg_opt_bt_loss,
)
from trainers.method import Config
from trainers.methods.sg import views_table
from trainers.metrics import Metric
from trainers.models.batches import TokenBatch, transformer_inputs
from trainers.models.encoder import SentenceEncoder
from trainers.models.frozen_outputs import FrozenOutputs, model_key
from trainers.models.pooling import pool_layer
from trainers.objectives.base import Objective

SINGLE_VIEW_LOSSES = {"sg": sg_base_loss, "opt1": sg_opt1_loss, "opt2": sg_opt2_loss}


def projection_head(width: int, hidden: int, std: float) -> nn.Sequential:
    """f: two linear layers, each followed by GELU (Section 3.1, footnote 4), their weights drawn from
    N(0, ``std``^2), BERT's ``initializer_range`` (the paper is silent; galsang/SG-BERT loss.py draws them so, the
    biases left at PyTorch's initialisation)."""
    head = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
    for linear in (head[0], head[2]):
        nn.init.normal_(linear.weight, mean=0.0, std=std)
    return head


class SelfGuidedObjective(Objective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(encoder)
        self.fixed = copy.deepcopy(encoder.model).eval()
        self.fixed.requires_grad_(False)
        # Layer 0 of BERT_T is frozen "for stable learning" (Section 3.1, footnote 5).
        encoder.model.embeddings.requires_grad_(False)
        model_config = encoder.model.config
        self.head = (projection_head(model_config.hidden_size, config["projection_hidden"],
                                     model_config.initializer_range)
                     if config["projection_head"] else nn.Identity())
        self.loss_name = config["loss"]
        self.temperature = config["temperature"]
        self.reg_lambda = config["reg_lambda"]
        self.max_length = config["max_seq_length"]
        self.to_max_length = config["pad_to_max_length"]
        self.first_layer = config["skip_first_layers"]
        self.view_pooling = config["view_pooling"]
        # Column of a back-translation row taken as a positive (None: SG/SG-OPT alone), and where it enters
        # SG-OPT (loss 'opt3'; loss 'bt' always gives it to BERT_T).
        self.bt_column = BT_COLUMNS.index(config["bt_view"]) if config["bt_view"] in BT_COLUMNS else None
        self.bt_into = config["bt_into"]
        if self.loss_name == "bt" and self.bt_column is None:
            raise ValueError("loss 'bt' (Contrastive (BT)) needs bt_view bt1 or bt2: the back-translation is "
                             "its positive")
        if not 0 <= self.first_layer <= encoder.num_layers:
            raise ValueError(
                f"skip_first_layers={self.first_layer} leaves no view: the model has layers 0..{encoder.num_layers}"
            )
        # BERT_F's dropout while training (bert_f_dropout, the authors' runs): its views are then drawn anew each
        # step from the batch, and no table is built.
        self.bert_f_dropout = config["bert_f_dropout"]
        self.views_table = views_table(config)  # None for loss 'bt' (it reads no views of BERT_F), and with dropout
        self.table: FrozenOutputs | None = None
        if self.views_table is not None:
            key = {"outputs": "sg-views", **model_key(self.fixed, encoder.tokenizer), "max_length": self.max_length,
                   "view_pooling": self.view_pooling, "first_layer": self.first_layer}
            self.table = FrozenOutputs.from_config(config, key)

    def train(self, mode: bool = True) -> "SelfGuidedObjective":
        """BERT_F trains (its dropout on) with the objective when ``bert_f_dropout`` is set, as galsang/SG-BERT's
        fit() sets its loss module, BERT_F in it, to train mode; else it stays in eval mode: fixed views. The loop
        calls this before the first step and after each evaluation (which switches only the encoder to eval mode),
        so every step's BERT_F has its dropout; ``eval()`` turns it off with the rest."""
        super().train(mode)
        self.fixed.train(mode and self.bert_f_dropout)
        return self

    def rebuilt_modules(self) -> tuple[str, ...]:
        return ("fixed",)  # BERT_F: a frozen copy of the pretrained model, loaded again on resume

    @torch.no_grad()
    def compute_views(self, sentences: Sequence[str]) -> Tensor:
        """h_{i,k} for k = first_layer..l: BERT_F's layers pooled with p, ``[b, views, d]``, in BERT_F's mode (in
        train mode its dropout draws from torch's generator, the one the trial's seed sets and a checkpoint keeps)."""
        features = self.encoder.tokenize(sentences, self.max_length)
        states = self.fixed(**transformer_inputs(self.fixed, features), output_hidden_states=True,
                            return_dict=True).hidden_states
        mask = features["attention_mask"]
        return torch.stack([pool_layer(layer, mask, self.view_pooling) for layer in states[self.first_layer :]], dim=1)

    def prepare(self, examples: Sequence[str]) -> None:
        """Tabulate BERT_F's views of every corpus sentence (one batched pass), where the loss reads views."""
        if self.table is not None:
            self.table.prepare(self.views_table.texts(examples), self.compute_views, self.encoder.device)

    def views(self, sentences: Sequence[str]) -> Tensor:
        """h of ``sentences``: with ``bert_f_dropout``, BERT_F run on them now (in train mode while training: its
        dropout drawn anew at each call); else rows of the table (BERT_F run on the step's batch when it did not
        fit)."""
        if self.table is None:
            return self.compute_views(sentences)
        return self.table.get(sentences, self.compute_views, self.encoder.device)

    def statistics(self) -> dict[str, float]:
        return self.table.statistics(Metric.FROZEN_OUTPUTS) if self.table is not None else {}

    def tokens(self, sentences: Sequence[str]) -> TokenBatch:
        return self.encoder.tokenize(sentences, self.max_length, self.to_max_length)

    def sentence_tokens(self, features: TokenBatch) -> Tensor:
        """c_i: BERT_T's last layer at each sentence's first token ([CLS]), with gradient."""
        output = self.encoder.model(**transformer_inputs(self.encoder.model, features), return_dict=True)
        return output.last_hidden_state[:, 0]

    def inputs(self, batch: Sequence[Any]) -> tuple[TokenBatch, Tensor]:
        """The step's work before the loss on corpus sentences: BERT_T's tokens, and BERT_F's views h (the table's
        rows; with ``bert_f_dropout``, BERT_F's pass over the batch, its dropout drawn before BERT_T's as the
        authors' Loss.forward runs BERT_F first). A CUDA graph records what follows, not this: it copies each
        step's views into the recorded ones, so a replay reads views drawn for its own step."""
        if self.loss_name == "bt" or self.bt_column is not None:
            raise NotImplementedError("a back-translated view reads its own rows: no CUDA graph records it")
        return self.tokens(batch), self.views(batch)

    def device_loss(self, inputs: tuple[TokenBatch, Tensor]) -> Tensor:
        """SG's or SG-OPT's loss of a batch of corpus sentences (:meth:`inputs`), lambda L_reg added."""
        features, h = inputs
        c = self.head(self.sentence_tokens(features))
        if self.loss_name == "opt3":
            contrastive = sg_opt3_loss(c, self.head(h), self.temperature)
        else:
            # sigma: one layer per sentence, uniformly (the authors' sampler), drawn on the device: a CUDA
            # graph replays a device draw anew, where a draw of the host's would be recorded once.
            layer = torch.randint(h.shape[1], (len(h),), device=h.device)
            picked = h[torch.arange(len(h), device=h.device), layer]
            contrastive = SINGLE_VIEW_LOSSES[self.loss_name](c, self.head(picked), self.temperature)
        return self.regularised(contrastive)

    def regularised(self, contrastive: Tensor) -> Tensor:
        if self.reg_lambda == 0:
            return contrastive
        return contrastive + self.reg_lambda * parameter_distance(self.encoder.model, self.fixed)

    def loss(self, batch: Sequence[Any]) -> Tensor:
        if self.loss_name == "bt":
            return self.regularised(self.contrastive_bt_loss(batch))
        if self.bt_column is not None:
            return self.regularised(self.back_translation_loss(batch))
        return self.device_loss(self.inputs(batch))

    def contrastive_bt_loss(self, rows: Sequence[Any]) -> Tensor:
        """Contrastive (BT), SG-BERT Appendix A.2: Contrastive (SG)'s L_base with the back-translation as each
        sentence's positive. BERT_T reads the sentences and their back-translations (with gradient, one pass);
        L_base (NT-Xent over the 2b vectors, Section 3.1) pairs f(c_i) with f(c'_i)."""
        sentences, translations = [row[0] for row in rows], [row[self.bt_column] for row in rows]
        vectors = self.head(self.sentence_tokens(self.tokens(sentences + translations)))
        return sg_base_loss(vectors[: len(rows)], vectors[len(rows) :], self.temperature)

    def back_translation_loss(self, rows: Sequence[Any]) -> Tensor:
        """SG-OPT with each (sentence, bt1, bt2) row's back-translation joined where ``bt_into`` says."""
        sentences, translations = [row[0] for row in rows], [row[self.bt_column] for row in rows]
        # BERT_F reads first (with bert_f_dropout its draws come before BERT_T's, as in :meth:`inputs`): the
        # sentences (bt_into tuned, fixed_join) and their back-translations (fixed, fixed_join).
        views = self.head(self.views(sentences)) if self.bt_into != "fixed" else None
        fixed_bt = self.head(self.views(translations)) if self.bt_into != "tuned" else None
        # BERT_T reads the sentences, and with bt_into 'tuned' their back-translations, in one pass.
        tuned = sentences + translations if self.bt_into == "tuned" else sentences
        vectors = self.head(self.sentence_tokens(self.tokens(tuned)))
        c = vectors[: len(sentences)]
        joined = vectors[len(sentences) :] if self.bt_into == "tuned" else fixed_bt
        return sg_opt_bt_loss(c, views, joined, self.temperature, self.bt_into)
