"""Payloads encrypted at rest: sealed where a row is written, opened where it is read.

With keys configured (`Ledger(payload_key=...)`, else `DENPYO_PAYLOAD_KEYS`), the
payload column holds, instead of the payload, the JSON object

    {"denpyo:sealed": "v1.<kid>.<base64url(nonce || ciphertext+tag), unpadded>"}

AES-256-GCM (`cryptography`'s AESGCM), a random 96-bit nonce per payload, and as
associated data the row's channel and key: a ciphertext copied to another row does
not open there. `kid` is the first 8 hex digits of the SHA-256 of the key, so a
reader knows which key a row needs without trying them all. It is valid JSON for
PostgreSQL's jsonb, MariaDB's JSON and SQLite's checked text, and every other column
stays in clear: every query of the docs works on everything but the payload.

Keys: the first encrypts, all decrypt (so a new key goes first, and the old ones stay
until `rotate_payload_key` has re-encrypted their rows). A row whose key is not
configured reads as a slip whose payload is a `SealedPayload` (domain/sealed.py).

The store applies a `Sealing` at its boundary: `insert_params` (and PostgreSQL's
many-row inserts) write `Sealing.stored`, `Rows.parse_payload` opens, the archive
writes `Sealing.at_rest` and reads back through `Sealing.open_value`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from denpyo.domain.limits import wire_body
from denpyo.domain.sealed import DOES_NOT_OPEN, SEALED, SealedPayload
from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError
from denpyo.extras import missing
from denpyo.store.base import NewSubmission

KEYS_VARIABLE = "DENPYO_PAYLOAD_KEYS"
"""The environment variable a ledger reads its keys from when it is given none:
comma-separated, newest (the one that encrypts) first."""

KEY_BYTES = 32
NONCE_BYTES = 12
VERSION = "v1"
_TOKEN = re.compile(r"[A-Za-z0-9]+\.([A-Za-z0-9_-]+)\.[A-Za-z0-9_-]+")
"""A token: `<scheme>.<kid>.<data>`: letters and digits, a key id, URL-safe base64."""
_KID = re.compile(r"[A-Za-z0-9_-]+")
_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")


@runtime_checkable
class PayloadCodec(Protocol):
    """What `Ledger(payload_key=codec)` takes to seal payloads its own way (a KMS or an
    HSM that encrypts): the built-in one is AES-256-GCM over the configured keys.

    A token is printable ASCII, `<scheme>.<kid>.<data>` (letters and digits, then the
    key's id, then URL-safe base64): the store keeps it as `{"denpyo:sealed": token}`
    and reads the kid from it to tell which key a row needs."""

    kid: str
    """The id of the key `seal` uses now; a row sealed with another is re-encrypted by
    `rotate_payload_key`."""

    def seal(self, data: bytes, associated: bytes) -> str:
        """`data` (the payload's JSON, UTF-8) encrypted, bound to `associated` (the
        row's channel and key): a token."""
        ...

    def open(self, token: str, associated: bytes) -> bytes:
        """The data a token seals. Raises `LookupError` when the key it names is not
        configured here, `ValueError` when it does not open with `associated` (a
        token of another row, or altered)."""
        ...


def new_payload_key() -> str:
    """A new key for `DENPYO_PAYLOAD_KEYS` or `Ledger(payload_key=...)`: 32 random bytes
    (from the operating system's generator) as URL-safe base64 text, 44 characters.
    `denpyo rotate-key --new-key` prints one."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def key_id(key: bytes) -> str:
    """The id a key is known by in a token: the first 8 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:8]


def token_kid(token: str) -> str:
    """The id of the key a token names ("?" for text that is no token)."""
    found = _TOKEN.fullmatch(token)
    return found.group(1) if found else "?"


def associated_data(channel: str, key: str) -> bytes:
    """What binds a ciphertext to its row: its channel and key (neither holds a NUL)."""
    return f"{channel}\x00{key}".encode()


class AesGcmKeys:
    """The built-in codec: AES-256-GCM with the first key, opening with any of them."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise missing("encryption", "encrypting payloads", exc) from exc
        if not keys:
            raise ConfigurationError("no payload key given: give at least one")
        self._invalid_tag = InvalidTag
        self._by_kid: dict[str, Any] = {}
        for key in keys:
            self._by_kid.setdefault(key_id(key), AESGCM(key))
        self.kid = key_id(keys[0])
        self.kids = tuple(self._by_kid)
        self._current = self._by_kid[self.kid]

    def seal(self, data: bytes, associated: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = nonce + self._current.encrypt(nonce, data, associated)
        return f"{VERSION}.{self.kid}.{base64.urlsafe_b64encode(sealed).rstrip(b'=').decode()}"

    def open(self, token: str, associated: bytes) -> bytes:
        version, _, rest = token.partition(".")
        kid, _, body = rest.partition(".")
        aead = self._by_kid.get(kid)
        if aead is None:
            raise LookupError(kid)
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise ValueError("not base64") from None
        if version != VERSION or len(raw) <= NONCE_BYTES:
            raise ValueError("not a v1 token")
        try:
            data: bytes = aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated)
        except self._invalid_tag:
            raise ValueError("does not authenticate") from None
        return data


class Sealing:
    """How a store keeps payloads: in clear (no codec), or sealed by `codec`."""

    __slots__ = ("codec",)

    def __init__(self, codec: PayloadCodec | None = None) -> None:
        self.codec = codec

    def kids(self) -> tuple[str, ...]:
        """The ids of the keys that open payloads here (none: payloads in clear)."""
        if self.codec is None:
            return ()
        return tuple(getattr(self.codec, "kids", None) or (self.codec.kid,))

    def stored(self, new: NewSubmission) -> str:
        """The payload column's value for a new row: its JSON text, sealed where the
        ledger has keys."""
        if self.codec is None:
            return new.payload_json
        token = self.codec.seal(new.payload_json.encode(), associated_data(new.channel, new.key))
        return _envelope(token)

    def open(self, envelope: dict[str, Any], channel: str, key: str) -> Any:
        """A payload stored as `{"denpyo:sealed": token}`, opened: the payload, or a
        `SealedPayload` when no key configured here opens it. An object that only looks
        like one (other fields, no token) is returned as it is."""
        token = sealed_token(envelope)
        if token is None:
            return envelope
        data = self._data(token, associated_data(channel, key))
        return data if isinstance(data, SealedPayload) else json.loads(data)

    def open_value(self, value: Any, channel: str, key: str) -> Any:
        """A payload as stored (parsed JSON), opened if it is sealed: what a reader of
        the stored form outside the table (the archive) gets back."""
        if type(value) is dict and SEALED in value:
            return self.open(value, channel, key)
        return value

    def sealed(self, value: Any, channel: str, key: str) -> Any:
        """A payload kept outside the row (a resend's corrected payload, in the action
        log's parameters) as a JSON value: sealed for the row of `channel` and `key`
        where the ledger has keys (`{"denpyo:sealed": token}`), else as it is.
        `open_value` reads it back."""
        if self.codec is None:
            return value
        return {SEALED: self.codec.seal(wire_body(value), associated_data(channel, key))}

    def at_rest(self, sub: Submission) -> Submission:
        """The row with its payload as the table keeps it (sealed with the current key
        where the ledger has keys; a payload that could not be opened, as it was
        stored): what the archive writes."""
        payload = sub.payload
        if isinstance(payload, SealedPayload):
            return replace(sub, payload=payload.stored)
        if self.codec is None:
            return sub
        return replace(sub, payload=self.sealed(payload, sub.channel, sub.key))

    def rotated(self, value: Any, channel: str, key: str) -> str | SealedPayload | None:
        """What `rotate_payload_key` writes in place of a payload as stored (parsed
        JSON): its JSON text sealed with the current key; None when it is sealed with
        that key already (and opens); a `SealedPayload` when it cannot be opened here
        (it is left as it is)."""
        codec = self.codec
        if codec is None:
            raise ConfigurationError(no_key_configured("re-encrypting payloads"))
        associated = associated_data(channel, key)
        token = sealed_token(value)
        if token is None:  # in clear
            return _envelope(codec.seal(wire_body(value), associated))
        data = self._data(token, associated)
        if isinstance(data, SealedPayload):
            return data
        if token_kid(token) == codec.kid:
            return None
        return _envelope(codec.seal(data, associated))

    def _data(self, token: str, associated: bytes) -> bytes | SealedPayload:
        """What a token seals, or the `SealedPayload` that stands for it here."""
        if self.codec is None:
            return SealedPayload(token_kid(token), token)
        try:
            return self.codec.open(token, associated)
        except LookupError:
            return SealedPayload(token_kid(token), token)
        except ValueError:
            return SealedPayload(token_kid(token), token, DOES_NOT_OPEN)


CLEAR = Sealing()
"""No keys: payloads in clear, as written before encryption was turned on."""


def sealed_token(value: Any) -> str | None:
    """The token of a payload stored sealed (`{"denpyo:sealed": token}`, that field
    alone), else None."""
    if type(value) is dict and len(value) == 1:
        token = value.get(SEALED)
        if isinstance(token, str):
            return token
    return None


def _envelope(token: str) -> str:
    """The payload column's JSON for a token (a token of printable ASCII needs no
    escaping: written as is, twice as fast as `json.dumps`)."""
    if _PLAIN.fullmatch(token):
        return f'{{"{SEALED}":"{token}"}}'
    return json.dumps({SEALED: token}, separators=(",", ":"))


def no_key_configured(what: str) -> str:
    return (
        f"{what} needs a payload key and none is configured: set {KEYS_VARIABLE} "
        "(`denpyo rotate-key --new-key` makes a key) or give Ledger(payload_key=...)"
    )


# -- the keys a ledger is given -------------------------------------------------------------

PayloadKey = bytes | str
"""One key: 32 bytes, or their URL-safe base64 text (as `new_payload_key` makes)."""

PayloadKeys = (
    PayloadKey
    | Sequence[PayloadKey]
    | Callable[[], PayloadKey | Sequence[PayloadKey]]
    | PayloadCodec
)
"""What `Ledger(payload_key=...)` takes (see `payload_codec`)."""


def payload_codec(given: PayloadKeys | None) -> PayloadCodec | None:
    """The codec a ledger seals with: `given` (a key, keys newest first, a function
    returning them, called once here, or a codec of one's own), else the keys of
    `DENPYO_PAYLOAD_KEYS`, else None (payloads in clear). A key that is not one is a
    `ConfigurationError` that says which and why, never showing it."""
    if given is None:
        text = os.environ.get(KEYS_VARIABLE)
        if text is None:
            return None
        parts = [part.strip() for part in text.split(",")]
        if not any(parts):
            raise ConfigurationError(
                f"{KEYS_VARIABLE} is set but empty: give a key (or unset it to keep "
                "payloads in clear)"
            )
        return AesGcmKeys(_decoded(parts, KEYS_VARIABLE))
    if isinstance(given, PayloadCodec):
        if not isinstance(given.kid, str) or not _KID.fullmatch(given.kid):
            raise ConfigurationError(
                f"payload_key: the codec's kid must be letters, digits, '-' or '_', "
                f"not {given.kid!r}"
            )
        return given
    where = "payload_key"
    keys: object = given
    if callable(keys):
        try:
            keys = keys()
        except Exception as exc:  # a key service's error, whatever its kind
            raise ConfigurationError(
                f"payload_key: the function that gives the keys raised {type(exc).__name__}: {exc}"
            ) from exc
        where = "the keys payload_key() returned"
    if isinstance(keys, bytes | str):
        keys = [keys]
    if not isinstance(keys, Iterable):
        raise ConfigurationError(
            f"{where} must be a key (bytes or base64 text), a list of keys, a function "
            f"returning them, or a codec, not {type(keys).__name__}"
        )
    listed = list(keys)
    if not listed:
        raise ConfigurationError(f"{where}: no key given; give at least one")
    return AesGcmKeys(_decoded(listed, where))


def _decoded(keys: Sequence[object], where: str) -> list[bytes]:
    """Each key as its 32 bytes; the first that is not one raises, naming its place."""
    if len(keys) == 1:
        return [_key_bytes(keys[0], where)]
    return [_key_bytes(key, f"{where}: key {n} of {len(keys)}") for n, key in enumerate(keys, 1)]


def _key_bytes(key: object, where: str) -> bytes:
    """A key given as bytes or text, as its 32 bytes; never shown in an error."""
    if isinstance(key, bytes):
        if len(key) != KEY_BYTES:
            hint = " (base64 text? give it as str)" if len(key) == 44 else ""
            raise ConfigurationError(f"{where} is {len(key)} bytes, not {KEY_BYTES}{hint}")
        return key
    if not isinstance(key, str):
        raise ConfigurationError(f"{where} is a {type(key).__name__}, not bytes or base64 text")
    text = key.strip()
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(
            f"{where} is not a key: not URL-safe base64 (`denpyo rotate-key --new-key` makes one)"
        ) from None
    if len(raw) != KEY_BYTES:
        raise ConfigurationError(
            f"{where} is not a key: it decodes to {len(raw)} bytes, not {KEY_BYTES} "
            "(`denpyo rotate-key --new-key` makes one)"
        )
    return raw
