"""Input checks for submit and enqueue: refuse before writing anything."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from denpyo.domain.sealed import SEALED, SealedPayload
from denpyo.domain.submission import Submission
from denpyo.errors import (
    ConfigurationError,
    InvalidInput,
    InvalidKey,
    KeyReused,
    PayloadNotJSON,
    PayloadTooLarge,
)

MAX_PAYLOAD_BYTES = 1024 * 1024
"""Default limit on the encoded JSON payload (1 MiB); `Ledger(max_payload_bytes=...)`."""

MAX_KEY_LENGTH = 255
"""Longest business key (and ordering key), in characters. Keys sit in a unique index."""

IDLE_CONNECTION_SECONDS = 10.0
"""How long the worker's metrics endpoint and the dashboard keep a connection that
sends nothing (before its request, or between two) before they close it."""

MAX_IDLE_CONNECTIONS = 100
"""The most connections each keeps waiting for a request; one more closes the one
that has waited longest, so that a crowd of silent sockets never locks a scrape or
a person out."""

SERVE_THREADS = 4
"""The threads the worker's metrics endpoint answers on: requests, not connections."""

MAX_PAYLOAD_DEPTH = 31
"""Deepest nesting of arrays and objects in a payload: the most MariaDB's JSON accepts,
kept on every database so that an application can move between them. Far below
Python's recursion limit, so every payload the ledger keeps can be read back."""

MAX_CHANNEL_LENGTH = 100
CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
"""A channel name, whole (`fullmatch`: `$` would let a trailing newline through)."""

MAX_ID = 2**63 - 1
"""The largest id a row can have: ids are signed 64-bit integers on every database."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def wire_body(payload: Any) -> bytes:
    """The payload as a channel sends it: the compact JSON it was recorded as, in UTF-8."""
    return _ENCODER.encode(payload).encode()


def encode_payload(payload: Any, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Return the payload as compact JSON text that every database can store, or raise
    a specific InvalidInput: nothing unencodable may reach a driver, whose own error
    would come after a row was half-written or read back wrong. A payload that could not
    be opened here (`SealedPayload`) is no payload to send again: `InvalidInput`."""
    if isinstance(payload, dict | SealedPayload):
        _check_not_sealed(payload)
    try:
        text = _ENCODER.encode(payload)
    except RecursionError:
        raise PayloadNotJSON(_too_deep()) from None
    except (TypeError, ValueError) as exc:
        raise PayloadNotJSON(f"payload is not JSON-serialisable: {exc}") from exc
    if not text.isascii():
        try:
            size = len(text.encode())
        except UnicodeEncodeError as exc:
            raise PayloadNotJSON(
                f"payload is not valid Unicode text: a lone surrogate "
                f"({text[exc.start]!a}) cannot be stored as UTF-8"
            ) from None
        if size > max_bytes:
            raise PayloadTooLarge(f"payload is {size} bytes encoded; the limit is {max_bytes}")
    elif len(text) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(text)} bytes encoded; the limit is {max_bytes}")
    if text.count("[") + text.count("{") > MAX_PAYLOAD_DEPTH and not _nested_within(
        payload, MAX_PAYLOAD_DEPTH
    ):
        raise PayloadNotJSON(_too_deep())
    if "\\u0000" in text and _NUL.search(text):
        raise PayloadNotJSON(
            "payload holds a NUL character (\\u0000), which PostgreSQL cannot store in JSON"
        )
    return text


UNLISTED = "denpyo:unlisted"
"""The one field of the payload an adopted row gets when the provider's record of the
call carries none: the call was made, for a payload nobody here knows. A later submit
of its key, whatever its payload, is that call (its outcome returned, nothing sent)."""


def unlisted_payload() -> dict[str, str]:
    """The payload of a call adopted without one (`UNLISTED`)."""
    return {UNLISTED: "the provider's record of this call carries no payload"}


def _check_not_sealed(payload: dict[Any, Any] | SealedPayload) -> None:
    """Refuse what the store would take for a sealed payload when it reads it back (the
    reserved field `denpyo:sealed`), and the stand-in of one that could not be opened."""
    if isinstance(payload, SealedPayload):
        raise InvalidInput(f"cannot send this payload again: {payload.why()}")
    if SEALED in payload:
        raise PayloadNotJSON(f"the payload field {SEALED!r} is reserved for encrypted payloads")
    if UNLISTED in payload:
        raise PayloadNotJSON(
            f"the payload field {UNLISTED!r} is reserved for calls adopted without a payload"
        )


_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""`\\u0000` in JSON text that is an escape, not an escaped backslash before `u0000`."""


def decode_payload(text: str) -> Any:
    """A payload a person typed (JSON text), checked as `encode_payload` checks one."""
    try:
        return json.loads(text)
    except RecursionError:
        raise PayloadNotJSON(_too_deep()) from None
    except ValueError as exc:
        raise PayloadNotJSON(f"payload is not valid JSON: {exc}") from None


def _too_deep() -> str:
    return f"payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep (arrays and objects)"


def _nested_within(payload: Any, limit: int) -> bool:
    """Whether no array or object lies deeper than `limit` levels (iterative: the
    payload may be deeper than Python's own recursion allows)."""
    stack: list[tuple[Any, int]] = [(payload, 1)] if isinstance(payload, _CONTAINERS) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return False
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))
    return True


_CONTAINERS = (dict, list, tuple)


def check_key(key: object, what: str = "key") -> str:
    """A business key is a non-empty string of at most MAX_KEY_LENGTH characters."""
    if not isinstance(key, str):
        raise InvalidKey(f"{what} must be a string, not {type(key).__name__}")
    if not key:
        raise InvalidKey(f"{what} must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(f"{what} is {len(key)} characters; the limit is {MAX_KEY_LENGTH}")
    return _plain_text(key, what, InvalidKey)


MAX_STORED_TEXT = 16_000
"""Characters kept of a text the engine records: MariaDB's TEXT holds 65,535 bytes,
and a character takes up to four. Longer texts (a provider's whole error page) are
cut, never refused: the outcome would be lost with them."""


def storable_text(text: str) -> str:
    """`text` as every database keeps it: a NUL (PostgreSQL's text refuses it) and a
    lone surrogate (no UTF-8 form) are written as escapes, and a text past
    `MAX_STORED_TEXT` is cut, saying so; everything else as is. For what the engine
    records but nobody typed: an error, a remote id, a verdict."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode()
    if len(text) > MAX_STORED_TEXT:
        kept = MAX_STORED_TEXT - 40
        text = f"{text[:kept]} … [{len(text) - kept:,} more characters cut]"
    return text


def check_channel_name(name: object) -> str:
    """Channel names appear in URLs, metrics and SQL filters: keep them plain.
    `InvalidInput` (a ValueError) otherwise, whether registered or typed by a person."""
    if (
        not isinstance(name, str)
        or len(name) > MAX_CHANNEL_LENGTH
        or not CHANNEL_NAME.fullmatch(name)
    ):
        raise InvalidInput(
            f"channel name {name!r} must be 1-{MAX_CHANNEL_LENGTH} characters of "
            "letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
        )
    return name


def check_same_call(sub: Submission, payload_json: str) -> None:
    """`KeyReused` unless the row a channel and key already have was recorded with this
    payload. A removed row's payload is not kept, nor a forgotten one's, nor known of a
    call the audit adopted without one (`UNLISTED`): its key alone says the call was
    made, and is answered with its outcome."""
    unlisted = isinstance(sub.payload, dict) and UNLISTED in sub.payload
    if sub.removed_at is None and sub.forgotten_at is None and not unlisted:
        if isinstance(sub.payload, SealedPayload):
            raise ConfigurationError(
                f"{sub.channel}:{sub.key} is recorded already, and {sub.payload.why()}: "
                "cannot tell whether this is the same call; nothing was written"
            )
        check_same_payload(sub.channel, sub.key, sub.payload, payload_json)


def check_id(submission_id: object) -> bool:
    """Whether a row could have this id (1 to `MAX_ID`): any other whole number is
    no row's, as an id never used is, where a driver would raise OverflowError past
    64 bits. Anything but a whole number is `InvalidInput`."""
    if not isinstance(submission_id, int) or isinstance(submission_id, bool):
        raise InvalidInput(f"a submission id is a whole number, not {submission_id!r}")
    return 0 < submission_id <= MAX_ID


def _plain_text(text: str, what: str, error: type[InvalidInput]) -> str:
    """`text` unless it holds a NUL or a lone surrogate, which no database keeps as
    text (PostgreSQL refuses a NUL, and no UTF-8 encodes a lone surrogate)."""
    if "\x00" in text:
        raise error(f"{what} must not contain NUL characters")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise error(
                f"{what} is not valid Unicode text: a lone surrogate ({text[exc.start]!a}) "
                f"at character {exc.start} cannot be stored as UTF-8"
            ) from None
    return text


def check_search_text(text: str, what: str) -> str:
    """Text a person searches keys by: no key holds a NUL or a lone surrogate, and a
    driver would raise on one (PostgreSQL's cannot encode it), so refuse it here."""
    return _plain_text(text, what, InvalidInput)


def check_same_payload(channel: str, key: str, recorded: Any, payload_json: str) -> None:
    """Submitting a known channel and key again must mean the same call: the same
    JSON, not values Python calls equal (`1 == True == 1.0`), so the canonical texts
    of both are compared (`canonical_json`)."""
    if canonical_json(json.loads(payload_json)) != canonical_json(recorded):
        raise KeyReused(
            f"{channel}:{key} is already recorded with a different payload; a key names one "
            "intended call (send a corrected payload with `denpyo resolve --resend`)"
        )


def canonical_json(value: Any) -> str:
    """`value` as JSON text that two payloads share exactly when every database keeps
    the same JSON for them: keys sorted and no spacing (PostgreSQL's jsonb keeps
    neither), JSON's types kept (`true` is no number; `1` and `1.0` differ). jsonb
    keeps a number's decimal value, not its spelling: a float Python writes with an
    exponent of 16 or more (`1e+300`) reads back as the integer that spelling means
    (10**300, which is not the float's own binary value), and `-0.0` as `0.0`; so
    such a float is written here as that integer, and a zero without its sign."""
    return json.dumps(
        _as_stored(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def _as_stored(value: Any) -> Any:
    """`value` with its floats as jsonb gives them back (see `canonical_json`)."""
    if isinstance(value, float):
        if value == 0:
            return 0.0
        if abs(value) >= 1e16:  # written with an exponent, and always whole
            return int(Decimal(repr(value)))
        return value
    if isinstance(value, dict):
        return {name: _as_stored(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_stored(item) for item in value]
    return value
