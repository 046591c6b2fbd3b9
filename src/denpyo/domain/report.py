"""The report: how many calls per period, channel and status, for as long as the
ledger exists (pure: the store gives the daily counts)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

from denpyo.errors import InvalidInput

PERIODS = ("day", "month")


@dataclass(frozen=True, slots=True)
class ReportRow:
    """Rows created in `period` (``2026-03`` or ``2026-03-14``, UTC) on `channel` that
    stand, or stood when they were removed, in `status`."""

    period: str
    channel: str
    status: str
    count: int

    def to_json(self) -> dict[str, Any]:
        """The row as `denpyo report --json` prints it."""
        return {
            "period": self.period,
            "channel": self.channel,
            "status": self.status,
            "count": self.count,
        }


def check_period(by: str) -> str:
    if by not in PERIODS:
        raise InvalidInput(f"report by {by!r}? by day or by month")
    return by


def fold(days: Iterable[tuple[date, str, str, str, int]], by: str) -> list[ReportRow]:
    """The store's daily counts (day, channel, status, error kind, rows) added up by
    `by` (day or month), channel and status, in that order."""
    totals: Counter[tuple[str, str, str]] = Counter()
    for day, channel, status, _, n in days:
        period = day.isoformat() if by == "day" else f"{day:%Y-%m}"
        totals[(period, channel, status)] += n
    return [ReportRow(*key, count) for key, count in sorted(totals.items())]
