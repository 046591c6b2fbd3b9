"""Stored text as a person reads it: a key, an error, a note or a remote id may hold
anything a caller or a provider put there, and a terminal or a log obeys control
characters instead of showing them."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def visible(text: str) -> str:
    """`text` with every C0 and C1 control character and DEL written as Python writes
    it in a string (`\\x1b`, `\\n`, `\\r`, `\\t`, `\\x85`): an escape sequence from a
    provider's error page cannot retitle, clear or link the terminal it is shown in,
    and a line break in a key cannot forge a log line. Everything else, backslashes
    too, is left as is: for display only, never for what is stored or sent as JSON."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    return _NAMED.get(char) or f"\\x{ord(char):02x}"


def age(seconds: float | None) -> str:
    """A duration as the command line and the log say it: `42 s`, `7 min`, `5 h`,
    `3 days` (`-`: none)."""
    if seconds is None:
        return "-"
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds / 86400:.0f} days"
