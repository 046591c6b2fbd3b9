"""What forgetting matches and what it scrubs (domain/forgetting.py), without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from denpyo.domain.forgetting import FORGOTTEN, Forgotten, Scrubber, Where, is_open, replaced
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput

NOW = datetime(2026, 3, 1, 14, 2, tzinfo=UTC)


def test_a_where_names_a_string_at_a_path() -> None:
    where = Where.parse("customer.email=ann@example.com=x")
    assert (where.path, where.value, where.field) == (
        ("customer", "email"),
        "ann@example.com=x",
        "customer.email",
    )
    assert where.json_path == '$."customer"."email"'
    assert where.matches({"customer": {"email": "ann@example.com=x"}})
    for payload in (
        {"customer": {"email": "ANN@example.com=x"}},
        {"customer": {"email": ["ann@example.com=x"]}},
        {"customer": "ann@example.com=x"},
        {"email": "ann@example.com=x"},
        None,
        ["ann@example.com=x"],
    ):
        assert not where.matches(payload), payload


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("to", "FIELD=VALUE"),
        ("=a", "is not a field"),
        ("a..b=c", "is not a field"),
        ('a"b=c', "is not a field"),
        ("a b=c", "is not a field"),
        (".".join("abcdefghi") + "=x", "is not a field"),
        ("to=", "give the value"),
        ("to=a\x00b", "NUL"),
    ],
)
def test_a_malformed_where_is_refused(text: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        Where.parse(text)


def test_a_scrubber_replaces_every_quoted_string_once() -> None:
    scrub = Scrubber(
        [{"to": "ann@example.com", "name": "Ann", "lines": [{"street": "Rue de l'Été 3"}]}],
        also=["ann@example.com"],
    )
    assert scrub.quoted == {"ann@example.com", "Ann", "Rue de l'Été 3"}
    text = "503 for ann@example.com (Ann) at Rue de l'Été 3"
    assert scrub(text) == f"503 for {FORGOTTEN} ({FORGOTTEN}) at {FORGOTTEN}"
    assert scrub('{"street": "Rue de l\'\\u00c9t\\u00e9 3"}') == f'{{"street": "{FORGOTTEN}"}}'
    assert scrub(scrub(text)) == scrub(text), "scrubbed text stays as it is"
    assert scrub("An apple") == "An apple", "shorter than 3 characters: not looked for"
    assert scrub.value({"payload": {"to": "ann@example.com", "n": 3}}) == {
        "payload": {"to": FORGOTTEN, "n": 3}
    }
    assert Scrubber([None]).text("nothing to do") == "nothing to do"


@pytest.mark.parametrize(
    "quoted",
    [
        "ann.b+1@example.com",  # as given
        "ANN.B+1@EXAMPLE.COM",  # upper case
        "Ann.B+1@Example.com",  # any case
        "ann.b%2B1%40example.com",  # URL-encoded
        "ann.b%2b1%40example.com",  # with lower-case hex
        "ann.b+1@example.com".replace("@", "%40"),  # a path keeps the +
        "https://x.example/?to=ann.b%2B1%40example.com&n=2",  # inside a URL
        '{"to": "ann.b+1@example.com"}',  # JSON
    ],
)
def test_a_scrubber_finds_a_value_in_every_spelling(quoted: str) -> None:
    scrub = Scrubber([{"to": "ann.b+1@example.com"}], marker="[x]")
    assert "ann" not in scrub(f"refused: {quoted}").lower()


def test_a_scrubber_finds_a_json_escaped_value_in_any_case() -> None:
    scrub = Scrubber([{"name": 'Zoë "Z" Ünal'}], marker="[x]")
    assert scrub('{"name": "ZO\\u00cb \\"Z\\" \\u00dcNAL"}') == '{"name": "[x]"}'
    assert scrub("Zoë%20%22Z%22%20%C3%9Cnal") == "[x]"


def test_forget_replaces_a_text_whole_whatever_it_says() -> None:
    assert replaced("503: E R I N [at] example") == FORGOTTEN
    assert replaced(None) is None


def row(**fields: object) -> Submission:
    base: dict[str, object] = {
        "id": 1,
        "channel": "mail",
        "key": "k",
        "idempotency_key": "i",
        "payload": None,
        "status": Status.SYNCED,
    }
    return Submission(**{**base, **fields})  # type: ignore[arg-type]


def test_an_open_row_is_one_that_may_still_be_sent() -> None:
    later = NOW + timedelta(seconds=30)
    assert not is_open(row(), NOW)
    assert not is_open(row(status=Status.FAILED, error_kind=ErrorKind.TRANSIENT), NOW)
    assert not is_open(row(status=Status.FAILED, locked_until=NOW - timedelta(seconds=1)), NOW)
    assert is_open(row(status=Status.REQUESTING), NOW)
    assert is_open(row(status=Status.FAILED, next_attempt_at=later), NOW)
    assert is_open(row(status=Status.FAILED, locked_until=later), NOW)


def test_who_forgot_it_in_one_line() -> None:
    assert Forgotten(NOW, "alice", "erasure #881").describe() == (
        "payload forgotten on 2026-03-01 14:02 UTC by alice: erasure #881"
    )
    assert Forgotten(NOW).describe() == "payload forgotten on 2026-03-01 14:02 UTC"


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("Europe refused eur 30", "Europe refused [x] 30"),
        ("currency=EUR&n=2", "currency=[x]&n=2"),
        ('{"note": "line\\neur"}', '{"note": "line\\n[x]"}'),  # after a JSON escape
        ('{"note": "\\u00e9eur"}', '{"note": "\\u00e9[x]"}'),
        ("to%20eur", "to%20[x]"),  # after a URL escape
        ("reeuro", "reeuro"),  # inside a word: not the value
    ],
)
def test_a_scrubber_finds_a_short_value_as_a_word_only(text: str, scrubbed: str) -> None:
    scrub = Scrubber([{"currency": "eur"}], marker="[x]")
    assert scrub(text) == scrubbed
