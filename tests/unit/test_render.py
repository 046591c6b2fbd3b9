"""What the command line prints for people (cli/render.py), at a terminal's width."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from denpyo import ErrorKind, Status, Submission
from denpyo.cli import render, rows

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def row(n: int, key: str, status: Status = Status.SYNCED, **fields: object) -> Submission:
    base: dict[str, object] = dict(
        id=n,
        channel="invoice-email",
        key=key,
        idempotency_key=f"i{n}",
        payload={},
        status=status,
        attempts=1,
        created_at=NOW - timedelta(minutes=3),
        updated_at=NOW - timedelta(seconds=42),
    )
    return Submission(**{**base, **fields})  # type: ignore[arg-type]


def printed(monkeypatch: pytest.MonkeyPatch, width: int, subs: list[Submission]) -> list[str]:
    screen = io.StringIO()
    terminal = Console(file=screen, width=width, force_terminal=True, color_system=None)
    monkeypatch.setattr(render, "out", terminal)
    rows.show_list(subs, NOW, limit=50)
    return screen.getvalue().splitlines()


ROWS = [
    row(1, "order:100001"),
    row(
        2,
        "customer:4711/order:100002",
        Status.FAILED,
        error_kind=ErrorKind.TRANSIENT,
        last_error="HTTP 503 Service Unavailable from the provider, try again later",
    ),
    row(
        3,
        "order:100003",
        Status.REQUESTING,
        attempts=0,
        in_doubt=True,
        locked_by="w/1",
        locked_until=NOW - timedelta(seconds=5),
    ),
    row(
        4,
        "order:100004",
        Status.REQUESTING,
        attempts=0,
        locked_by="worker:named:abc/7",
        locked_until=NOW + timedelta(seconds=45),
    ),
]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_in_a_narrow_terminal_the_key_and_the_status_win_and_each_row_keeps_one_line(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    lines = printed(monkeypatch, width, ROWS)
    assert all(len(line) <= width for line in lines), lines
    header, *table, count = lines
    assert len(table) == len(ROWS) and count == "4 rows"
    for line, sub in zip(table, ROWS, strict=True):
        assert sub.key in line, (sub.key, line)
    assert "requesting in doubt" in lines[3] and "requesting in flight" in lines[4]
    assert header.split()[:5] == ["id", "channel", "key", "status", "tries"]


def test_a_held_row_says_how_long_its_lease_has_left_and_who_holds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [_, held, _] = printed(monkeypatch, 200, [ROWS[3]])
    assert held.rstrip().endswith("45 s left, held by worker:named:abc")
    assert render.hold_text(ROWS[3], NOW, gone=True) == (
        "worker:named:abc, lease ends in 45 s (holder gone)"
    )
    assert render.hold_text(ROWS[2], NOW, gone=False) is None  # its lease ended: in doubt
