"""Name -> :class:`~trainers.method.Method` for every method the sweep can run."""

from __future__ import annotations

import difflib

from trainers.method import Method
from trainers.methods import baseline, consert, dclr, diffcse, flow, sct, sg, simcse

METHODS: dict[str, Method] = {m.name: m for m in (baseline.METHOD, simcse.METHOD, sg.METHOD, consert.METHOD,
                                                   sct.METHOD, flow.METHOD, dclr.METHOD, diffcse.METHOD)}


def get_method(name: str) -> Method:
    if name not in METHODS:
        hint = difflib.get_close_matches(name, METHODS, n=1)
        suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
        raise KeyError(f"unknown method {name!r} (known: {sorted(METHODS)}){suggestion}")
    return METHODS[name]
