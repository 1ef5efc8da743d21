"""Ctrl-C (SIGINT) and SIGTERM during a sweep: stop cleanly once, exit at once the second time.

The first signal asks Ray Tune to stop the way its own Ctrl-C handler does: it saves the experiment
state with the unfinished trials still unfinished, stops them, and calls the callbacks' end (the
tracker then marks their MLflow runs KILLED). Tune installs that handler for SIGUSR1 whatever
``TUNE_DISABLE_SIGINT_HANDLER`` says; with SIGINT left to this module, SIGINT and SIGTERM behave alike
and the driver knows that it was stopped (to print how to resume instead of a summary of a finished
sweep). A signal before Tune runs is an ordinary KeyboardInterrupt. The second signal exits at once
with 128 + its number: a resume continues the trials whatever their runs say.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Callable

# This module handles SIGINT; Tune's handler is reached through SIGUSR1 (see the docstring).
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnSignal:
    """Inside it, the first SIGINT or SIGTERM stops Tune's run cleanly and the second exits at once.
    ``note`` is told what happens (a line for the console); ``before_exit`` runs just before exiting
    (to leave the terminal tidy)."""

    def __init__(self, note: Callable[[str], None], before_exit: Callable[[], None]):
        self.note = note
        self.before_exit = before_exit
        self.signal: signal.Signals | None = None
        self.reason: str | None = None
        """Why the sweep was stopped when no signal stopped it (:meth:`stop`)."""
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopOnSignal:
        # A Tune handler left from an earlier run in this process would set an event no loop reads.
        self._previous = {number: signal.getsignal(number) for number in (*SIGNALS, signal.SIGUSR1)}
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        for number in SIGNALS:
            signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by the signal that stopped the sweep."""
        return 128 + int(self.signal or signal.SIGINT)

    def stop(self, reason: str) -> None:
        """Stop Tune's run cleanly, as the first signal does, for ``reason`` (a tracking server gone too long)."""
        if self.signal is not None or self.reason is not None:
            return
        self.reason = reason
        self.note(f"stopping: {reason}; Ray saves the sweep's state and stops its trials")
        tune_stop = signal.getsignal(signal.SIGUSR1)
        if callable(tune_stop):
            tune_stop(signal.SIGUSR1, None)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        if self.signal is not None:
            self.before_exit()
            self.note(f"{name} again: exiting now (the sweep's runs may still say RUNNING; a resume continues them)")
            os._exit(128 + number)
        tune_stop = signal.getsignal(signal.SIGUSR1)
        if not callable(tune_stop):
            raise KeyboardInterrupt
        self.signal = signal.Signals(number)
        self.note(f"{name}: stopping; Ray saves the sweep's state and stops its trials "
                  "(press Ctrl-C again to quit at once)")
        tune_stop(signal.SIGUSR1, frame)  # it puts back the SIGINT handler it found: this one
