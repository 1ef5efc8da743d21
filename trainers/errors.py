"""How an error is said in one line, for every floor above (a refusal, a retry's line, a problem's reason)."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """An error said in one line: its message's first line, or its type's name when it has no message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class UnknownName(KeyError):
    """A name that no registry entry has (a method, a suite): a refusal, said in its message, which a command
    shows in one line. A subclass of KeyError, as a mapping's missing key, but a command catches this one alone, so
    that a KeyError from a bug keeps its traceback."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else type(self).__name__
