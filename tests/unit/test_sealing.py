"""Sealing payloads: the keys a ledger is given (and the ones refused, never shown),
the stored form, the binding to the row, rotation's decisions, and the placeholder of
a payload that cannot be opened."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from typing import Any

import pytest

import denpyo
from denpyo.domain.limits import check_same_call, encode_payload
from denpyo.domain.sealed import (
    DOES_NOT_OPEN,
    NOT_AVAILABLE,
    SEALED,
    SealedPayload,
    unreadable_retry_in,
)
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError, InvalidInput, PayloadNotJSON
from denpyo.store import NewSubmission
from denpyo.store.sealing import CLEAR, AesGcmKeys, PayloadCodec, Sealing, payload_codec

RAW_A, RAW_B = os.urandom(32), os.urandom(32)
KEY_A = base64.urlsafe_b64encode(RAW_A).decode()
TOKEN = re.compile(r"v1\.([0-9a-f]{8})\.([A-Za-z0-9_-]+)")


def new(payload: Any, channel: str = "email", key: str = "order:1") -> NewSubmission:
    return NewSubmission(channel, key, "idem", encode_payload(payload))


def sealing(*keys: bytes) -> Sealing:
    return Sealing(AesGcmKeys(list(keys)))


@pytest.fixture(autouse=True)
def no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DENPYO_PAYLOAD_KEYS", raising=False)


def test_the_stored_form_is_one_field_holding_version_key_id_and_unpadded_base64() -> None:
    text = sealing(RAW_A).stored(new({"to": "ada@example.com"}))
    value = json.loads(text)
    assert list(value) == [SEALED]
    found = TOKEN.fullmatch(value[SEALED])
    assert found is not None
    assert found.group(1) == hashlib.sha256(RAW_A).hexdigest()[:8]
    raw = base64.urlsafe_b64decode(found.group(2) + "=" * (-len(found.group(2)) % 4))
    assert len(raw) == 12 + len(b'{"to":"ada@example.com"}') + 16  # nonce, ciphertext, tag
    assert "ada" not in text
    again = sealing(RAW_A).stored(new({"to": "ada@example.com"}))
    assert again != text  # a nonce of its own each time


def test_a_payload_opens_for_its_own_row_only() -> None:
    keys = sealing(RAW_A)
    value = json.loads(keys.stored(new({"n": 1}, key="order:1")))
    assert keys.open(value, "email", "order:1") == {"n": 1}
    for channel, key in (("email", "order:2"), ("sms", "order:1"), ("emai", "lorder:1")):
        other = keys.open(value, channel, key)
        assert isinstance(other, SealedPayload) and other.reason == DOES_NOT_OPEN
    altered = {SEALED: value[SEALED][:-2] + ("AA" if value[SEALED][-2:] != "AA" else "BB")}
    assert isinstance(keys.open(altered, "email", "order:1"), SealedPayload)


def test_every_key_opens_and_the_first_seals() -> None:
    old = json.loads(sealing(RAW_A).stored(new([1, 2])))
    both = sealing(RAW_B, RAW_A)
    assert both.open(old, "email", "order:1") == [1, 2]
    assert (
        TOKEN.fullmatch(json.loads(both.stored(new(3)))[SEALED]).group(1)
        == (  # type: ignore[union-attr]
            hashlib.sha256(RAW_B).hexdigest()[:8]
        )
    )


def test_a_payload_whose_key_is_not_configured_is_a_placeholder_with_its_text() -> None:
    value = json.loads(sealing(RAW_A).stored(new({"n": 1})))
    kid = hashlib.sha256(RAW_A).hexdigest()[:8]
    for reader in (CLEAR, sealing(RAW_B)):
        shown = reader.open(value, "email", "order:1")
        assert isinstance(shown, SealedPayload)
        assert (shown.kid, shown.reason, shown.stored) == (kid, NOT_AVAILABLE, value)
        assert str(shown) == f"[encrypted with key {kid}: not available]"
        assert json.dumps({"payload": shown}) == json.dumps({"payload": str(shown)})
        assert shown.to_json() == str(shown) and kid in repr(shown)


def test_what_only_looks_sealed_is_left_as_it_is() -> None:
    for value in ({SEALED: 1}, {SEALED: "v1.x.y", "other": 2}):
        assert sealing(RAW_A).open(value, "email", "k") is value


def test_a_payload_may_not_use_the_reserved_field_nor_be_a_placeholder() -> None:
    with pytest.raises(PayloadNotJSON, match="reserved"):
        encode_payload({SEALED: "v1.abc.def"})
    assert encode_payload({"inner": {SEALED: 1}}) == '{"inner":{"denpyo:sealed":1}}'
    with pytest.raises(InvalidInput, match="cannot send this payload again"):
        encode_payload(SealedPayload("abcd1234", "v1.abcd1234.xx"))


def test_an_existing_row_that_cannot_be_opened_is_no_same_call() -> None:
    sub = Submission(1, "email", "k", "idem", SealedPayload("abcd1234", "t"), Status.SYNCED)
    with pytest.raises(ConfigurationError, match="key abcd1234"):
        check_same_call(sub, '{"n":1}')


@pytest.mark.parametrize(
    "given",
    [RAW_A, KEY_A, KEY_A.rstrip("="), f" {KEY_A} ", [KEY_A], (RAW_A,), lambda: [KEY_A]],
    ids=["bytes", "text", "unpadded", "spaces", "list", "tuple", "function"],
)
def test_a_key_comes_as_bytes_or_text_alone_in_a_list_or_from_a_function(given: Any) -> None:
    codec = payload_codec(given)
    assert codec is not None and codec.kid == hashlib.sha256(RAW_A).hexdigest()[:8]


def test_the_function_of_a_key_service_is_called_once() -> None:
    calls: list[int] = []

    def keys() -> list[bytes]:
        calls.append(1)
        return [RAW_B, RAW_A]

    codec = payload_codec(keys)
    assert codec is not None and calls == [1]
    assert codec.kid == hashlib.sha256(RAW_B).hexdigest()[:8]


def test_without_a_key_the_environment_says_and_else_payloads_stay_in_clear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert payload_codec(None) is None
    monkeypatch.setenv(
        "DENPYO_PAYLOAD_KEYS", f"{base64.urlsafe_b64encode(RAW_B).decode()}, {KEY_A}"
    )
    codec = payload_codec(None)
    assert isinstance(codec, AesGcmKeys)
    assert codec.kids == tuple(hashlib.sha256(raw).hexdigest()[:8] for raw in (RAW_B, RAW_A))


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("nonsense", "payload_key is not a key: it decodes to 6 bytes"),
        ("not base64 at all!", "payload_key is not a key: not URL-safe base64"),
        (base64.urlsafe_b64encode(b"x" * 16).decode(), "decodes to 16 bytes, not 32"),
        (b"short", "payload_key is 5 bytes, not 32"),
        (KEY_A.encode(), "44 bytes, not 32 (base64 text? give it as str)"),
        ([KEY_A, "nonsense"], "payload_key: key 2 of 2 is not a key"),
        ([], "no key given"),
        (42, "not int"),
        ([KEY_A, 42], "key 2 of 2 is a int"),
    ],
    ids=[
        "short",
        "not-base64",
        "16-bytes",
        "short-bytes",
        "text-as-bytes",
        "second",
        "none",
        "int",
        "second-int",
    ],
)
def test_a_malformed_key_says_which_and_why_and_never_shows_it(given: Any, said: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        payload_codec(given)
    assert said in str(refused.value)
    for text in ("nonsense", KEY_A, "not base64 at all"):
        assert text not in str(refused.value).replace("payload_key", "")


def test_a_malformed_key_in_the_environment_is_refused_likewise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DENPYO_PAYLOAD_KEYS", f"{KEY_A},secretish-but-wrong")
    with pytest.raises(
        ConfigurationError, match="DENPYO_PAYLOAD_KEYS: key 2 of 2 is not a key"
    ) as e:
        payload_codec(None)
    assert "secretish" not in str(e.value)
    monkeypatch.setenv("DENPYO_PAYLOAD_KEYS", " , ")
    with pytest.raises(ConfigurationError, match="set but empty"):
        payload_codec(None)


def test_a_key_service_that_fails_is_a_configuration_error() -> None:
    def keys() -> list[str]:
        raise TimeoutError("kms did not answer")

    with pytest.raises(ConfigurationError, match="raised TimeoutError: kms did not answer"):
        payload_codec(keys)


class Rot13Codec:
    """A codec of one's own, as a key service's would be (not a secure one)."""

    kid = "rot1"

    def seal(self, data: bytes, associated: bytes) -> str:
        body = base64.urlsafe_b64encode(associated + b"|" + data).decode().rstrip("=")
        return f"rot.{self.kid}.{body}"

    def open(self, token: str, associated: bytes) -> bytes:
        _, kid, body = token.split(".")
        if kid != self.kid:
            raise LookupError(kid)
        bound, _, data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).partition(b"|")
        if bound != associated:
            raise ValueError("another row's")
        return data


def test_a_codec_of_ones_own_seals_and_opens_and_its_kid_shows() -> None:
    codec = Rot13Codec()
    assert isinstance(codec, PayloadCodec) and payload_codec(codec) is codec
    mine = Sealing(codec)
    value = json.loads(mine.stored(new({"n": 1})))
    assert value[SEALED].startswith("rot.rot1.")
    assert mine.open(value, "email", "order:1") == {"n": 1}
    assert isinstance(mine.open(value, "email", "order:2"), SealedPayload)
    assert CLEAR.open(value, "email", "order:1").kid == "rot1"


def test_rotation_seals_clear_ones_reseals_old_ones_and_leaves_current_ones() -> None:
    both = sealing(RAW_B, RAW_A)
    old = json.loads(sealing(RAW_A).stored(new({"n": 1})))
    current = json.loads(both.stored(new({"n": 1})))
    resealed = both.rotated(old, "email", "order:1")
    assert isinstance(resealed, str) and both.open(json.loads(resealed), "email", "order:1") == {
        "n": 1
    }
    assert both.rotated(current, "email", "order:1") is None
    clear = both.rotated({"n": 1}, "email", "order:1")
    assert isinstance(clear, str) and both.open(json.loads(clear), "email", "order:1") == {"n": 1}
    lost = sealing(RAW_B).rotated(old, "email", "order:1")
    assert isinstance(lost, SealedPayload) and lost.reason == NOT_AVAILABLE
    moved = both.rotated(current, "email", "order:2")
    assert isinstance(moved, SealedPayload) and moved.reason == DOES_NOT_OPEN
    with pytest.raises(ConfigurationError, match="none is configured"):
        CLEAR.rotated(old, "email", "order:1")


def test_a_new_key_is_32_random_bytes_as_url_safe_text() -> None:
    key = denpyo.new_payload_key()
    assert len(key) == 44 and len(base64.urlsafe_b64decode(key)) == 32
    assert key != denpyo.new_payload_key()


def test_a_row_waiting_for_its_key_is_looked_at_less_and_less_down_to_once_a_day() -> None:
    waits = [unreadable_retry_in(look) for look in range(1, 12)]
    assert waits[:4] == [600, 1200, 2400, 4800]
    assert waits[-1] == 86_400 and max(waits) == 86_400
    assert unreadable_retry_in(10_000) == 86_400  # years later: still a day
    looks_in_a_year = 0
    elapsed, look = 0.0, 1
    while elapsed < 365 * 86_400:
        elapsed += unreadable_retry_in(look)
        look += 1
        looks_in_a_year += 1
    assert looks_in_a_year < 375  # two history lines a look: under 750 a year
