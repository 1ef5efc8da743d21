"""A method's training step reads nothing back from the device.

On a GPU, a value read back on the host (``.item()``, ``int(tensor)``, a boolean index, a distribution checking
its arguments) makes the host wait until the device has finished everything queued before it: the host then
cannot launch the next kernels while the device works, and a host-bound step gets slower by the device's time.
The shared loop reads the losses once every ``READ_LOSSES_EVERY`` steps, in one place
(:class:`trainers.training.loop.UnreadLosses`); a method's views, loss and ``after_update`` read nothing.

Two ways to see a read without a GPU:
- **The meta device**, whose tensors have a shape and no values: any read back (``.item()``, ``.tolist()``,
  ``.cpu()``, a boolean index, transformers' check of the attention mask) raises there. A step that runs on it
  reads nothing. The CPU cannot show a copy back this way: there, the device's tensors are the host's.
- **A dispatch mode on the CPU**, recording every op that reads a value with the line of our code that asked
  for it; reads inside transformers are not counted. It lists the rare reads we keep, with their reason (a
  CPU tensor read on the host is no read of the device).
"""

from __future__ import annotations

import linecache
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import build_objective
from trainers.models.queues import InstanceQueue

REPOSITORY = Path(__file__).resolve().parents[1]
READS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
         "aten.is_nonzero.default", "aten.equal.default", "aten._unique2.default", "aten.repeat_interleave.Tensor"}
"""Ops whose result's size or value the host needs before it can go on."""
KEPT = {
    "seed = int(torch.randint(2**31 - 1, ()))": "SCT's per-view seed: drawn from the CPU generator, a CPU tensor "
                                                "in a GPU trial too",
    "positions = self.host_mask.flatten().nonzero().squeeze(1)": "DiffCSE's real tokens, found in the mask the host "
                                                                  "padded the batch with: a CPU tensor",
}
"""Reads of ours that stay, by their source line, with why."""


def _boolean_index(func: Any, args: tuple) -> bool:
    indices = args[1] if str(func) == "aten.index.Tensor" and len(args) > 1 else ()
    return any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices)


def _asker() -> str | None:
    """``path:line`` of the code that asked for the read: the innermost frame outside torch; None when it is
    transformers' own."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename)
        if "torch" in path.parts or frame.name in ("_asker", "__torch_dispatch__"):
            continue
        if "transformers" in path.parts:
            return None
        return f"{path.relative_to(REPOSITORY) if path.is_relative_to(REPOSITORY) else path}:{frame.lineno}"
    return None


class DeviceReads(TorchDispatchMode):
    """Records ``path:line`` of each read our code asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in READS or _boolean_index(func, args):
            asker = _asker()
            if asker is not None:
                self.reads[asker] += 1
        return func(*args, **(kwargs or {}))


def reads_of(call: Callable[[], Any]) -> Counter[str]:
    with DeviceReads() as recorded:
        call()
    return recorded.reads


def unlisted(reads: Counter[str]) -> dict[str, str]:
    """The reads whose source line is not one of :data:`KEPT`, with their source line."""
    lines = {place: linecache.getline(str(REPOSITORY / place.rsplit(":", 1)[0]), int(place.rsplit(":", 1)[1]))
             for place in reads}
    return {place: line.strip() for place, line in lines.items() if line.strip() not in KEPT}


def test_the_recorder_sees_a_read_of_ours_and_not_transformers_own(tiny_bert):
    encoder = build_objective("simcse", tiny_bert).encoder
    features = encoder.tokenize(["a dog runs", "two cats sleep on a mat"], 32)
    assert not reads_of(lambda: encoder(features))  # transformers checks the mask: its own read
    reads = reads_of(lambda: encoder(features).sum().item())
    assert [place.rsplit(":", 1)[0] for place in reads] == ["tests/test_device_reads.py"]
    assert unlisted(reads_of(lambda: encoder(features)[torch.tensor([True, False])]))


def test_a_queue_takes_a_batch_without_reading_its_pointer():
    queue = InstanceQueue(5, 2)
    batches = [torch.full((3, 2), float(i)) for i in range(3)]
    for batch in batches:
        assert not reads_of(lambda: queue.enqueue(batch))
    assert queue.pointer.item() == 9 % 5


METHODS = {
    "simcse": {}, "sg": {}, "consert": {}, "sct": {"queues": "two"}, "flow": {},
    "dclr": {"complementary_model": "{tiny_bert}"}, "diffcse": {"generator": "{tiny_masked_lm}"},
}


def second_step(method: str, tiny_bert: str, tiny_masked_lm: str) -> tuple[torch.nn.Module, Callable[[], None]]:
    """``method``'s objective and its second step (loss, backward, ``after_update``), once the first has run on the
    CPU: the first builds what later steps reuse (queues filled, tables made, the flow fitted)."""
    knobs = {key: value.format(tiny_bert=tiny_bert, tiny_masked_lm=tiny_masked_lm)
             for key, value in METHODS[method].items()}
    objective = build_objective(method, tiny_bert, 0, batch_size=8, max_seq_length=16, **knobs)
    examples = training_examples(method, knobs, tiny_bert, 16)
    objective.prepare(examples)
    objective.train()

    def step(batch: list) -> None:
        objective.loss(batch).backward()
        objective.after_update()

    step(examples[:8])
    return objective, lambda: step(examples[8:16])


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_methods_step_reads_nothing_back_from_the_device(method, tiny_bert, tiny_masked_lm, use_tiny_sts):
    reads = reads_of(second_step(method, tiny_bert, tiny_masked_lm)[1])
    assert not unlisted(reads), f"{method}'s step reads back on the host at {unlisted(reads)}"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_methods_step_runs_on_a_device_with_no_values_to_read(method, tiny_bert, tiny_masked_lm, use_tiny_sts):
    objective, step = second_step(method, tiny_bert, tiny_masked_lm)
    objective.to("meta")
    step()  # raises at any read back
@pytest.mark.parametrize("views", [("shuffle", "token_cutoff"), ("span_cutoff", "dropout"), ("feature_cutoff", "none")])
def test_consert_views_read_nothing_back(views, tiny_bert, use_tiny_sts):
    """Each embedding-layer view takes its rows' lengths from the host's count (ConSERT's and SCT's views)."""
    objective = build_objective("consert", tiny_bert, 0, max_seq_length=16, aug1=views[0], aug2=views[1]).to("meta")
    objective.loss(training_examples("consert", {}, tiny_bert, 8)).backward()


@pytest.mark.parametrize("sentences", [["the dog saw the cat", "the cat saw the dog"], ["a dog", "two cats sleep"]],
                         ids=["one length", "padded"])
def test_an_evaluation_batch_is_encoded_without_a_read(sentences, tiny_bert):
    """The transformer's own mask check is answered by the host (:func:`trainers.models.batches.transformer_inputs`)."""
    encoder = build_objective("simcse", tiny_bert).encoder.to("meta")
    with torch.no_grad():
        assert encoder(encoder.tokenize(sentences, 32)).shape == (2, 32)


def training_examples(method: str, knobs: dict[str, Any], model: str, count: int) -> list[Any]:
    """The first ``count`` training examples of ``method``'s (first) stage, as its trial loads them: sentences,
    or BERT-flow's pairs."""
    from trainers.registry import get_method

    declared = get_method(method)
    config = declared.resolve({"model": model, **knobs})
    stage = declared.stages(config)[0]
    return list(stage.examples({**config, **stage.overrides})[:count])


def test_a_glue_step_reads_nothing_back(tiny_bert):
    """GLUE fine-tuning's forward and backward on sentence pairs, padded, on the meta device."""
    from trainers.models.encoder import SentenceEncoder
    from trainers.training.glue import SequenceClassifier

    model = SequenceClassifier(SentenceEncoder.from_pretrained(tiny_bert)).to("meta")
    features = model.features((["a dog runs", "two cats sleep on a mat"], ["it runs", "they sleep"]), 32)
    assert features.masked
    model(features).sum().backward()
