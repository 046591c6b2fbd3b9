"""What the fleet shares about each channel: a person's pause, the provider's
back-off, the provider-down mode with one probe at a time, the fleet rate limit's
clock and the fleet's rows in flight. Each change is made by one caller only."""

from __future__ import annotations

import time

from store_helpers import new

from denpyo.domain.actions import ActionKind, Scope
from denpyo.domain.channel_state import Mode
from denpyo.store import Store
from denpyo.store.actions import NewAction


def mode(store: Store, channel: str) -> Mode:
    states = {state.channel: state for state in store.channel_states()}
    return states[channel].mode if channel in states else Mode.ACTIVE


def test_a_pause_and_a_resume_are_written_once_with_their_history(store: Store) -> None:
    assert store.channel_states() == [] and mode(store, "c") is Mode.ACTIVE
    log = NewAction(ActionKind.PAUSE, Scope.CHANNEL, "c", "operator:ada", "incident")
    assert store.pause_channel("c", actor="operator:ada", note="incident", log=log)
    assert not store.pause_channel("c", actor="operator:bob", note="me too"), "paused already"
    [state] = store.channel_states()
    assert (state.mode, state.paused_by, state.paused_note) == (
        Mode.PAUSED,
        "operator:ada",
        "incident",
    )
    [entry] = store.actions()
    assert (entry.kind, entry.target) == (ActionKind.PAUSE, "c"), "the entry came with it"

    assert store.resume_channel("c", actor="operator:bob", note="fixed")
    assert not store.resume_channel("c", actor="operator:bob", note="again"), "not paused"
    assert mode(store, "c") is Mode.ACTIVE
    history = store.channel_history("c")
    assert [(e.kind, e.actor, e.note) for e in history] == [
        ("resumed", "operator:bob", "fixed"),
        ("paused", "operator:ada", "incident"),
    ]
    assert [e.kind for e in store.channel_history("c", limit=1)] == ["resumed"]
    assert store.channel_history("sms") == []


def test_a_hold_keeps_the_longest_wait_asked(store: Store) -> None:
    assert store.throttle_channel("c", throttle_for=600, note="Retry-After: 600")
    assert not store.throttle_channel("c", throttle_for=60, note="Retry-After: 60"), (
        "a longer one stands"
    )
    [state] = store.channel_states()
    assert state.mode is Mode.THROTTLED and state.throttled_note == "Retry-After: 600"
    assert state.throttled_until is not None
    assert 500 < (state.throttled_until - state.now).total_seconds() <= 600
    assert store.throttle_channel("c", throttle_for=1200, note="Retry-After: 1200")
    assert store.throttle_channel("sms", throttle_for=0.05, note="short")
    time.sleep(0.2)
    assert mode(store, "sms") is Mode.ACTIVE, "a hold ends by itself"


def test_one_caller_takes_a_down_channel_and_each_probe(store: Store) -> None:
    assert not store.take_probe("c", next_in=5), "no probe while the channel is up"
    assert store.channel_down("c", actor="worker:a", note="5 failures", probe_in=0)
    assert not store.channel_down("c", actor="worker:b", note="5 failures", probe_in=0)
    [state] = store.channel_states()
    assert (state.mode, state.down_note) == (Mode.DOWN, "5 failures")
    assert store.take_probe("c", next_in=600)
    assert not store.take_probe("c", next_in=600), "the next probe is not due yet"
    [state] = store.channel_states()
    assert state.probe_every == 600
    assert store.channel_up("c", actor="worker:a", note="a probe succeeded")
    assert not store.channel_up("c", actor="worker:b", note="a probe succeeded")
    assert mode(store, "c") is Mode.ACTIVE
    assert [e.kind for e in store.channel_history("c")] == ["up", "down"]


def test_the_fleet_clock_spaces_the_starts_it_reserves(store: Store) -> None:
    # one start per 100 s: a slow machine's seconds between the calls change nothing
    assert store.reserve_starts("c", 1, rate=0.01) == 0.0, "the first start is now"
    wait = store.reserve_starts("c", 10, rate=0.01)
    assert 50 < wait <= 100, "after the one reserved before"
    assert 1050 < store.reserve_starts("c", 1, rate=0.01) <= 1100
    assert store.reserve_starts("sms", 5, rate=100.0) == 0.0, "each channel its own clock"


def test_a_fleet_limited_claim_leaves_at_most_the_limit_in_flight(store: Store) -> None:
    for i in range(5):
        store.record(new(f"k{i}"), actor="t")
    store.record(new("inline"), actor="app", lease=60)  # held: counts towards the fleet's
    first = store.claim_within("c", holder="w1", limit=10, lease=60, fleet_concurrency=3)
    assert len(first) == 2 and all(sub.locked_by == "w1" for sub in first)
    assert store.claim_within("c", holder="w2", limit=10, lease=60, fleet_concurrency=3) == []
    more = store.claim_within("c", holder="w2", limit=1, lease=60, fleet_concurrency=10)
    assert len(more) == 1 and more[0].id not in {sub.id for sub in first}
