"""How an error is said in one line, for every floor above (a refusal, a retry's line, a problem's reason)."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """An error said in one line: its message's first line, or its type's name when it has no message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
