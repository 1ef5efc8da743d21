"""Text-level views for SCT's augmentation study (Limkonchotiwat et al., Section 5.3.3):
masked-LM rewriting (15% of the tokens) and synonym replacement (one word).

Both act on raw sentences before tokenisation, so the teacher of a distillation
run sees the same rewritten text. Randomness comes from an explicit
``torch.Generator``. Whether a machine can make them is asked without torch:
:func:`trainers.models.pretrained.mlm_problem`, :func:`trainers.data.wordnet.wordnet_problem`.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from trainers.models.pretrained import resolve_model_path

WORD = re.compile(r"[A-Za-z]+")


def replace_one_synonym(sentence: str, synonyms_of: Callable[[str], Sequence[str]], generator: torch.Generator) -> str:
    """Replace one randomly chosen word that has synonyms by a random one of them
    (the sentence is returned unchanged when no word has any)."""
    candidates = [(m, synonyms) for m in WORD.finditer(sentence) if (synonyms := list(synonyms_of(m.group())))]
    if not candidates:
        return sentence
    match, synonyms = candidates[int(torch.randint(len(candidates), (), generator=generator))]
    synonym = synonyms[int(torch.randint(len(synonyms), (), generator=generator))]
    return sentence[: match.start()] + synonym + sentence[match.end() :]


class MaskedLMRewriter(nn.Module):
    """The MLM view: int(n x rate) (at least one) of each sentence's n word-piece tokens are
    masked and replaced by the masked LM's most likely token other than the original.
    A module so that it follows its owner to a device; always in eval mode, never trained."""

    def __init__(self, model: str, rate: float = 0.15):
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        super().__init__()
        path = resolve_model_path(model)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForMaskedLM.from_pretrained(path).eval().requires_grad_(False)
        self.rate = rate

    def train(self, mode: bool = True) -> "MaskedLMRewriter":
        return super().train(False)

    def forward(self, sentences: Sequence[str], generator: torch.Generator, max_length: int = 64) -> list[str]:
        features = self.tokenizer(list(sentences), padding=True, truncation=True, max_length=max_length,
                                  return_tensors="pt", return_special_tokens_mask=True)
        fixed = features.pop("special_tokens_mask").bool() | ~features["attention_mask"].bool()
        rewritten, _ = self.fill(features["input_ids"], features["attention_mask"], fixed, generator)
        return self.tokenizer.batch_decode(rewritten, skip_special_tokens=True)

    @torch.no_grad()
    def fill(self, input_ids: Tensor, attention_mask: Tensor, fixed: Tensor, generator: torch.Generator
             ) -> tuple[Tensor, Tensor]:
        """Token ids with the chosen positions refilled, and those positions (``fixed``: special
        tokens and padding, never chosen)."""
        masked = torch.zeros_like(fixed)
        for i in range(len(input_ids)):
            positions = (~fixed[i]).nonzero().flatten()
            count = max(1, int(len(positions) * self.rate)) if len(positions) else 0
            masked[i, positions[torch.randperm(len(positions), generator=generator)[:count]]] = True
        device = next(self.model.parameters()).device
        inputs = input_ids.masked_fill(masked, self.tokenizer.mask_token_id)
        logits = self.model(input_ids=inputs.to(device), attention_mask=attention_mask.to(device)).logits
        logits.scatter_(2, input_ids.to(device).unsqueeze(2), float("-inf"))  # never predict the token that was there
        # Only the chosen ids leave the device, not the [batch, tokens, vocabulary] logits.
        return torch.where(masked, logits.argmax(2).cpu(), input_ids), masked
