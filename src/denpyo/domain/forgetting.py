"""Forgetting a person (`denpyo forget`): what is erased, what is kept. Pure, no I/O.

A row's payload is the personal data (an address, a phone number, an amount); the
slip (status, attempts, times, ids, idempotency key, remote id, the history of its
moves) is what keeps a call from being made twice and the counts honest. Forgetting
erases the first and keeps the second: the payload becomes JSON null, the last
error goes, and every text denpyo keeps about the row that may quote the payload
(its resolution, its events' details, the notes of the actions on it) is replaced
whole by `FORGOTTEN` (`replaced`): a provider may spell a value in ways no search
knows. What is searched (`Scrubber`): the forget's own note, and the action log's
other parameters.

"Quotes a value" (`Scrubber`): contains, in any case and spelling (`spelled`), a
string of the payload (any string leaf, at any depth) of `MIN_QUOTED` characters or
more, or the value a person searched the payloads by (`Where`), not as part of a
longer word (`as_a_word`: `eur` is not in "Europe"). Shorter strings ("no", "EU") are
not looked for: they would scrub words out of every note.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from denpyo.domain.rules import label
from denpyo.domain.sealed import SEALED, SealedPayload
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput

FORGOTTEN = "[forgotten]"
"""What replaces a quoted value of a forgotten payload."""
MIN_QUOTED = 3
"""The shortest string of a payload looked for in the texts about its row."""
SEALED_PATH = f'$."{SEALED}"'
"""The one field of an encrypted payload as stored (domain/sealed.py), as SQLite's and
MariaDB's JSON functions read it (a parameter): SQL cannot look inside such a payload,
so its rows are read (decrypted) and matched here."""

MAX_PATH = 8
"""The deepest field `--where` may name (`customer.address.email`: 3)."""
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""One name of a `--where` path. Only these characters: the path is written into the
JSON path SQLite and MariaDB read (`$."customer"."email"`), so it can hold no quote."""


@dataclass(frozen=True, slots=True)
class Where:
    """`FIELD=VALUE`: the payloads whose string at `path` (a dotted path through
    objects) is exactly `value`, compared as text, byte for byte."""

    path: tuple[str, ...]
    value: str

    @classmethod
    def parse(cls, text: str) -> Where:
        """`to=a@example.com`, `customer.email=a@example.com`; InvalidInput otherwise."""
        field, sep, value = text.partition("=")
        if not sep:
            raise InvalidInput(
                "--where takes FIELD=VALUE (to=a@example.com, customer.email=a@example.com)"
            )
        path = tuple(field.strip().split("."))
        if len(path) > MAX_PATH or not all(_SEGMENT.fullmatch(name) for name in path):
            raise InvalidInput(
                f"--where: {field.strip()!r} is not a field: names of letters, digits, '_' "
                f"or '-', joined by '.' for a nested field (at most {MAX_PATH} deep)"
            )
        if not value:
            raise InvalidInput(f"--where {field.strip()}=: give the value to look for")
        if "\x00" in value:
            raise InvalidInput("--where: the value holds a NUL character, which no payload holds")
        return cls(path, value)

    @property
    def field(self) -> str:
        """The field as a person wrote it: `customer.email`."""
        return ".".join(self.path)

    @property
    def json_path(self) -> str:
        """The path as SQLite's and MariaDB's JSON functions read it, each name quoted
        (`$."customer"."email"`): built from checked names only, and passed as a
        parameter, never spliced into the SQL."""
        return "$" + "".join(f'."{name}"' for name in self.path)

    def matches(self, payload: Any) -> bool:
        """Whether `payload` has this string at this path (what the SQL match says)."""
        found = payload
        for name in self.path:
            if not isinstance(found, dict) or name not in found:
                return False
            found = found[name]
        return isinstance(found, str) and found == self.value


def strings_of(payload: Any) -> Iterator[str]:
    """Every string leaf of a payload, at any depth (object keys are names, not data;
    a payload that could not be opened, `SealedPayload`, holds none of the row's)."""
    stack = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, SealedPayload):
            continue
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)


class Scrubber:
    """Replaces every quoted value (`quoted`) in a text by `marker` (`FORGOTTEN`), in
    every spelling a provider or a person may quote it in (`spelled`): in any case,
    each character as written, as JSON escapes it (`\\u00e9`, `\\"`) or as a URL
    encodes it (`%40`, `+` for a space), the longest value first where two overlap:
    one pass of one pattern per text. A text scrubbed already stays as it is. The one
    scrubbing of values in texts: forgetting, a provider's error where payloads are
    encrypted (`QUOTED`), a person's note, and redaction (`REDACTED`) all go
    through it."""

    def __init__(
        self, payloads: Iterable[Any], also: Iterable[str] = (), *, marker: str = FORGOTTEN
    ) -> None:
        self.marker = marker
        found = {text for payload in payloads for text in strings_of(payload)}
        found = {text for text in found if len(text) >= MIN_QUOTED}
        found.update(text for text in also if text)
        self.quoted = frozenset(found)
        ordered = sorted(found, key=lambda text: (-len(text), text))
        # A whole document is looked for as written, JSON-escaped or URL-encoded, by
        # plain search: a pattern of it would take seconds to compile.
        long = [text for text in ordered if len(text) > SPELLED_UP_TO]
        self._long = sorted({form for text in long for form in _whole_forms(text)}, key=len)[::-1]
        short = [text for text in ordered if len(text) <= SPELLED_UP_TO]
        # The marker first: text scrubbed already is left as it is.
        alternatives = [re.escape(marker), *map(as_a_word, short)]
        self._pattern = re.compile("|".join(alternatives), re.IGNORECASE) if short else None

    def __call__(self, text: str) -> str:
        """`text` with each quoted value, in any of its spellings, replaced."""
        for form in self._long:
            if form in text:
                text = text.replace(form, self.marker)
        if self._pattern is None:
            return text
        return self._pattern.sub(self.marker, text)

    def text(self, text: str | None) -> str | None:
        """A nullable text, scrubbed."""
        return None if text is None else self(text)

    def value(self, value: Any) -> Any:
        """A JSON value with each of its strings (names too) scrubbed: the parameters
        and dry run an action log entry keeps."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(name): self.value(item) for name, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


SPELLED_UP_TO = 256
"""The longest value matched character by character, in any case (`spelled`); a
longer one (a whole document) is looked for in its three whole spellings
(`_whole_forms`), as written."""


def spelled(text: str) -> str:
    """A regular expression (matched in any case) for `text` as a provider or a person
    may quote it: each character that is no ASCII letter or digit as written, as JSON
    escapes it, or URL-encoded, so that `ann+b@x.com`, `ann%2Bb%40x.com` and
    `ann+b%40x.com` are all found."""
    return "".join(_character(c) for c in text)


WORD_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4})|(?<=%[0-9A-Fa-f]{2}))"
"""Before a value that begins with a letter or a digit: no letter or digit, unless it
ends an escape (JSON's `\\n`, `\\u00e9`; a URL's `%20`), which is a separator."""
WORD_END = r"(?![A-Za-z0-9])"
"""After a value that ends with a letter or a digit: no letter or digit."""


def as_a_word(text: str) -> str:
    """`spelled(text)`, found only where it is not part of a longer word: a value
    `eur` is in "eur 30" and "to=eur&", not in "Europe" (which it would garble)."""
    start = WORD_START if text[:1].isascii() and text[:1].isalnum() else ""
    end = WORD_END if text[-1:].isascii() and text[-1:].isalnum() else ""
    return start + spelled(text) + end


def _whole_forms(text: str) -> set[str]:
    """A long value as written, as JSON writes it inside quotes, and URL-encoded."""
    return {text, json.dumps(text)[1:-1], quote(text, safe="")}


@functools.cache
def _character(c: str) -> str:
    """One character of `spelled`: the ways it may be written."""
    if c.isascii() and c.isalnum():
        return re.escape(c)
    cases = {c, c.lower(), c.upper()}  # the escapes of `é` and `É` differ by more than case
    forms = {
        form
        for case in cases
        if len(case) == 1
        for form in (case, json.dumps(case)[1:-1], quote(case, safe=""))
    }
    if c == " ":
        forms.add("+")  # a form's encoding
    if c == "/":
        forms.add("\\/")  # JSON may escape it
    alternatives = sorted(forms, key=lambda form: (-len(form), form))
    return "(?:" + "|".join(map(re.escape, alternatives)) + ")"


def replaced(text: str | None) -> str | None:
    """What `forget` keeps of a text about a forgotten row (an error, an event's detail,
    a resolution, a note): `FORGOTTEN` in its place, whatever it said. A text is never
    searched for what it quoted (a provider may spell a value in ways no search knows)."""
    return None if text is None else FORGOTTEN


def is_open(sub: Submission, now: datetime) -> bool:
    """Not settled for good: `requesting`, due for a next attempt or a verify, or held
    by a sender (a lease that has not run out by the database clock `now`). Such a row
    may still be sent: its payload cannot be forgotten."""
    return (
        sub.status is Status.REQUESTING
        or sub.next_attempt_at is not None
        or (sub.locked_until is not None and sub.locked_until > now)
    )


def open_refusal(sub: Submission, now: datetime) -> str:
    """Why an open row stops a `forget`, and what the person does first."""
    if sub.locked_until is not None and sub.locked_until > now:
        return f"{label(sub)} is being sent right now: wait for it to settle"
    what = "requesting" if sub.status is Status.REQUESTING else "due for a next attempt"
    return (
        f"{label(sub)} is still open ({sub.status.value}, {what}): abandon it first: "
        f'denpyo resolve {sub.id} --abandon --note "…"'
    )


@dataclass(frozen=True, slots=True)
class Forgotten:
    """Who forgot a row's payload, when and why, as a page says it."""

    at: datetime
    by: str | None = None
    note: str | None = None

    def describe(self) -> str:
        """`payload forgotten on 2026-03-01 14:02 UTC by alice: GDPR request #88`."""
        line = f"payload forgotten on {self.at:%Y-%m-%d %H:%M} UTC"
        if self.by:
            line += f" by {self.by}"
        return f"{line}: {self.note}" if self.note else line
