"""Input checks for submit and enqueue (SPEC §10.5): refuse before writing anything."""

from __future__ import annotations

import json
import re
from typing import Any

from denpyo.errors import InvalidKey, KeyReused, PayloadNotJSON, PayloadTooLarge

MAX_PAYLOAD_BYTES = 1024 * 1024
"""Default limit on the encoded JSON payload (1 MiB); `Ledger(max_payload_bytes=...)`."""

MAX_KEY_LENGTH = 255
"""Longest business key (and ordering key), in characters. Keys sit in a unique index."""

MAX_CHANNEL_LENGTH = 100
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_payload(payload: Any, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Return the payload as compact JSON text, or raise a specific InvalidInput."""
    try:
        text = _ENCODER.encode(payload)
    except (TypeError, ValueError) as exc:
        raise PayloadNotJSON(f"payload is not JSON-serialisable: {exc}") from exc
    if len(text) * 4 > max_bytes:  # else it fits whatever its characters (UTF-8: 1-4 bytes)
        size = len(text.encode())
        if size > max_bytes:
            raise PayloadTooLarge(f"payload is {size} bytes encoded; the limit is {max_bytes}")
    return text


def check_key(key: object, what: str = "key") -> str:
    """A business key is a non-empty string of at most MAX_KEY_LENGTH characters."""
    if not isinstance(key, str):
        raise InvalidKey(f"{what} must be a string, not {type(key).__name__}")
    if not key:
        raise InvalidKey(f"{what} must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(f"{what} is {len(key)} characters; the limit is {MAX_KEY_LENGTH}")
    if "\x00" in key:
        raise InvalidKey(f"{what} must not contain NUL characters")
    return key


def check_channel_name(name: object) -> str:
    """Channel names appear in URLs, metrics and SQL filters: keep them plain."""
    if not isinstance(name, str) or not CHANNEL_NAME.match(name) or len(name) > MAX_CHANNEL_LENGTH:
        raise ValueError(
            f"channel name {name!r} must be 1-{MAX_CHANNEL_LENGTH} characters of "
            "letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
        )
    return name


def check_same_payload(channel: str, key: str, recorded: Any, payload_json: str) -> None:
    """Submitting a known channel and key again must mean the same call."""
    if json.loads(payload_json) != recorded:
        raise KeyReused(
            f"{channel}:{key} is already recorded with a different payload; a key names one "
            "intended call (send a corrected payload with `denpyo resolve --resend`)"
        )
