"""Name -> :class:`~trainers.method.Method` for every method the sweep can run: a :class:`~trainers.references.Registry`
of their ``"module:METHOD"`` references, registered as suites and objectives are (:mod:`trainers.references`)."""

from __future__ import annotations

from trainers.method import Method
from trainers.references import Registry

METHODS: Registry[Method] = Registry("method", (
    "trainers.methods.baseline:METHOD",
    "trainers.methods.simcse:METHOD",
    "trainers.methods.sg:METHOD",
    "trainers.methods.consert:METHOD",
    "trainers.methods.sct:METHOD",
    "trainers.methods.flow:METHOD",
    "trainers.methods.dclr:METHOD",
    "trainers.methods.diffcse:METHOD",
))
"""Every method the sweep can run, by name."""


def get_method(name: str) -> Method:
    """The method named ``name``; :class:`~trainers.errors.UnknownName` (with the known ones) if none is."""
    return METHODS[name]
