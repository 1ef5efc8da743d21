"""A sweep variant's name as a user gives it (``NAME`` or ``NAME-HASHPREFIX``), and refusals.

Both the Ray experiment folders (:mod:`sweep.spec.variants`) and the MLflow parent
runs (:mod:`results.reader`) are chosen by such a name. Every command refuses
bad input with :class:`UsageError`: one line on stderr and exit code 2.
"""

from __future__ import annotations


class UsageError(ValueError):
    """A refused command: a name that matches no sweep or several, options that contradict the stores."""


def split_name(text: str, names: set[str]) -> tuple[str, str]:
    """``NAME`` or ``NAME-HASHPREFIX`` -> (name, hash prefix), where ``names`` are the known sweep names."""
    if text in names or "-" not in text:
        return text, ""
    name, prefix = text.rsplit("-", 1)
    return name, prefix
