"""The row rules in Python (`denpyo.domain.rules`) say what the store's SQL says, on
every database: rows in every state a person meets, each on a channel of its own,
are judged in doubt, exhausted and needing a person alike by the rules and by the
SQL that the lists, the filters, the needs-a-person queue, its counts and the
running counts' kinds use."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import denpyo
from denpyo.domain import rules
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move, Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Submission
from denpyo.engine import operator as op
from denpyo.store import NewSubmission, Store

SQL = Callable[[str], list[tuple[Any, ...]]]

SYNCED = AttemptDecision(Status.SYNCED, remote_id="r-1")
REJECTED = AttemptDecision(Status.REJECTED, ErrorKind.REJECTED, "422 no such address")
RETRYING = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "503", retry_in=600)
EXHAUSTED = AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "503", retry_in=None)
AMBIGUOUS = AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=600)
AMBIGUOUS_HELD = AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=None)
AMBIGUOUS_DUE = AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "timeout", retry_in=0)
LONG = 600.0  # a live lease outlasts the test by far: nothing here depends on timing


def recorded(store: Store, channel: str, *, lease: float | None = None) -> Submission:
    new = NewSubmission(channel, "k", f"idem-{channel}", json.dumps({"c": channel}))
    sub, created = store.record(new, actor="h", lease=lease)
    assert created
    return sub


def settled(store: Store, channel: str, outcome: AttemptDecision) -> Submission:
    """Recorded, sent once, settled with `outcome`."""
    sub = recorded(store, channel, lease=LONG)
    [after] = store.move([Settle.of(sub, "h", outcome, 5)])
    assert after is not None
    return after


def expired(store: Store, channel: str, retry_in: float | None = 0) -> Submission:
    """`requesting` with its lease run out, as a crashed sender leaves it (or, with no
    next step, as a reconciler that could not tell leaves it for a person)."""
    sub = recorded(store, channel, lease=LONG)
    [after] = store.move([Move.still_in_doubt(sub, "h", retry_in, "lease run out")])
    assert after is not None and after.in_doubt
    return after


def every_state(ledger: denpyo.Ledger) -> None:
    """One row (two after a resend) per channel, named by its state."""
    store = ledger.store
    recorded(store, "fresh")
    recorded(store, "inline-in-flight", lease=LONG)
    recorded(store, "claimed")
    assert len(store.claim("claimed", holder="w", limit=1, lease=LONG)) == 1
    expired(store, "expired")
    expired(store, "expired-held", retry_in=None)
    expired(store, "expired-verifying")
    assert len(store.claim("expired-verifying", holder="v", limit=1, lease=LONG, in_doubt=True))
    for channel, outcome in (
        ("retrying", RETRYING),
        ("exhausted", EXHAUSTED),
        ("ambiguous", AMBIGUOUS),
        ("ambiguous-held", AMBIGUOUS_HELD),
        ("ambiguous-verifying", AMBIGUOUS_DUE),
        ("rejected", REJECTED),
        ("synced", SYNCED),
    ):
        settled(store, channel, outcome)
    assert len(store.claim("ambiguous-verifying", holder="v", limit=1, lease=LONG, in_doubt=True))

    # A person's moves, through the operator's functions.
    note = {"note": "checked", "by": "tester"}
    for channel, outcome in (
        ("abandoned-exhausted", EXHAUSTED),
        ("abandoned-rejected", REJECTED),
        ("abandoned-ambiguous", AMBIGUOUS_HELD),
    ):
        op.resolve_abandon(ledger, settled(store, channel, outcome).id, **note)
    op.resolve_abandon(ledger, expired(store, "abandoned-expired").id, **note)
    op.resolve_abandon(ledger, recorded(store, "abandoned-never-sent").id, **note)
    forced = [settled(store, "forced-ambiguous", AMBIGUOUS), expired(store, "forced-expired")]
    op.retry(ledger, refs=[s.id for s in forced], force_in_doubt=True, **note)
    op.retry(ledger, refs=[settled(store, "retried-exhausted", EXHAUSTED).id], **note)
    op.resolve_resend(ledger, settled(store, "resent-rejected", REJECTED).id, **note)
    op.resolve_resend(ledger, expired(store, "resent-expired").id, force_in_doubt=True, **note)
    mark = {"remote_id": "r-9", **note}
    op.resolve_mark_synced(ledger, settled(store, "marked-ambiguous", AMBIGUOUS).id, **mark)
    op.resolve_mark_synced(ledger, expired(store, "marked-expired").id, **mark)


def kinds_by_channel(sql: SQL) -> dict[str, set[str]]:
    """The running counts' kinds that hold rows, by channel."""
    found: dict[str, set[str]] = {}
    query = """
        SELECT channel, kind, SUM(n) FROM denpyo_status_counts
        GROUP BY channel, kind HAVING SUM(n) <> 0"""
    for channel, kind, _ in sql(query):
        found.setdefault(channel, set()).add(kind)
    return found


def test_the_rules_say_what_the_sql_says(ledger: denpyo.Ledger, sql: SQL) -> None:
    every_state(ledger)
    store = ledger.store
    rows = store.list_submissions(Filter(limit=1000))
    channels = sorted({s.channel for s in rows})
    assert len(channels) == 25 and len(rows) == 27  # each resend made one row more

    def ids(flt: Filter) -> set[int]:
        return {s.id for s in store.list_submissions(flt)}

    # In doubt: the database judges it when it reads a row, from its columns.
    now = store.now()
    for sub in rows:
        lapsed = sub.locked_until is not None and sub.locked_until <= now
        assert rules.in_doubt(sub) == (
            (sub.status is Status.REQUESTING and lapsed)
            or (sub.status is Status.FAILED and sub.error_kind is ErrorKind.AMBIGUOUS)
        ), sub
    assert ids(Filter(in_doubt=True, limit=1000)) == {s.id for s in rows if rules.in_doubt(s)}
    assert ids(Filter(in_doubt=False, limit=1000)) == {s.id for s in rows if not s.in_doubt}

    # Needs a person: the filter, and the queue in its order.
    people = {s.id for s in rows if rules.needs_person(s)}
    assert ids(Filter(needs_person=True, limit=1000)) == people
    assert ids(Filter(needs_person=False, limit=1000)) == {s.id for s in rows} - people
    queue = store.attention_page(limit=1000)
    assert [s.id for s in queue.rows] == sorted(people, reverse=True)
    assert all(s.in_doubt == rules.in_doubt(s) for s in queue.rows)

    # The counts, channel by channel and over all, and the running counts' kinds.
    kinds = kinds_by_channel(sql)
    for channel in [*channels, None]:
        mine = [s for s in rows if channel is None or s.channel == channel]
        counts = store.count_attention(channel)
        assert counts["in_doubt"] == sum(rules.in_doubt(s) for s in mine), channel
        assert counts["exhausted"] == sum(
            rules.is_exhausted(s) and s.resolution is None for s in mine
        ), channel
        assert counts["needs_person"] == sum(rules.needs_person(s) for s in mine), channel
        if channel is not None:
            exhausted = "exhausted" in kinds[channel]
            assert exhausted == any(rules.is_exhausted(s) for s in mine), (channel, kinds)

    # Every state is there, judged as its name says.
    by_channel = {s.channel: s for s in sorted(rows, key=lambda s: -s.id)}  # the first row
    judged = {
        name: (rules.in_flight(s), rules.in_doubt(s), rules.is_exhausted(s), rules.needs_person(s))
        for name, s in by_channel.items()
    }
    assert judged == {
        # in flight, in doubt, exhausted, needs a person
        "fresh": (False, False, False, False),
        "inline-in-flight": (True, False, False, False),
        "claimed": (True, False, False, False),
        "expired": (False, True, False, True),
        "expired-held": (False, True, False, True),
        "expired-verifying": (True, False, False, False),
        "retrying": (False, False, False, False),
        "exhausted": (False, False, True, True),
        "ambiguous": (False, True, False, True),
        "ambiguous-held": (False, True, False, True),
        "ambiguous-verifying": (False, True, False, True),
        "rejected": (False, False, False, True),
        "synced": (False, False, False, False),
        "abandoned-exhausted": (False, False, True, False),
        "abandoned-rejected": (False, False, False, False),
        "abandoned-ambiguous": (False, True, False, False),
        "abandoned-expired": (False, True, False, False),
        "abandoned-never-sent": (False, False, True, False),
        "forced-ambiguous": (False, False, False, False),
        "forced-expired": (False, False, False, False),
        "retried-exhausted": (False, False, False, False),
        "resent-rejected": (False, False, False, False),
        "resent-expired": (False, True, False, False),
        "marked-ambiguous": (False, False, False, False),
        "marked-expired": (False, False, False, False),
    }


@pytest.mark.parametrize(
    ("outcome", "exhausted"),
    [(EXHAUSTED, True), (AMBIGUOUS_HELD, False), (RETRYING, False), (AMBIGUOUS, False)],
    ids=["transient-no-next", "ambiguous-no-next", "transient-due", "ambiguous-due"],
)
def test_exhausted_means_one_thing(
    ledger: denpyo.Ledger, outcome: AttemptDecision, exhausted: bool
) -> None:
    """`failed` with no next attempt and not in doubt: an ambiguous failure left for a
    person is in doubt, and counted there, never as exhausted."""
    sub = settled(ledger.store, "c", outcome)
    assert sub.is_exhausted is rules.is_exhausted(sub) is exhausted
    assert ledger.store.count_attention()["exhausted"] == int(exhausted)
