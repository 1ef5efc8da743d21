"""What the device check's parts share: the models, a trial's objective and examples, the loop's steps timed."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from benchmarks.step_time import timed_steps
from trainers.data.sources import load_corpus
from trainers.models.encoder import SentenceEncoder
from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path
from trainers.registry import get_method
from trainers.training.optimization import batches as epoch_batches

WARMUP = 5
ROOT = Path(__file__).resolve().parents[2]
"""The checkout: where the child processes (sharing workers, the older loop) import from."""
METHODS = ("simcse", "sg", "consert", "sct")
PRECISIONS = ("fp32", "tf32", "bf16")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def precision_context(precision: str, device: torch.device):
    """The training loop's own precision contexts, for the bare loop and the FLOP count."""
    from trainers.training import precision as precisions

    return precisions.autocast(precisions.resolve(precision, device), device)


def matmuls(precision: str, device: torch.device):
    """The loop's backward-pass context: TF32 products for a TF32 step."""
    from trainers.training import precision as precisions

    return precisions.matmuls(precisions.resolve(precision, device))


def build_bert(folder: Path, tiny: tuple[int, int] | None) -> str:
    """A random BERT with the bundled uncased tokenizer: BERT-base's shape, or ``tiny`` (layers, width)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(BUNDLED_MODEL))
    config = BertConfig()
    if tiny:
        layers, width = tiny
        config = BertConfig(hidden_size=width, num_hidden_layers=layers, num_attention_heads=2,
                            intermediate_size=2 * width)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def matmul_tflops(precision: str, device: torch.device, size: int) -> float:
    """One ``size``^3 product's rate in TFLOP/s (random operands; the best of five after a warm-up)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    best = float("inf")
    with precision_context("tf32" if precision == "tf32" else "fp32", device):
        for repeat in range(6):
            synchronize(device)
            started = time.perf_counter()
            a @ b
            synchronize(device)
            if repeat:
                best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e12


def objective_of(method: str, model: str, precision: str, steps: int, device: torch.device, batches: int,
                 **overrides):
    """(objective on ``device``, its config for ``steps`` steps, training examples for ``batches`` batches), as a
    trial builds them."""
    torch.manual_seed(0)
    config = get_method(method).resolve({"model": model, "train_precision": precision, "max_steps": steps,
                                         "eval_every": 10**6, "checkpoint_every": 0, **overrides})
    (stage,) = get_method(method).stages(config)
    encoder = SentenceEncoder.from_config(config).to(device)
    objective = stage.build(config, encoder).to(device)
    return objective, config, typical_examples(config, batches)


def typical_examples(config: Mapping[str, Any], batches: int) -> list[Any]:
    """Examples for ``batches`` batches taken at even intervals across the training corpus: typical lengths
    (STS-B's train file starts with short captions)."""
    corpus = load_corpus(config["train_corpus"])
    count = config["batch_size"] * batches
    return list(corpus[:: max(1, len(corpus) // count)][:count])


def loop_steps(method: str, model: str, precision: str, steps: int, device: torch.device,
               at_warmup: Callable[[], None] = lambda: None, count_flops: bool = True, rehearse: bool = False,
               **overrides: Any) -> dict[str, Any]:
    """ms per step of ``steps`` steps through :func:`trainers.training.loop.train` after the warm-up (the device
    synchronised at both ends, so queued work is counted), when they finished, the seconds the warm-up took
    (a compiled step's compiling included), the peak memory, and the FLOPs of one more step; ``overrides`` are
    knobs (``torch_compile``). The warm-up is :data:`WARMUP` steps, or with ``rehearse`` a first epoch over the
    timed steps' examples (reshuffled, as a trial's epochs are), so that the compiling and the recording of most
    padded lengths' graphs (``reduce-overhead``'s CUDA graphs) fall before the timing, as in a trial's first
    steps."""
    warmup = steps if rehearse else WARMUP
    epochs = {"epochs": 2} if rehearse else {}
    objective, config, examples = objective_of(method, model, precision, warmup + steps, device,
                                               steps if rehearse else warmup + steps, **overrides, **epochs)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    warmed: list[float] = []

    def warmed_up() -> None:
        warmed.append(time.perf_counter() - started)
        at_warmup()

    skipped = cudagraph_skips()
    seconds, finished = timed_steps(objective, examples, config, device, warmup, warmed_up)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    flops = step_flops(objective, examples[: config["batch_size"]]) if count_flops else 0.0
    return {"method": method, "precision": precision, "ms": 1000 * seconds, "warmup_seconds": warmed[0],
            "finished": finished, "peak_gib": peak, "tflop_per_step": flops / 1e12,
            "cudagraph_skips": cudagraph_skips() - skipped, **overrides}


def cudagraph_skips() -> int:
    """How many compiled graphs torch.compile has run without their CUDA graph so far (a mode that records them
    skips a graph it cannot capture, and says why under ``TORCH_LOGS=perf_hints``); read only where torch.compile
    was imported, which a process that never compiles should not spend time on."""
    if "torch._dynamo" not in sys.modules:
        return 0
    return sys.modules["torch._dynamo"].utils.counters["inductor"]["cudagraph_skips"]


def step_flops(objective: torch.nn.Module, batch: list[Any]) -> float:
    """FLOPs of one step's forward and backward (the optimiser's update is a few per parameter: left out)."""
    from torch.utils.flop_counter import FlopCounterMode

    objective.train()
    with FlopCounterMode(display=False) as counter:
        objective.loss(batch).backward()
    objective.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def loop_batches(config: Mapping[str, Any], examples: list[Any]) -> list[list[Any]]:
    """The batches the shared loop trains on in its first epoch over ``examples``, in its order (its seeded
    shuffle): what the bare loop takes too, so that both pad to the same lengths."""
    order = epoch_batches(len(examples), config["batch_size"], torch.Generator().manual_seed(config["seed"]),
                          config["last_batch"])
    return [[examples[i] for i in indices] for indices in order]


def measured_or_failed(measure: Callable[[], dict[str, Any]], **row: Any) -> dict[str, Any]:
    """``measure()``'s row, or ``row`` with no figure and the error where it raised: one row that fails (a
    capture's first try on a card) leaves its error there, and the call goes on to the others."""
    try:
        return measure()
    except Exception as error:  # noqa: BLE001 - reported in its row, the call goes on
        return {**row, "ms": None, "error": f"{type(error).__name__}: {error}"}
