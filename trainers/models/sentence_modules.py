"""sentence-transformers modules for what its own modules cannot compute: WK pooling and BERT-flow's flow.

``sweep export`` copies this file, with :mod:`trainers.models.wk_pooling` and :mod:`trainers.models.glow` (which import
nothing but torch), into the exported folder and names the classes in its ``modules.json`` as
``sentence_modules.WKPooling`` / ``sentence_modules.LatentFlow``: sentence-transformers then loads them from the
folder, without this project, given ``trust_remote_code=True`` (it refuses code outside its package otherwise).
A model logged to MLflow carries the same files as its ``code_paths``.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers.base.modules.module import Module
from torch import Tensor

try:  # in this package, and in an exported folder (sentence-transformers loads it as a package module)
    from .glow import Glow
    from .wk_pooling import wk_pool
except ImportError:  # a top-level module: MLflow's logged model puts these files on sys.path (code_paths)
    from glow import Glow
    from wk_pooling import wk_pool

EXPORTED_FILES = ("sentence_modules.py", "wk_pooling.py", "glow.py")
"""The files of this package an exported folder carries, for the classes below."""


class WKPooling(Module):
    """SBERT-WK pooling of the transformer's hidden states (``all_layer_embeddings``) into ``sentence_embedding``."""

    config_keys: list[str] = ["embedding_dimension", "window", "layer_start"]

    def __init__(self, embedding_dimension: int, window: int, layer_start: int):
        super().__init__()
        self.embedding_dimension, self.window, self.layer_start = embedding_dimension, window, layer_start

    def forward(self, features: dict[str, Tensor | Any], **kwargs) -> dict[str, Tensor | Any]:
        features["sentence_embedding"] = wk_pool(features["all_layer_embeddings"], features["attention_mask"],
                                                 self.window, self.layer_start)
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)


class LatentFlow(Module):
    """BERT-flow: the pooled ``sentence_embedding`` replaced by the flow's Gaussian latent."""

    config_keys: list[str] = ["dim", "levels", "depth", "width", "coupling", "permutation"]

    def __init__(self, dim: int, levels: int, depth: int, width: int, coupling: str, permutation: bool):
        super().__init__()
        self.dim, self.levels, self.depth, self.width = dim, levels, depth, width
        self.coupling, self.permutation = coupling, permutation
        self.flow = Glow(dim, levels, depth, width, coupling, permutation)

    def forward(self, features: dict[str, Tensor | Any], **kwargs) -> dict[str, Tensor | Any]:
        features["sentence_embedding"] = self.flow(features["sentence_embedding"])
        return features

    def get_embedding_dimension(self) -> int:
        return self.dim

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> "LatentFlow":
        hub = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        module = cls(**cls.load_config(model_name_or_path, **hub))
        return cls.load_torch_weights(model_name_or_path=model_name_or_path, model=module, **hub)
