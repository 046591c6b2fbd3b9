"""A row's idempotency key in the providers' fields: SES tags (reversible) and FIFO
deduplication ids (the key, or its SHA-256)."""

from __future__ import annotations

import hashlib
import re
import uuid

import pytest

from denpyo.channels._keys import fifo_dedup_id, key_from_ses_tag, ses_tag_value

SES_ALLOWED = re.compile(r"[A-Za-z0-9_\-.@]{1,256}")
FIFO_ALLOWED = re.compile(r"[!-~]{1,128}")  # ASCII letters, digits and punctuation


def test_a_denpyo_key_travels_unchanged() -> None:
    key = str(uuid.uuid4())
    assert ses_tag_value(key) == key
    assert key_from_ses_tag(key) == key
    assert fifo_dedup_id(key) == key


@pytest.mark.parametrize(
    "key",
    ["order 42", "clé/été", "a+b=c", "b32.looks-encoded", "b32.", "x" * 150, "日本語", "@._-"],
)
def test_any_key_comes_back_from_its_ses_tag(key: str) -> None:
    value = ses_tag_value(key)
    assert SES_ALLOWED.fullmatch(value), value
    assert key_from_ses_tag(value) == key


def test_only_keys_ses_refuses_are_encoded() -> None:
    assert ses_tag_value("order-42_a.b@c") == "order-42_a.b@c"
    assert ses_tag_value("order 42").startswith("b32.")


def test_a_key_too_long_even_for_an_encoded_tag_is_refused() -> None:
    with pytest.raises(ValueError, match="too long"):
        ses_tag_value("é" * 200)


@pytest.mark.parametrize("key", ["order/42:#1", "!~{}", "x" * 128])
def test_a_fifo_id_is_the_key_when_sqs_accepts_it(key: str) -> None:
    assert fifo_dedup_id(key) == key


@pytest.mark.parametrize("key", ["order 42", "x" * 129, "clé", "tab\there", ""])
def test_any_other_key_becomes_its_sha256(key: str) -> None:
    value = fifo_dedup_id(key)
    assert value == hashlib.sha256(key.encode()).hexdigest()
    assert FIFO_ALLOWED.fullmatch(value)
