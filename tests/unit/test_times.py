"""Times read from SQLite's text: denpyo's own (UTC, no offset) and another writer's."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from denpyo.store.sqlite import SqliteStore


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ("2026-12-01 08:00:00.123", datetime(2026, 12, 1, 8, 0, 0, 123000, tzinfo=UTC)),
        ("2026-12-01 08:00:00", datetime(2026, 12, 1, 8, tzinfo=UTC)),
        ("2026-12-01T08:00:00Z", datetime(2026, 12, 1, 8, tzinfo=UTC)),
        ("2026-12-01 10:00:00+02:00", datetime(2026, 12, 1, 8, tzinfo=UTC)),
        (None, None),
    ],
)
def test_a_stored_time_reads_as_the_utc_instant_it_names(
    stored: str | None, expected: datetime | None
) -> None:
    parsed = SqliteStore("unused.db").parse_time(stored)
    assert parsed == expected
    assert parsed is None or parsed.utcoffset() == timedelta(0)


def test_an_aware_datetime_is_kept() -> None:
    moment = datetime(2026, 12, 1, 9, tzinfo=timezone(timedelta(hours=1)))
    assert SqliteStore("unused.db").parse_time(moment) is moment
