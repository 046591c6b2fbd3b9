"""A row's idempotency key in the fields providers give it, and back.

Every provider field that carries the key is called ``denpyo_key``, and each
accepts fewer characters than a key may hold. denpyo's own keys (UUIDs) fit all
of them unchanged; these helpers say what happens to any other key, in one place
that the channels (which write the field) and the webhooks (which read it) share:

- SES v2 message tags allow only ``A-Z a-z 0-9 _ - . @`` (up to 256 characters).
  `ses_tag_value` leaves such a key as it is; any other key becomes
  ``b32.`` + its UTF-8 bytes in base 32 (RFC 4648, upper case, no ``=`` padding).
  A key that itself starts with ``b32.`` is encoded too, so `key_from_ses_tag`
  always gives back the key.
- SQS and SNS FIFO deduplication ids allow up to 128 characters of ASCII letters,
  digits and punctuation. `fifo_dedup_id` leaves such a key as it is; any other key
  becomes the 64 hex digits of the SHA-256 of its UTF-8 bytes. That is not
  reversible: the channels also carry the key itself as the ``denpyo_key`` message
  attribute.
"""

from __future__ import annotations

import base64
import hashlib
import re
import string

FIELD = "denpyo_key"
"""The name under which every provider carries a row's idempotency key."""

SES_PREFIX = "b32."
"""Starts an SES tag value that holds an encoded key."""

SES_TAG_MAX = 256
FIFO_DEDUP_MAX = 128

_SES_PLAIN = re.compile(r"[A-Za-z0-9_\-.@]+")
_FIFO_CHARS = frozenset(string.ascii_letters + string.digits + string.punctuation)


def ses_tag_value(key: str) -> str:
    """The SES v2 tag value that carries `key` (the key itself when SES accepts it).
    Raises ValueError when even the encoding is longer than SES allows."""
    if _SES_PLAIN.fullmatch(key) and not key.startswith(SES_PREFIX):
        value = key
    else:
        encoded = base64.b32encode(key.encode("utf-8")).decode("ascii").rstrip("=")
        value = SES_PREFIX + encoded
    if len(value) > SES_TAG_MAX:
        raise ValueError(f"the key is too long for an SES tag ({len(value)} > {SES_TAG_MAX})")
    return value


def key_from_ses_tag(value: str) -> str:
    """The idempotency key an SES tag value carries (the inverse of `ses_tag_value`)."""
    if not value.startswith(SES_PREFIX):
        return value
    encoded = value[len(SES_PREFIX) :]
    padded = encoded + "=" * (-len(encoded) % 8)
    return base64.b32decode(padded).decode("utf-8")


def fifo_dedup_id(key: str) -> str:
    """The SQS/SNS FIFO ``MessageDeduplicationId`` for `key`: the key when it fits,
    else the SHA-256 of it in hex (one-way; the key travels as an attribute too)."""
    if 0 < len(key) <= FIFO_DEDUP_MAX and all(c in _FIFO_CHARS for c in key):
        return key
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
