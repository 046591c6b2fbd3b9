"""The rules of a channel's shared state, without a database (domain/channel_state.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from denpyo.domain.channel_state import (
    PROBE_FIRST,
    PROBE_LONGEST,
    ChannelState,
    FailureStreak,
    Mode,
    counts_against_row,
    next_probe_wait,
    reserve_count,
)
from denpyo.domain.policy import Outcome, OutcomeKind

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
TRANSIENT = Outcome(OutcomeKind.TRANSIENT, error="HTTP 503")
AMBIGUOUS = Outcome(OutcomeKind.AMBIGUOUS, error="timed out")
SYNCED = Outcome(OutcomeKind.SYNCED)
REJECTED = Outcome(OutcomeKind.REJECTED, error="HTTP 422")


def test_a_pause_outranks_the_provider_and_a_hold_ends_by_itself() -> None:
    later = NOW + timedelta(seconds=30)
    paused = ChannelState(
        "sms",
        NOW,
        paused_at=NOW,
        paused_by="operator:ann",
        paused_note="wrong template",
        down_since=NOW,
    )
    assert paused.mode is Mode.PAUSED
    assert paused.describe() == (
        "paused by operator:ann at 2026-12-03 12:00:00 UTC: wrong template"
    )
    assert ChannelState("sms", NOW, down_since=NOW, throttled_until=later).mode is Mode.DOWN
    assert (
        ChannelState("sms", NOW, throttled_until=later, throttled_note="429").mode is Mode.THROTTLED
    )
    assert ChannelState("sms", later, throttled_until=NOW).mode is Mode.ACTIVE
    assert ChannelState("sms", NOW).describe() == "active"


def test_the_provider_is_down_after_a_run_of_failures_that_no_answer_broke() -> None:
    streak = FailureStreak(down_after=3)
    assert [streak.observe(o) for o in (TRANSIENT, AMBIGUOUS, SYNCED)] == [False] * 3
    assert [streak.observe(o) for o in (TRANSIENT, TRANSIENT)] == [False, False]
    assert streak.observe(AMBIGUOUS) is True  # the third in a row: once
    assert streak.observe(TRANSIENT) is False  # not again for a longer run
    streak.observe(REJECTED)  # the provider answered: the run is over
    assert streak.count == 0
    streak.observe(TRANSIENT)
    streak.observe(Outcome(OutcomeKind.TRANSIENT, retry_after=1, throttled=True))  # a 429
    assert streak.count == 0  # a provider that limits its rate is up
    never = FailureStreak(down_after=None)
    assert not any(never.observe(TRANSIENT) for _ in range(100))


def test_a_failure_while_down_spends_no_attempt() -> None:
    assert counts_against_row(TRANSIENT, down=False)
    assert not counts_against_row(TRANSIENT, down=True)
    assert not counts_against_row(AMBIGUOUS, down=True)
    assert counts_against_row(SYNCED, down=True) and counts_against_row(REJECTED, down=True)


def test_probes_grow_apart_up_to_a_minute() -> None:
    waits = [next_probe_wait(None)]
    for _ in range(12):
        waits.append(next_probe_wait(waits[-1]))
    assert waits[0] == PROBE_FIRST and waits[1] == PROBE_FIRST * 1.5
    assert waits == sorted(waits) and waits[-1] == PROBE_LONGEST


def test_a_worker_reserves_a_quarter_second_of_starts_at_least_one() -> None:
    assert (reserve_count(50), reserve_count(15), reserve_count(0.5)) == (12, 3, 1)
