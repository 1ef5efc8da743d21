"""The random generators' states a training state carries, so that a resumed trial draws what an uninterrupted
one would (:class:`trainers.training.checkpoint.TrainingState`)."""

from __future__ import annotations

import random
from typing import Any, Mapping


def rng_states() -> dict[str, Any]:
    """Python's, NumPy's and torch's RNG states as tensors, lists and numbers only: what
    ``torch.load(weights_only=True)`` reads back (a NumPy array would need unpickling)."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state()
    states = {
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": [name, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_states` took, bit for bit."""
    import numpy as np
    import torch

    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal.tolist()), gauss))
    name, key, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
