"""The redaction rule (domain/redaction.py): which fields it hides, at any depth and
whatever their spelling; what it leaves alone; the texts it scrubs; where its names
come from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from denpyo import Alert, Event, Status, Submission
from denpyo.domain.redaction import DEFAULT_REDACT, REDACTED, Redaction, normalize, parse_names
from denpyo.errors import ConfigurationError, InvalidInput

CARD = "4242424242424242"
RULE = Redaction.default()


@pytest.mark.parametrize(
    "name",
    ["card_number", "cardNumber", "card-number", "CARD NUMBER", "card.number", "Card_Number"],
)
def test_a_name_matches_whatever_its_case_and_separators(name: str) -> None:
    assert normalize(name) == "cardnumber"
    assert RULE.hides(name)
    assert RULE.payload({name: CARD, "amount": 100}) == {name: REDACTED, "amount": 100}


def test_the_defaults_hide_credentials_and_payment_details_and_nothing_else() -> None:
    for name in (
        "password",
        "secret",
        "token",
        "api_key",
        "authorization",
        "Authorization",
        "cvv",
        "iban",
        "access_token",
        "client_secret",
    ):
        assert RULE.hides(name), name
    for name in ("amount", "to", "email", "name", "card", "number", "tokens_used"):
        assert not RULE.hides(name), name
    assert set(DEFAULT_REDACT) >= {"password", "secret", "token", "card_number", "authorization"}


def test_fields_are_hidden_at_any_depth_in_dicts_and_lists() -> None:
    payload: dict[str, Any] = {
        "order": {"lines": [{"sku": "A1", "card_number": CARD}, {"sku": "B2"}]},
        "headers": [{"Authorization": "Bearer s3cr3t-value"}],
        "secret": {"nested": ["whole", "subtree"]},
    }
    assert RULE.payload(payload) == {
        "order": {"lines": [{"sku": "A1", "card_number": REDACTED}, {"sku": "B2"}]},
        "headers": [{"Authorization": REDACTED}],
        "secret": REDACTED,
    }
    assert payload["order"]["lines"][0]["card_number"] == CARD  # never changed in place


@pytest.mark.parametrize("payload", [None, "text", 42, 4.5, True, [1, "two"], ["password"]])
def test_what_is_no_dict_is_left_as_it_is(payload: Any) -> None:
    assert RULE.payload(payload) == payload


def test_a_placeholder_payload_is_left_as_it_is() -> None:
    """A payload that cannot be read (an object with only a text) passes untouched."""

    class Unreadable:
        def __str__(self) -> str:
            return "(encrypted: key not available)"

    placeholder = Unreadable()
    assert RULE.payload(placeholder) is placeholder
    assert RULE.hidden_values(placeholder) == []
    assert RULE.scrub_text("an error", placeholder) == "an error"


def test_a_text_loses_the_hidden_values_it_quotes() -> None:
    payload = {
        "to": "ann@example.com",
        "card": {"cardNumber": CARD, "cvv": 123},
        "pin_hint": "no",
        "password": "ab",  # too short to look for: it would blot out words
    }
    error = (
        f'HTTP 402: card {CARD} declined (cvv 123); body {{"cardNumber": "{CARD}"}}; '
        "to ann@example.com; ab"
    )
    assert RULE.scrub_text(error, payload) == (
        f"HTTP 402: card {REDACTED} declined (cvv {REDACTED}); "
        f'body {{"cardNumber": "{REDACTED}"}}; to ann@example.com; ab'
    )
    assert RULE.scrub_text(None, payload) is None
    assert RULE.scrub_text("nothing quoted", None) == "nothing quoted"


def test_a_value_is_scrubbed_as_json_escapes_it_too() -> None:
    payload = {"secret": 'pa"ss/wörd'}
    assert RULE.scrub_text('sent {"secret": "pa\\"ss/w\\u00f6rd"}', payload) == (
        f'sent {{"secret": "{REDACTED}"}}'
    )


def test_overlapping_values_are_replaced_once_longest_first() -> None:
    payload = {"token": "abcdef", "secret": "abc", "password": "red"}
    assert RULE.scrub_text("t=abcdef s=abc p=red", payload) == (
        f"t={REDACTED} s={REDACTED} p={REDACTED}"
    )


def test_authorization_headers_are_hidden_and_scrubbed() -> None:
    payload = {"headers": {"authorization": "Bearer eyJhbGciOi.xyz"}}
    assert RULE.payload(payload) == {"headers": {"authorization": REDACTED}}
    assert RULE.scrub_text("401 for Bearer eyJhbGciOi.xyz", payload) == f"401 for {REDACTED}"


def test_a_row_an_event_and_an_alert_as_people_see_them() -> None:
    row = Submission(
        id=7,
        channel="pay",
        key="order:7",
        idempotency_key="i",
        payload={"card_number": CARD},
        status=Status.REJECTED,
        last_error=f"card {CARD} declined",
        resolution=f"re {CARD}",
    )
    shown = RULE.submission(row)
    assert shown.payload == {"card_number": REDACTED}
    assert shown.last_error == f"card {REDACTED} declined"
    assert shown.resolution == f"re {REDACTED}"
    assert (shown.id, shown.key, shown.status) == (row.id, row.key, row.status)
    event = Event(1, 7, datetime.now(UTC), "attempt", None, None, 1, "w", detail=f"got {CARD}")
    assert RULE.event(event, row.payload).detail == f"got {REDACTED}"
    alert = RULE.alert(Alert("rejected", f"rejected: card {CARD} declined", row))
    assert alert.message == f"rejected: card {REDACTED} declined"
    assert alert.submission is not None and alert.submission.payload == {"card_number": REDACTED}
    assert CARD not in str(alert)
    plain = Submission(
        id=8, channel="pay", key="k", idempotency_key="i", payload={"a": 1}, status=Status.SYNCED
    )
    assert RULE.submission(plain) is plain  # nothing to hide: the row itself


def test_a_resend_edited_from_the_redacted_view_keeps_the_hidden_values() -> None:
    original = {"card_number": CARD, "amount": 100, "lines": [{"cvv": "999", "n": 1}]}
    edited = {"card_number": REDACTED, "amount": 101, "lines": [{"cvv": REDACTED, "n": 2}]}
    assert RULE.restore(edited, original) == {
        "card_number": CARD,
        "amount": 101,
        "lines": [{"cvv": "999", "n": 2}],
    }
    assert RULE.restore({"note": REDACTED}, original) == {"note": REDACTED}  # not a hidden field


def test_names_extend_the_defaults_and_only_replaces_them() -> None:
    more = Redaction.of(["Address", "phone-number"])
    assert more.hides("address") and more.hides("phoneNumber") and more.hides("password")
    only = Redaction.only("card_number")
    assert only.hides("cardNumber") and not only.hides("password")
    assert Redaction.of(only) is only
    assert Redaction.only().payload({"password": "x"}) == {"password": "x"}


def test_the_environment_adds_names_and_never_removes_any() -> None:
    assert parse_names(" address, ,phone ,") == ["address", "phone"]
    assert Redaction.of(env="address").hides("address")
    assert Redaction.of(env="address").hides("password")
    replaced = Redaction.of(Redaction.only("iban"), env="address")
    assert replaced.hides("address") and replaced.hides("iban") and not replaced.hides("token")


def test_a_name_that_hides_nothing_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no field name"):
        Redaction.of(["address", "--"])
    with pytest.raises(InvalidInput, match="not the string"):
        Redaction.of("password")
    with pytest.raises(InvalidInput, match="a string"):
        Redaction.of([42])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="DENPYO_REDACT"):
        Redaction.of(env="address, _.")


class Unreadable:
    """A payload that cannot be read, as its placeholder shows it."""

    def __str__(self) -> str:
        return "(encrypted: key not available)"


@pytest.mark.parametrize(
    "payload", [None, "text", ["a", {"token": "t0k3n"}], 42, Unreadable()], ids=type
)
def test_a_row_whose_payload_is_no_dict_is_shown_without_failing(payload: Any) -> None:
    from denpyo.cli.render import json_text
    from denpyo.engine.operator import submission_json
    from denpyo.web.present import pretty

    row = Submission(
        id=1,
        channel="c",
        key="k",
        idempotency_key="i",
        payload=payload,
        status=Status.FAILED,
        last_error="refused t0k3n",
    )
    shown = RULE.submission(row)
    hidden = isinstance(payload, list)  # only there is t0k3n a hidden field's value
    for full in (True, False):
        text = json_text(submission_json(shown, full=full))
        assert ("t0k3n" in text) is not hidden
        if not hidden and payload is not None:
            assert str(payload) in text
    assert ("t0k3n" in pretty(shown.payload)) is False
