"""Which submissions an operator means: a `Filter`, and parsing of what people type.

Pure: no I/O. Relative times ("2h") are turned into instants against a `now`
that the caller takes from the database clock, so that "since 2h" means the
same thing to every host looking at one database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from denpyo.domain.limits import MAX_KEY_LENGTH, check_channel_name, check_search_text
from denpyo.domain.status import Status
from denpyo.errors import InvalidInput

DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000
MAX_ERROR_TEXT = 200
"""Longest text `error_text` looks for in the last errors."""

_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)(?:\s+ago)?")  # fullmatch
_SUFFIX = re.compile(r"~resend\d+\Z")  # \Z: `$` also matches before a final newline


@dataclass(frozen=True, slots=True)
class Filter:
    """A selection of submissions, newest first. Every field is optional (None or
    empty: no condition); set fields are combined with AND.

    - `statuses`: any of these statuses.
    - `in_doubt`: True, only rows in doubt; False, only rows not in doubt.
    - `needs_person`: True, only rows a person must look at: no resolution
      yet, and in doubt, exhausted (`failed` with no next attempt) or `rejected`.
    - `resolved`: True, only rows with a person's resolution; False, only without.
    - `since` / `until`: created at or after `since`, and before `until`.
    - `key_prefix`: the business key starts with this text (case-sensitive).
    - `error_text`: the last error contains this text (case-sensitive).
    - `limit`: at most this many rows (1..10,000).
    """

    statuses: tuple[Status, ...] = ()
    channel: str | None = None
    in_doubt: bool | None = None
    needs_person: bool | None = None
    resolved: bool | None = None
    since: datetime | None = None
    until: datetime | None = None
    key_prefix: str | None = None
    error_text: str | None = None
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        for status in self.statuses:
            if not isinstance(status, Status):
                raise InvalidInput(f"statuses must be Status values, not {status!r}")
        if self.channel is not None:
            check_channel_name(self.channel)
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidInput(f"{name} must be a datetime with a time zone, not {value!r}")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise InvalidInput(
                f"since ({self.since.isoformat()}) must be before until ({self.until.isoformat()})"
            )
        if self.key_prefix is not None:
            if not isinstance(self.key_prefix, str) or not self.key_prefix:
                raise InvalidInput("key prefix must be a non-empty string")
            if len(self.key_prefix) > MAX_KEY_LENGTH:
                raise InvalidInput(f"key prefix is longer than a key can be ({MAX_KEY_LENGTH})")
            check_search_text(self.key_prefix, "key prefix")
        if self.error_text is not None:
            if not isinstance(self.error_text, str) or not self.error_text:
                raise InvalidInput("error text must be a non-empty string")
            if len(self.error_text) > MAX_ERROR_TEXT:
                raise InvalidInput(f"error text is longer than {MAX_ERROR_TEXT} characters")
            check_search_text(self.error_text, "error text")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int):
            raise InvalidInput(f"limit must be a whole number, not {self.limit!r}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}, not {self.limit}")

    @property
    def is_empty(self) -> bool:
        """No condition at all (the limit aside): every row matches."""
        return not self.statuses and all(
            value is None
            for value in (
                self.channel,
                self.in_doubt,
                self.needs_person,
                self.resolved,
                self.since,
                self.until,
                self.key_prefix,
                self.error_text,
            )
        )

    def describe(self) -> str:
        """The conditions in words, for the action log: ``failed rows of sms, created
        since 2026-12-01 09:00 UTC``; "every row" when there is none."""
        statuses = "/".join(s.value for s in self.statuses) or "all"
        head = f"{statuses} rows" if self.statuses else "every row"
        if self.channel is not None:
            head += f" of {self.channel}"
        words = [head]
        for flag, yes, no in (
            (self.in_doubt, "in doubt", "not in doubt"),
            (self.needs_person, "needing a person", "not needing a person"),
            (self.resolved, "resolved", "unresolved"),
        ):
            if flag is not None:
                words.append(yes if flag else no)
        if self.key_prefix is not None:
            words.append(f"with keys starting {self.key_prefix!r}")
        if self.error_text is not None:
            words.append(f"whose last error contains {self.error_text!r}")
        if self.since is not None:
            words.append(f"created since {self.since.astimezone(UTC):%Y-%m-%d %H:%M} UTC")
        if self.until is not None:
            words.append(f"created before {self.until.astimezone(UTC):%Y-%m-%d %H:%M} UTC")
        return ", ".join(words)


def parse_statuses(values: Iterable[str]) -> tuple[Status, ...]:
    """`["failed,rejected", "requesting"]` → the statuses, in order, once each."""
    found: list[Status] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower()
            if not name:
                continue
            try:
                status = Status(name)
            except ValueError:
                known = ", ".join(s.value for s in Status)
                raise InvalidInput(
                    f"unknown status {part.strip()!r}; use one of: {known}"
                ) from None
            if status not in found:
                found.append(status)
    return tuple(found)


def parse_when(text: str, now: datetime) -> datetime:
    """An instant from what a person types.

    - a duration back from `now`: ``90s``, ``15m``, ``2h``, ``3d``, ``1w`` (``ago`` optional);
    - ``today`` or ``yesterday`` (midnight, local time);
    - an ISO date or date-time: ``2024-05-01``, ``2024-05-01T09:30``, with ``Z`` or an
      offset; without one it is local time.
    """
    value = text.strip().lower()
    if not value:
        raise InvalidInput("an empty time; use e.g. 2h, 3d, today or 2024-05-01")
    match = _RELATIVE.fullmatch(value)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:
            raise InvalidInput(f"{text!r} reaches too far back") from None
    if value in ("today", "yesterday"):
        local = now.astimezone()
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
        if value == "yesterday":
            midnight -= timedelta(days=1)
        return midnight.astimezone(UTC)
    try:
        when = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise InvalidInput(
            f"cannot read {text!r} as a time; use a duration (90s, 15m, 2h, 3d, 1w), "
            "today, yesterday, or an ISO date (2024-05-01, 2024-05-01T09:30Z)"
        ) from None
    try:
        if when.tzinfo is None:
            when = when.astimezone()  # a person's "2024-05-01" is in their own time zone
        return when.astimezone(UTC)
    except (ValueError, OverflowError):  # the edge of the range (0001-01-01) crossed
        raise InvalidInput(
            f"{text!r} is out of the range of times a datetime can hold (years 1 to 9999)"
        ) from None


def parse_duration(text: str) -> float:
    """Seconds in a duration a person types: ``90s``, ``15m``, ``2h``, ``90d``, ``1w``."""
    match = _RELATIVE.fullmatch(text.strip().lower())
    if not match:
        raise InvalidInput(f"cannot read {text!r} as a duration; use e.g. 90s, 15m, 2h, 90d, 1w")
    return float(match.group(1)) * _UNITS[match.group(2)]


def resend_key(key: str, n: int) -> str:
    """The business key of the n-th resend of `key`: ``order:42~resend1``. A resend of
    a resend counts on from the original key instead of stacking suffixes."""
    return f"{_SUFFIX.sub('', key)}~resend{n}"
