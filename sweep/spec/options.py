"""What a person asks of ``sweep run``/``plan``: the spec, its overrides and where things go. No Ray, no
torch, so that ``sweep plan`` answers without loading them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from results.record import DEFAULT_TRACKING_URI
from sweep.spec.budget import BUDGETS
from sweep.spec.sweep_spec import SweepSpec, load_spec

DEFAULT_STORAGE = "ray_results"


@dataclass(frozen=True)
class SweepOptions:
    spec_path: str
    overrides: Mapping[str, Any]
    budget: str | None = None
    seeds: list[int] | None = None
    address: str | None = None
    storage: str | None = None
    tracking_uri: str = DEFAULT_TRACKING_URI
    register: str | None = None
    reuse: bool = True
    """Take trials whose key a FINISHED run in the store has instead of training them (sweep.run.reuse)."""
    reuse_other_code: bool = False
    """Also take runs whose key differs in the training code only."""
    campaign: str | None = None
    """The campaign (``sweep paper NAME``) whose own sweep this is: ``sweep paper`` continues it, not ``resume``."""

    def load(self, check_environment: bool = True) -> SweepSpec:
        return load_spec(self.spec_path, self.overrides, BUDGETS[self.budget] if self.budget else None, self.seeds,
                         check_environment, self.address)


def storage_root(storage: str | None) -> str:
    """Absolute local path or a URI (s3://, gs://, ...) as Ray's storage_path wants."""
    storage = storage or DEFAULT_STORAGE
    return storage if "://" in storage else str(Path(storage).resolve())
