"""A tokenised batch on the device, and what the host knows of it without asking the device.

On a GPU, every value the host reads back from the device (``.tolist()``, ``.cpu()``, ``bool(tensor)``) waits
for every kernel queued before it: the device then idles while the host launches the next kernels. The host
padded each batch itself, so it already knows how many real tokens each row has. :class:`TokenBatch` keeps
that count beside the device tensors, and the views and the transformer's attention mask are built from it
(:func:`transformer_inputs`) instead of from the device's copy of the mask.
"""

from __future__ import annotations

import functools
import inspect
from typing import Mapping

import torch
from torch import Tensor
from transformers import PreTrainedModel

from trainers.models.pretrained import FAMILIES


def host_to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor onto ``device``; to a GPU through pinned memory without waiting, so the host goes on to
    the next launch while the copy runs (the copy is ordered before the kernels that read it)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def to_device(features: Mapping[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """Each of ``features``' host tensors onto ``device`` (:func:`host_to_device`)."""
    return {name: host_to_device(tensor, device) for name, tensor in features.items()}


class TokenBatch(dict[str, Tensor]):
    """Token ids, attention mask (and token types) of a batch on the encoder's device, with what the host
    knows of them: ``host_mask``, the attention mask it padded the batch with, and ``lengths``, each row's
    count of real tokens (the views take real tokens first, then padding, as the encoder families here pad).
    ``fixed_shape`` says the batch was padded to its length limit, not to its longest row (``pad_to_max_length``):
    the transformer then always gets its mask, so that every batch of the shape computes through the same
    operations (what a CUDA graph replays, :mod:`trainers.training.graphs`). ``attends_to_padding`` says the
    transformer gets no mask at all (:meth:`attending_to_padding`)."""

    host_mask: Tensor
    fixed_shape: bool = False
    attends_to_padding: bool = False

    @classmethod
    def sent(cls, features: Mapping[str, Tensor], device: torch.device, fixed_shape: bool = False) -> TokenBatch:
        """``features``, padded on the host, sent to ``device``; the host keeps their mask."""
        batch = cls(to_device(features, device))
        batch.host_mask, batch.fixed_shape = features["attention_mask"], fixed_shape
        return batch

    def with_ids(self, input_ids: Tensor) -> TokenBatch:
        """The same rows with other token ids in the same places (a masked or an edited copy)."""
        batch = TokenBatch({**self, "input_ids": input_ids})
        batch.host_mask, batch.fixed_shape, batch.attends_to_padding = (self.host_mask, self.fixed_shape,
                                                                        self.attends_to_padding)
        return batch

    def attending_to_padding(self) -> TokenBatch:
        """The same rows, given to the transformer without an attention mask: each row attends to the batch's
        padding too (DCLR's ``attend_to_padding``). Pooling still reads the mask: an average is of real tokens."""
        batch = self.with_ids(self["input_ids"])
        batch.attends_to_padding = True
        return batch

    @functools.cached_property
    def lengths(self) -> tuple[int, ...]:
        """Each row's count of real tokens, counted in the host's mask."""
        return tuple(self.host_mask.sum(1).tolist())

    def real_positions(self) -> Tensor:
        """The real tokens' indices into the batch's ``rows x length`` positions, row by row, on the batch's
        device: what ``attention_mask.flatten().nonzero()`` gives there, found in the host's mask instead."""
        positions = self.host_mask.flatten().nonzero().squeeze(1)
        return host_to_device(positions, self["input_ids"].device)

    @property
    def masked(self) -> bool:
        """Whether the transformer needs the attention mask: a batch that attends to its padding never gets it;
        a batch of fixed shape always does; another needs it where a row has padding (rows are then padded to the
        longest)."""
        if self.attends_to_padding:
            return False
        return self.fixed_shape or min(self.lengths, default=0) != max(self.lengths, default=0)


def transformer_inputs(model: PreTrainedModel, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``batch`` as ``model`` is to be given it, so that the transformer reads nothing back from the device.

    Given a 2D attention mask, the transformer reads it back to learn whether any token is padding: with none it
    drops the mask (SDPA then runs unmasked). The host knows the answer, so
    - a batch without padding goes without a mask: what the transformer would have done (but a batch of fixed
      shape keeps its mask, :attr:`TokenBatch.fixed_shape`);
    - a padded batch, with SDPA attention, goes with the 4D mask the transformer would have made of it
      (transformers' own ``create_bidirectional_mask``, told that padding is there, so it does not look);
    - any other batch (eager attention, whose mask depends on the dtype inside the model; features whose
      lengths the host did not count) goes as it is.
    Each computes the same bits as the batch given as it is (``tests/test_batches.py``)."""
    if not isinstance(batch, TokenBatch):
        return dict(batch)
    if not batch.masked:
        return {name: tensor for name, tensor in batch.items() if name != "attention_mask"}
    config = model.config
    if config._attn_implementation != "sdpa" or config.model_type not in FAMILIES or not _mask_maker_told():
        return dict(batch)
    from transformers.masking_utils import create_bidirectional_mask

    mask = batch["attention_mask"]
    # The maker reads only the embeddings' batch size, length, dtype and device: a stand-in without storage.
    embeddings = mask.new_empty((*mask.shape, 0), dtype=model.dtype)
    prepared = create_bidirectional_mask(config=config, inputs_embeds=embeddings, attention_mask=mask,
                                         allow_is_bidirectional_skip=False)
    return {**batch, "attention_mask": prepared}


@functools.cache
def _mask_maker_told() -> bool:
    """Whether this transformers' mask maker can be told not to look for a batch without padding."""
    try:
        from transformers.masking_utils import create_bidirectional_mask
    except ImportError:
        return False
    return "allow_is_bidirectional_skip" in inspect.signature(create_bidirectional_mask).parameters
