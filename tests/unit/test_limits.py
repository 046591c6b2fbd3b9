import pytest

from denpyo import InvalidDatabaseURL, InvalidKey, PayloadNotJSON, PayloadTooLarge
from denpyo.domain.limits import MAX_KEY_LENGTH, check_channel_name, check_key, encode_payload
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
    for bad in ("", "has space", "-leading", "x" * 101, 3):
        with pytest.raises(ValueError):
            check_channel_name(bad)


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
