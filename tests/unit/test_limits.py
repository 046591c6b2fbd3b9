from typing import Any

import pytest

from denpyo import (
    InvalidDatabaseURL,
    InvalidInput,
    InvalidKey,
    KeyReused,
    PayloadNotJSON,
    PayloadTooLarge,
)
from denpyo.domain.limits import (
    MAX_KEY_LENGTH,
    canonical_json,
    check_channel_name,
    check_id,
    check_key,
    check_same_payload,
    encode_payload,
)
from denpyo.store import dialect_of, open_store
from denpyo.store.__init__ import sqlite_path


def test_payload_must_be_json() -> None:
    assert encode_payload({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    for bad in ({"a": object()}, {1, 2}, float("nan"), b"bytes"):
        with pytest.raises(PayloadNotJSON):
            encode_payload(bad)


def test_payload_limit_counts_encoded_bytes() -> None:
    encode_payload("x" * 98, max_bytes=100)
    with pytest.raises(PayloadTooLarge, match="limit is 100"):
        encode_payload("x" * 99, max_bytes=100)


def test_keys() -> None:
    assert check_key("order:42") == "order:42"
    check_key("k" * MAX_KEY_LENGTH)
    for bad in ("", "k" * (MAX_KEY_LENGTH + 1), 42, None, "a\x00b"):
        with pytest.raises(InvalidKey):
            check_key(bad)


def test_channel_names() -> None:
    check_channel_name("invoice-email")
    check_channel_name("a:b.c_d-9")
    for bad in ("", "has space", "-leading", "x" * 101, 3, "mail2\n", "mail\r\n", "\nmail"):
        with pytest.raises(InvalidInput, match="channel name"):  # a ValueError too
            check_channel_name(bad)


@pytest.mark.parametrize(
    ("recorded", "sent"),
    [
        ({"a": 1}, {"a": True}),
        ({"a": 1}, {"a": 1.0}),
        ({"a": True}, {"a": 1.0}),
        ({"a": 0}, {"a": False}),
        ({"a": [1, 0]}, {"a": [True, False]}),
        ({"a": {"b": 2.0}}, {"a": {"b": 2}}),
    ],
)
def test_a_payload_of_other_json_is_another_call_though_python_calls_it_equal(
    recorded: Any, sent: Any
) -> None:
    assert recorded == sent  # what the comparison went by
    for first, second in ((recorded, sent), (sent, recorded)):
        with pytest.raises(KeyReused):
            check_same_payload("c", "k", first, encode_payload(second))


def test_the_same_json_however_a_database_gave_it_back_is_the_same_call() -> None:
    """As PostgreSQL's jsonb returns a payload: keys in its own order, a float that
    Python writes with an exponent as the integer its spelling means, no -0.0."""
    sent = {"b": [0.1, 1e-7, 1e16, 1e300], "a": -0.0, "c": {"y": 1, "x": 1.5}}
    from_jsonb = {"a": 0.0, "b": [0.1, 1e-7, 10**16, 10**300], "c": {"x": 1.5, "y": 1}}
    check_same_payload("c", "k", from_jsonb, encode_payload(sent))
    check_same_payload("c", "k", sent, encode_payload(sent))
    assert canonical_json(sent) == canonical_json(from_jsonb)
    assert canonical_json({"b": 1, "a": [1.0, True]}) == '{"a":[1.0,true],"b":1}'


def test_ids() -> None:
    assert check_id(1) and check_id(2**63 - 1)
    for none in (0, -1, 2**63, -(2**63) - 1, 10**30):
        assert not check_id(none)
    for bad in ("1", 1.0, True, None):
        with pytest.raises(InvalidInput, match="whole number"):
            check_id(bad)


@pytest.mark.parametrize(
    ("url", "dialect"),
    [
        ("sqlite:///app.db", "sqlite"),
        ("postgresql://u@h/db", "postgresql"),
        ("postgres://u@h/db", "postgresql"),
        ("postgresql+psycopg://u@h/db", "postgresql"),
        ("mysql://root@h/db", "mysql"),
        ("mariadb://root@h/db", "mysql"),
    ],
)
def test_dialects(url: str, dialect: str) -> None:
    assert dialect_of(url) == dialect


@pytest.mark.parametrize(
    "url",
    [
        "app.db",
        "",
        "oracle://h/db",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:app.db",
        "postgresql://h:notaport/db",
        "postgresql://h:5432",
    ],
)
def test_malformed_urls(url: str) -> None:
    with pytest.raises(InvalidDatabaseURL):
        open_store(url)


def test_sqlite_paths() -> None:
    assert sqlite_path("sqlite:///app.db") == "app.db"
    assert sqlite_path("sqlite:////var/lib/app.db") == "/var/lib/app.db"
