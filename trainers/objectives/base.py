"""What a trained method computes: an :class:`Objective` around the encoder being tuned.

The shared loop (:mod:`trainers.training.loop`) owns everything common to all methods. A method adds only
an Objective: the modules it trains (its views, heads, frozen copies, queues) and its loss on a
batch of training examples. Its declaration (:mod:`trainers.method`) names it per stage, so that
declaring, listing and validating a method import no torch; this module and the objectives under
:mod:`trainers.objectives` are imported when a stage is built.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import Tensor, nn

from trainers.models.batches import TokenBatch
from trainers.models.encoder import SentenceEncoder


class Objective(nn.Module):
    """A method's training objective around the encoder being tuned.

    ``encoder`` is the model that is evaluated, whose best state is kept and
    which is what a trial produces. Everything else the objective holds
    (projection heads, frozen copies, queues) is discarded after training.
    A subclass is built as ``Objective(config, encoder)`` from a stage's config.
    """

    def __init__(self, encoder: SentenceEncoder):
        super().__init__()
        self.encoder = encoder

    def loss(self, batch: Sequence[Any]) -> Tensor:
        """The scalar training loss of one batch of corpus examples."""
        raise NotImplementedError

    # An objective whose step a CUDA graph can record (the methods with ``cuda_graph``) splits its loss in two:
    # ``loss(batch) == device_loss(inputs(batch))``.

    def inputs(self, batch: Sequence[Any]) -> TokenBatch | tuple[TokenBatch | Tensor, ...]:
        """The step's host work on a batch: its tokens, sent to the device (and any other device tensors the
        loss reads, such as rows of a frozen model's table)."""
        raise NotImplementedError(f"{type(self).__name__} does not split its loss for a CUDA graph")

    def device_loss(self, features: Any) -> Tensor:
        """The loss of a batch :meth:`inputs` made, computed on the device and reading nothing back from it."""
        raise NotImplementedError(f"{type(self).__name__} does not split its loss for a CUDA graph")

    def prepare(self, examples: Sequence[Any]) -> None:
        """Called once before the stage trains (and again on resume), with its training examples, under
        the training precision: where a frozen model's outputs are tabled (:mod:`trainers.models.frozen_outputs`)."""

    def after_update(self) -> None:
        """Device work after each optimiser update, part of the step (and so of its CUDA graph, which replays it):
        what the next step's loss reads of this one, such as SCT's queue updates and momentum encoder. Reads
        nothing back from the device and keeps nothing on the host beyond the step's own tensors."""

    def after_step(self) -> None:
        """Called by the loop after each step, on the host, outside any CUDA graph: where ``sweep plan
        --estimate`` and the benchmarks mark a step's end. A method's own work after its update is
        :meth:`after_update`."""

    def rebuilt_modules(self) -> tuple[str, ...]:
        """Names of frozen submodules that the constructor rebuilds identically from the config
        (SG's BERT_F, a teacher): a checkpoint leaves them out."""
        return ()

    def trained_state(self) -> dict[str, Tensor]:
        """What a checkpoint keeps of the objective: its state dict (encoder, heads, projector,
        queues and their pointers, momentum encoders, extra state such as generators), less the
        rebuilt modules."""
        rebuilt = tuple(f"{name}." for name in self.rebuilt_modules())
        return ({k: v for k, v in self.state_dict().items() if not k.startswith(rebuilt)} if rebuilt
                else self.state_dict())

    def load_trained_state(self, state: Mapping[str, Tensor]) -> None:
        rebuilt = tuple(f"{name}." for name in self.rebuilt_modules())
        missing, unexpected = self.load_state_dict(state, strict=False)
        absent = [k for k in missing if not k.startswith(rebuilt)] if rebuilt else missing
        if absent or unexpected:
            raise ValueError(f"checkpoint does not fit the objective: missing {absent[:5]}, "
                             f"unexpected {unexpected[:5]}")

    def statistics(self) -> dict[str, float]:
        """Figures for the trial's final report beside the loop's (e.g. what shared frozen outputs saved)."""
        return {}
