"""What people type into `list` and `retry`: statuses, times, limits, and the Filter's
own checks. Pure: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from denpyo.domain.filters import (
    MAX_LIMIT,
    Filter,
    parse_statuses,
    parse_when,
    resend_key,
)
from denpyo.domain.status import Status
from denpyo.engine.operator import check_note, operator_actor
from denpyo.errors import InvalidInput

NOW = datetime(2024, 5, 10, 12, 0, 0, tzinfo=UTC)


def test_statuses_by_name_comma_or_repeat_once_each() -> None:
    assert parse_statuses(["failed,rejected", "FAILED", " requesting "]) == (
        Status.FAILED,
        Status.REJECTED,
        Status.REQUESTING,
    )
    assert parse_statuses([]) == ()
    assert parse_statuses([","]) == ()
    with pytest.raises(InvalidInput, match=r"unknown status 'sent'.*requesting, synced"):
        parse_statuses(["synced,sent"])


@pytest.mark.parametrize(
    ("text", "back"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("15min", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("2 h ago", timedelta(hours=2)),
        ("1.5d", timedelta(hours=36)),
        ("1w", timedelta(days=7)),
    ],
)
def test_durations_count_back_from_now(text: str, back: timedelta) -> None:
    assert parse_when(text, NOW) == NOW - back


def test_dates_and_times() -> None:
    assert parse_when("2024-05-01T09:30Z", NOW) == datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    plus9 = timezone(timedelta(hours=9))
    assert parse_when("2024-05-01T09:30+09:00", NOW) == datetime(2024, 5, 1, 9, 30, tzinfo=plus9)
    local = parse_when("2024-05-01", NOW)  # a person's date is in their own time zone
    assert local == datetime(2024, 5, 1).astimezone().astimezone(UTC)
    assert local.tzinfo is UTC
    today = parse_when("today", NOW)
    assert today <= NOW and NOW - today < timedelta(days=1)
    assert parse_when("yesterday", NOW) == today - timedelta(days=1)


@pytest.mark.parametrize("text", ["", "  ", "last tuesday", "2024-13-01", "5 fortnights", "-2h"])
def test_times_that_cannot_be_read(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_when(text, NOW)


def test_a_duration_too_far_back() -> None:
    with pytest.raises(InvalidInput, match="too far back"):
        parse_when("99999999999w", NOW)


def test_filter_checks_everything_before_a_query() -> None:
    Filter(
        statuses=(Status.FAILED,),
        channel="invoice-email",
        since=NOW - timedelta(days=1),
        until=NOW,
        key_prefix="order:",
        limit=MAX_LIMIT,
    )
    bad: list[tuple[dict[str, object], str]] = [
        ({"channel": "bad name!"}, "channel name"),
        ({"channel": ""}, "channel name"),
        ({"since": datetime(2024, 5, 1)}, "time zone"),
        ({"until": "2024-05-01"}, "time zone"),
        ({"since": NOW, "until": NOW}, "must be before"),
        ({"key_prefix": ""}, "non-empty"),
        ({"key_prefix": "x" * 300}, "longer than a key"),
        ({"key_prefix": "order:\ud800"}, "not valid Unicode"),
        ({"key_prefix": "a\x00"}, "NUL"),
        ({"channel": "mail\n"}, "channel name"),
        ({"limit": 0}, "between 1"),
        ({"limit": MAX_LIMIT + 1}, "between 1"),
        ({"limit": True}, "whole number"),
        ({"limit": "5"}, "whole number"),
        ({"statuses": ("failed",)}, "Status values"),
    ]
    for fields, text in bad:
        with pytest.raises(InvalidInput, match=text):
            Filter(**fields)  # type: ignore[arg-type]


def test_an_empty_filter_is_recognised() -> None:
    assert Filter().is_empty and Filter(limit=5).is_empty
    assert not Filter(in_doubt=False).is_empty
    assert not Filter(statuses=(Status.FAILED,)).is_empty


def test_resend_keys_count_from_the_original_key() -> None:
    assert resend_key("order:42", 1) == "order:42~resend1"
    assert resend_key("order:42~resend1", 2) == "order:42~resend2"
    assert resend_key("order~resend:42", 1) == "order~resend:42~resend1"
    # `$` matched before a final newline: the suffix came off a key that does not end in it
    assert resend_key("order:42~resend1\n", 2) == "order:42~resend1\n~resend2"


def test_notes_and_actors() -> None:
    assert check_note("  checked the console ") == "checked the console"
    for note in (None, "", "   "):
        with pytest.raises(InvalidInput, match="note"):
            check_note(note)
    with pytest.raises(InvalidInput, match="limit"):
        check_note("x" * 2001)
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        check_note("checked \ud800")
    assert check_note("vérifié ✓") == "vérifié ✓"
    assert operator_actor("alice") == "operator:alice"
    assert operator_actor(" ").startswith("operator:") and operator_actor() != "operator:"


@pytest.mark.parametrize("text", ["0001-01-01", "0001-01-01T00:00+01:00", "9999-12-31T23:00-05:00"])
def test_a_time_at_the_edge_of_the_range_is_refused_not_a_traceback(text: str) -> None:
    with pytest.raises(InvalidInput, match="out of the range"):
        parse_when(text, NOW)
