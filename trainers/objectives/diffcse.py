"""DiffCSE's objective (declared in :mod:`trainers.methods.diffcse`): SimCSE's views and InfoNCE, and the
conditional replaced-token detection of each tokenised copy."""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from trainers.losses.contrastive import info_nce
from trainers.losses.diffcse import rtd_loss
from trainers.method import Config
from trainers.models.batches import TokenBatch, transformer_inputs
from trainers.models.encoder import SentenceEncoder
from trainers.objectives.simcse import SimCSEObjective
from trainers.views.text import MaskedLMRewriter


def batchnorm_head(encoder: SentenceEncoder) -> nn.Sequential:
    """The authors' ProjectionMLP: Linear(u, 2u) - BN - ReLU - Linear(2u, u) - BN without affine parameters, its
    linear layers initialised as BERT's (the authors build it inside their Hugging Face model before its
    ``init_weights``; voidism/DiffCSE ``models.py`` ``cl_init``)."""
    width = encoder.model.config.hidden_size
    return nn.Sequential(encoder.new_linear(width, 2 * width, bias=False), nn.BatchNorm1d(2 * width), nn.ReLU(),
                         encoder.new_linear(2 * width, width, bias=False), nn.BatchNorm1d(width, affine=False))


def mask_for_generator(input_ids: Tensor, maskable: Tensor, ratio: float, mask_id: int,
                       vocabulary: int) -> tuple[Tensor, Tensor]:
    """BERT's masking, as the authors' collator applies it: each maskable token is chosen with probability
    ``ratio``; a chosen one becomes [MASK] 80% of the time, a random token 10%, and stays 10%. Returns the masked
    ids and where the chosen tokens are."""
    chosen = torch.bernoulli(torch.full(input_ids.shape, ratio, device=input_ids.device)).bool() & maskable
    masked = torch.bernoulli(torch.full(input_ids.shape, 0.8, device=input_ids.device)).bool() & chosen
    randomised = torch.bernoulli(torch.full(input_ids.shape, 0.5, device=input_ids.device)).bool() & chosen & ~masked
    random_ids = torch.randint(vocabulary, input_ids.shape, device=input_ids.device)
    return torch.where(masked, mask_id, torch.where(randomised, random_ids, input_ids)), chosen


class DiffCSEObjective(SimCSEObjective):
    def __init__(self, config: Config, encoder: SentenceEncoder):
        super().__init__(config, encoder)
        width = encoder.model.config.hidden_size
        self.discriminator = copy.deepcopy(encoder.model)  # the pretrained encoder, trained on its own
        self.rtd_head = nn.Linear(width, 2)
        self.generator = MaskedLMRewriter(config["generator"])  # frozen; its model's mode set each step
        self.config = dict(config)

    def training_head(self, config: Config, encoder: SentenceEncoder) -> nn.Module:
        if config["batchnorm_head"]:
            return batchnorm_head(encoder)
        return super().training_head(config, encoder)

    def rebuilt_modules(self) -> tuple[str, ...]:
        return ("generator",)

    @torch.no_grad()
    def edit(self, features: TokenBatch) -> Tensor:
        """x'': the generator's prediction for a masked copy of each sentence, put in where ``edited_positions``
        says: the positions chosen for masking (the paper's x'' = G(x')), or every position but the first (the
        sentence token) and the padding (the authors' code)."""
        input_ids, attention = features["input_ids"], features["attention_mask"].bool()
        tokenizer = self.encoder.tokenizer
        special = torch.isin(input_ids, torch.tensor(tokenizer.all_special_ids, device=input_ids.device))
        masked, chosen = mask_for_generator(input_ids, attention & ~special, self.config["mask_ratio"],
                                            tokenizer.mask_token_id, len(tokenizer))
        generator = self.generator.model.train(self.config["generator_dropout"])  # its dropout draws: torch's RNG
        inputs = transformer_inputs(generator, features.with_ids(masked))
        # The ids and the mask only, as the authors give them: the generator may take no token types (DistilBERT).
        logits = generator(input_ids=masked, attention_mask=inputs.get("attention_mask")).logits.float()
        if self.config["generator_decoding"] == "sample":
            # Unvalidated: checking the logits would read them back on the host, a GPU sync per step.
            predicted = torch.distributions.Categorical(logits=logits, validate_args=False).sample()
        else:
            predicted = logits.argmax(-1)
        predicted[:, 0] = input_ids[:, 0]
        return torch.where(chosen if self.config["edited_positions"] == "masked" else attention, predicted, input_ids)

    def discriminate(self, edited: Tensor, features: TokenBatch, sentence_vectors: Tensor) -> Tensor:
        """``[n, T, 2]`` logits of kept/replaced for every token of ``edited``, with each copy's sentence vector
        in place of its first token's embedding (the authors' cls_input)."""
        def condition(module: nn.Module, inputs: Any, output: Tensor) -> Tensor:
            return torch.cat([sentence_vectors.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

        handle = self.discriminator.embeddings.register_forward_hook(condition)
        try:
            inputs = transformer_inputs(self.discriminator, features.with_ids(edited))
            states = self.discriminator(**inputs).last_hidden_state
        finally:
            handle.remove()
        return self.rtd_head(states)

    def loss(self, batch: Sequence[Any]) -> Tensor:
        features, views = self.encode_views(batch)
        first, second = views.chunk(2)
        edited = self.edit(features)
        replaced = (edited != features["input_ids"]) & features["attention_mask"].bool()
        positions = features.real_positions() if self.config["rtd_positions"] == "real" else None
        detection = rtd_loss(self.discriminate(edited, features, views), replaced, positions)
        return info_nce(first, second, self.temperature) + self.config["rtd_weight"] * detection
