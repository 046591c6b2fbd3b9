"""The engine's flows, driven by a script and no database.

A flow yields effects (`StoreOp`, `Apply`, `Call`, `Check`) and is sent their
results. Each test here plays the store, the channel and verify: it names the
effects the flow must yield, in order, and what each one answers. So each test
reads as the sequence a runner performs for one case, and checks the changes
(`Move`, `Settle`) the flow asks for, field by field where they matter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from unittest.mock import Mock

import pytest

from denpyo.domain.alert import Alert
from denpyo.domain.backoff import Backoff
from denpyo.domain.moves import Move, Settle
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Event, Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Unknown
from denpyo.engine.alerts import Alerts
from denpyo.engine.channel import ChannelSpec
from denpyo.engine.flows import (
    Apply,
    Call,
    CallResult,
    Check,
    Done,
    Effect,
    Flow,
    Flows,
    StoreOp,
    step,
)
from denpyo.errors import KeyReused, LeaseExpired, Rejected, StoreError, Transient
from denpyo.store import NewSubmission, Store

# -- the driver -------------------------------------------------------------------------


Expected = Callable[..., Any] | type
"""The effect a flow must yield next: a method of the store's stand-in (a `StoreOp`
of it), `Call` or `Check`, or `Move` / `Settle` (an `Apply` of that one change)."""


def yields(effect: Effect | Done, expected: Expected) -> bool:
    if isinstance(effect, Done):
        return False
    if isinstance(effect, Apply):
        return [type(change) for change in effect.changes] == [expected]
    if isinstance(effect, Call | Check):
        return type(effect) is expected
    return effect.fn == expected


def drive(flow: Flow, *script: tuple[Expected, Any]) -> tuple[Any, list[Effect]]:
    """Run `flow` through `script`: each pair is the effect it must yield next and
    what the store, the channel or verify answers. Returns what the flow returned,
    and the effects it yielded for a closer look."""
    seen: list[Effect] = []
    answer: Any = None
    for number, (expected, result) in enumerate(script, 1):
        effect = step(flow, answer)
        assert yields(effect, expected), f"effect {number}: wanted {expected}, got {effect}"
        seen.append(cast(Effect, effect))
        answer = result
    end = step(flow, answer)
    assert isinstance(end, Done), f"the script ended, the flow yielded {end}"
    return end.value, seen


def asked(effect: Effect) -> tuple[Any, ...]:
    """The arguments of a `StoreOp`."""
    assert isinstance(effect, StoreOp)
    return effect.args


def change(effect: Effect) -> Any:
    """The one change an `Apply` asks for."""
    assert isinstance(effect, Apply)
    [only] = effect.changes
    return only


def sent(effect: Effect) -> Submission:
    """The row a `Call` or a `Check` is about."""
    assert isinstance(effect, Call | Check)
    return effect.submission


def never_called(sub: Submission) -> str:
    raise AssertionError("the runner calls the channel, never the flow")


NO_JITTER = Backoff(initial=2.0, maximum=100.0, jitter=0.0)


def channel(**settings: Any) -> ChannelSpec:
    """A channel of three attempts, 60 s leases and 2 s, 4 s, 8 s back-off."""
    return ChannelSpec("c", never_called, **{"max_attempts": 3, "backoff": NO_JITTER, **settings})


PLAIN = channel()
VERIFIED = channel(verify=lambda sub: NotDelivered())
IDEMPOTENT = channel(idempotent=True)
WINDOWED = channel(idempotent=True, idempotency_window=3600.0)
NEW = NewSubmission("c", "k", "idem-k", '{"n": 1}')


def row(**fields: Any) -> Submission:
    """Row 1, `c:k`, as the store would return it."""
    base: dict[str, Any] = dict(
        id=1,
        channel="c",
        key="k",
        idempotency_key="idem-k",
        payload={"n": 1},
        status=Status.REQUESTING,
    )
    return Submission(**{**base, **fields})


SENDING = row(locked_by="app/1")  # recorded and held by this process's first hold
IN_DOUBT = row(locked_by="gone/1", in_doubt=True)  # a sender's lease ran out
TRANSIENT = row(status=Status.FAILED, attempts=1, error_kind=ErrorKind.TRANSIENT)
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def event(kind: str, attempt: int, status: Status = Status.REQUESTING, ago: float = 60) -> Event:
    """One line of row 1's history, `ago` seconds before NOW; its move keeps `status`."""
    at = NOW - timedelta(seconds=ago)
    return Event(0, 1, at, kind, status, status, attempt, "gone/1")


HELD_ONCE = ([event("attempt", 1)], NOW)
"""A row's history and the clock, as a reconciler reads them (`Store.history`): one hold
to send it, whose sender never settled it."""


@pytest.fixture
def store() -> Iterator[Mock]:
    """The store as a flow sees it: only the target of `StoreOp`, with the methods of
    `Store` and nothing else. A flow never runs a store method itself (its runner
    does): the script sends back what each would have returned."""
    stand_in = Mock(spec_set=Store)
    yield stand_in
    assert stand_in.mock_calls == [], "a flow ran the store itself"


@pytest.fixture
def told() -> list[Alert]:
    return []


@pytest.fixture
def flows(store: Mock, told: list[Alert]) -> Flows:
    alerts = Alerts()
    alerts.add(told.append)
    flows = Flows(cast(Store, store), alerts, "app")
    flows.gates.read_at = float("inf")  # every channel running, as read just now
    return flows


# -- submit of a new key ----------------------------------------------------------------


def test_submit_of_a_new_key_records_then_calls_then_settles(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    synced = row(status=Status.SYNCED, attempts=1, remote_id="r-1")
    value, (record, call, settle) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (SENDING, True)),
        (Call, CallResult("r-1", duration_ms=12)),
        (Settle, [synced]),
    )
    assert value is synced and told == []
    assert record == StoreOp(store.record, (NEW,), {"actor": "app/1", "lease": 60.0})
    assert sent(call) == SENDING and sent(call).lease is not None  # held by this process
    assert change(settle) == Settle(
        sent(call), "app", Status.SYNCED, retry_in=None, remote_id="r-1", duration_ms=12
    )
    assert change(settle).holder == "app/1"


@pytest.mark.parametrize(
    ("error", "status", "kind", "retry_in", "alert"),
    [
        (Transient("HTTP 503"), Status.FAILED, ErrorKind.TRANSIENT, 2.0, None),
        (Rejected("no such customer"), Status.REJECTED, ErrorKind.REJECTED, None, "rejected"),
        (TimeoutError("read timed out"), Status.FAILED, ErrorKind.AMBIGUOUS, None, "in_doubt"),
    ],
    ids=["transient", "rejected", "ambiguous"],
)
def test_a_call_that_raises_is_settled_by_its_error(
    flows: Flows,
    store: Mock,
    told: list[Alert],
    error: Exception,
    status: Status,
    kind: ErrorKind,
    retry_in: float | None,
    alert: str | None,
) -> None:
    """Transient: failed, retried after the back-off. Rejected: final, and a person
    is told. Ambiguous, on a channel with neither verify nor idempotency: in doubt
    for good, and a person is told."""
    after = row(status=status, attempts=1, error_kind=kind, last_error=str(error))
    value, (_, _, settle) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (SENDING, True)),
        (Call, CallResult(error=error, duration_ms=5)),
        (Settle, [after]),
    )
    assert value is after
    settled = change(settle)
    assert (settled.to_status, settled.error_kind, settled.retry_in) == (status, kind, retry_in)
    assert settled.last_error == f"{type(error).__name__}: {error}"
    assert [(a.reason, a.submission) for a in told] == ([(alert, after)] if alert else [])


def test_submit_behind_an_open_row_of_its_ordering_key_gives_the_row_back_unsent(
    flows: Flows, store: Mock
) -> None:
    held = row(locked_by="app/1", ordering_key="customer:a")
    released = row(ordering_key="customer:a")
    value, (_, waits, give_back) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (held, True)),
        (store.ordering_waits, True),
        (Move, [released]),
    )
    assert value is released
    assert asked(waits) == (held,)
    assert change(give_back) == Move.release(1, "app/1", "waits for the rows before it")


def test_submit_whose_ordering_key_has_nothing_open_before_it_is_sent(
    flows: Flows, store: Mock
) -> None:
    held = row(locked_by="app/1", ordering_key="customer:a")
    synced = row(status=Status.SYNCED, attempts=1, ordering_key="customer:a")
    value, _ = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (held, True)),
        (store.ordering_waits, False),
        (Call, CallResult("r-1")),
        (Settle, [synced]),
    )
    assert value is synced


def test_a_call_that_could_not_start_within_its_lease_gives_the_row_back(
    flows: Flows, store: Mock
) -> None:
    """The runner found this process's lease past its deadline and never started the
    call: nothing is counted, the row due again at once."""
    released = row()
    value, (_, _, give_back) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (SENDING, True)),
        (Call, CallResult(error=LeaseExpired("c:k: the lease may have run out"))),
        (Move, [released]),
    )
    assert value is released
    move = change(give_back)
    assert move == Move.release(1, "app/1", "not sent: c:k: the lease may have run out")
    assert (move.attempt_delta, move.retry_in, move.holder) == (0, 0, "app/1")


def test_a_give_back_that_loses_its_compare_and_set_reads_the_row_again(
    flows: Flows, store: Mock
) -> None:
    theirs = row(attempts=2, locked_by="worker/9")
    value, (*_, reread) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (SENDING, True)),
        (Call, CallResult(error=LeaseExpired("late"))),
        (Move, [None]),
        (store.get, theirs),
    )
    assert value is theirs and asked(reread) == (1,)


def test_a_settle_that_loses_its_compare_and_set_reads_the_row_again_and_logs_it(
    flows: Flows, store: Mock, told: list[Alert], caplog: pytest.LogCaptureFixture
) -> None:
    """Another sender took the row while its call was out: the outcome is in the log
    only, and no alert is told about a row this process no longer holds."""
    theirs = row(attempts=2, locked_by="worker/9")
    with caplog.at_level(logging.WARNING, logger="denpyo.engine"):
        value, _ = drive(
            flows.submit(PLAIN, NEW),
            (store.record, (SENDING, True)),
            (Call, CallResult(error=Rejected("no such customer"))),
            (Settle, [None]),
            (store.get, theirs),
        )
    assert value is theirs and told == []
    assert "lease lost on c:k (id 1)" in caplog.text and "(rejected)" in caplog.text


def test_a_row_gone_when_read_again_is_returned_as_the_flow_last_saw_it(
    flows: Flows, store: Mock
) -> None:
    value, (_, call, *_) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (SENDING, True)),
        (Call, CallResult("r-1")),
        (Settle, [None]),
        (store.get, None),
    )
    assert value is sent(call)


def test_a_store_error_is_thrown_into_the_flow_and_out_of_it(flows: Flows, store: Mock) -> None:
    """A runner throws what an effect raised into the flow (`step(flow, error=...)`);
    a flow handles none of the store's errors, so it ends with it."""
    flow = flows.submit(PLAIN, NEW)
    assert yields(step(flow), store.record)
    with pytest.raises(StoreError, match="database gone"):
        step(flow, error=StoreError("database gone"))


def test_every_hold_has_a_holder_of_its_own(flows: Flows) -> None:
    assert [flows.new_holder() for _ in range(3)] == ["app/1", "app/2", "app/3"]


# -- submit of a key already recorded ---------------------------------------------------


def test_submit_of_a_known_key_with_another_payload_is_refused(flows: Flows, store: Mock) -> None:
    flow = flows.submit(PLAIN, NEW)
    assert yields(step(flow), store.record)
    with pytest.raises(KeyReused, match="c:k is already recorded with a different payload"):
        step(flow, (row(status=Status.SYNCED, payload={"n": 2}), False))


@pytest.mark.parametrize(
    "recorded",
    [
        row(status=Status.SYNCED, attempts=1, remote_id="r-1"),
        row(status=Status.REJECTED, attempts=1, error_kind=ErrorKind.REJECTED),
        row(attempts=1, locked_by="worker/9", locked_until=datetime(2026, 1, 1, tzinfo=UTC)),
    ],
    ids=["synced", "rejected", "in-flight"],
)
def test_submit_of_a_key_settled_or_in_flight_returns_its_row_and_calls_nothing(
    flows: Flows, store: Mock, recorded: Submission
) -> None:
    value, _ = drive(flows.submit(PLAIN, NEW), (store.record, (recorded, False)))
    assert value is recorded


def test_submit_of_a_failed_transient_key_starts_its_next_attempt(
    flows: Flows, store: Mock
) -> None:
    """Under the same key: a `Move.start_attempt` from a row nobody holds."""
    retaken = row(attempts=2, locked_by="app/2", error_kind=ErrorKind.TRANSIENT)
    synced = row(status=Status.SYNCED, attempts=2, remote_id="r-2")
    value, (_, start, call, settle) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (TRANSIENT, False)),
        (Move, [retaken]),
        (Call, CallResult("r-2")),
        (Settle, [synced]),
    )
    assert value is synced
    assert change(start) == Move.start_attempt(TRANSIENT, "app/2", 60.0, "resubmitted", None)
    assert sent(call) == retaken and sent(call).lease is not None
    assert change(settle).holder == "app/2"


def test_submit_of_a_failed_key_behind_an_open_row_of_its_ordering_key_is_left_to_the_worker(
    flows: Flows, store: Mock
) -> None:
    waiting = row(
        status=Status.FAILED, attempts=1, error_kind=ErrorKind.TRANSIENT, ordering_key="customer:a"
    )
    value, _ = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (waiting, False)),
        (store.ordering_waits, True),
    )
    assert value is waiting


def test_a_next_attempt_that_loses_its_compare_and_set_reads_the_row_again(
    flows: Flows, store: Mock
) -> None:
    claimed = row(attempts=2, locked_by="worker/9", error_kind=ErrorKind.TRANSIENT)
    value, _ = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (TRANSIENT, False)),
        (Move, [None]),
        (store.get, claimed),
    )
    assert value is claimed


def verifying(**fields: Any) -> Submission:
    """The in-doubt row once this process took it to verify: held by `app/2`."""
    return row(**{"locked_by": "app/2", **fields})


def test_submit_of_an_in_doubt_key_verifies_it_first_and_syncs_it_when_delivered(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    synced = row(status=Status.SYNCED, attempts=1, remote_id="r-9")
    value, (_, take, check, read, verified) = drive(
        flows.submit(VERIFIED, NEW),
        (store.record, (IN_DOUBT, False)),
        (Move, [verifying()]),
        (Check, Delivered("r-9")),
        (store.history, HELD_ONCE),
        (Move, [synced]),
    )
    assert asked(read) == (1,)
    assert value is synced and told == []
    assert change(take) == Move.take_to_verify(IN_DOUBT, "app/2", 60.0)
    assert change(take).holder is None  # the lease ran out: nobody holds it
    assert sent(check) == verifying() and sent(check).lease is not None
    move = change(verified)
    assert move == Move.verified_delivered(verifying(), "app", "r-9", "verify: delivered")
    assert (move.holder, move.to_status, move.detail) == (
        "app/2",
        Status.SYNCED,
        "verify: delivered, remote id r-9",
    )


def test_submit_of_an_in_doubt_key_not_delivered_sends_it_again_under_its_key(
    flows: Flows, store: Mock
) -> None:
    """The resend is a `Move.start_attempt` from the hold taken to verify, under a new
    holder; its lease is the verify's own, renewed."""
    resent = verifying(locked_by="app/3")
    synced = row(status=Status.SYNCED, attempts=1, remote_id="r-2")
    value, (_, _, check, _, start, call, settle) = drive(
        flows.submit(VERIFIED, NEW),
        (store.record, (IN_DOUBT, False)),
        (Move, [verifying()]),
        (Check, NotDelivered()),
        (store.history, HELD_ONCE),
        (Move, [resent]),
        (Call, CallResult("r-2")),
        (Settle, [synced]),
    )
    assert value is synced
    note = "verify: not delivered; resent under the same key"
    assert change(start) == Move.start_attempt(verifying(), "app/3", 60.0, note, "app/2")
    assert sent(call) == resent and sent(call).lease is sent(check).lease
    assert change(settle).holder == "app/3"


def test_submit_of_an_in_doubt_key_verify_cannot_tell_stays_in_doubt_with_an_alert(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    still = row(in_doubt=True)
    value, (*_, held) = drive(
        flows.submit(VERIFIED, NEW),
        (store.record, (IN_DOUBT, False)),
        (Move, [verifying()]),
        (Check, Unknown("lookup said 503")),
        (store.history, HELD_ONCE),
        (Move, [still]),
    )
    assert value is still
    move = change(held)
    note = "verify: unknown (lookup said 503)"
    assert move == Move.still_in_doubt(verifying(), "app", 2.0, note, again=False)
    assert move.event == "verify"  # the first time in this state: one history line
    assert (move.lease, move.holder) == (0, "app/2")  # an expired lease: in doubt again
    assert [(a.reason, a.submission) for a in told] == [("in_doubt", still)]
    assert "verify could not tell (lookup said 503)" in told[0].message


def test_submit_of_a_resolved_key_returns_the_newest_row_of_its_resends(
    flows: Flows, store: Mock
) -> None:
    """A person resent row 1 as row 2, and row 2 as row 3: no call, the last row."""
    resolved = row(status=Status.REJECTED, attempts=1, resolution="resent as #2")
    second = row(id=2, key="k~resend1", status=Status.REJECTED, resolution="resent as #3")
    third = row(id=3, key="k~resend2", status=Status.SYNCED, supersedes=2)
    value, (_, *found) = drive(
        flows.submit(PLAIN, NEW),
        (store.record, (resolved, False)),
        (store.find_superseding, second),
        (store.find_superseding, third),
        (store.find_superseding, None),
    )
    assert value is third
    assert [asked(effect) for effect in found] == [(1,), (2,), (3,)]


def test_a_take_to_verify_that_loses_reads_the_row_again_and_follows_its_resolution(
    flows: Flows, store: Mock
) -> None:
    """A person resolved the row between the submit's read and its move: the move
    loses, and the submit returns the row that supersedes it."""
    resolved = row(status=Status.FAILED, attempts=1, resolution="resent as #2")
    successor = row(id=2, key="k~resend1", supersedes=1)
    value, _ = drive(
        flows.submit(VERIFIED, NEW),
        (store.record, (IN_DOUBT, False)),
        (Move, [None]),
        (store.get, resolved),
        (store.find_superseding, successor),
        (store.find_superseding, None),
    )
    assert value is successor


# -- reconcile: a row this process holds to verify --------------------------------------


def test_reconcile_marks_a_delivered_row_synced(flows: Flows, store: Mock) -> None:
    ambiguous = verifying(status=Status.FAILED, attempts=1, error_kind=ErrorKind.AMBIGUOUS)
    synced = row(status=Status.SYNCED, attempts=1)
    value, (check, _, verified) = drive(
        flows.reconcile(VERIFIED, ambiguous),
        (Check, Delivered()),
        (store.history, HELD_ONCE),
        (Move, [synced]),
    )
    assert value is synced and sent(check) is ambiguous
    move = change(verified)
    assert (move.from_status, move.to_status, move.remote_id, move.detail) == (
        Status.FAILED,
        Status.SYNCED,
        None,
        "verify: delivered",
    )


def test_reconcile_gives_up_a_row_not_delivered_once_its_attempts_are_exhausted(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    last = verifying(attempts=3)
    failed = row(status=Status.FAILED, attempts=3, error_kind=ErrorKind.TRANSIENT)
    value, (_, _, given_up) = drive(
        flows.reconcile(VERIFIED, last),
        (Check, NotDelivered()),
        (store.history, HELD_ONCE),
        (Move, [failed]),
    )
    assert value is failed
    note = "verify: not delivered; attempts exhausted"
    assert change(given_up) == Move.verified_given_up(last, "app", ErrorKind.TRANSIENT, note)
    assert [(a.reason, a.submission) for a in told] == [("exhausted", failed)]


def test_reconcile_of_an_idempotent_channel_without_verify_sends_again(
    flows: Flows, store: Mock
) -> None:
    """No verify and no idempotency window: the provider deduplicates by the key."""
    resent = verifying(locked_by="app/1")
    synced = row(status=Status.SYNCED, attempts=1)
    value, (_, start, _, _) = drive(
        flows.reconcile(IDEMPOTENT, verifying()),
        (store.history, HELD_ONCE),
        (Move, [resent]),
        (Call, CallResult("r-2")),
        (Settle, [synced]),
    )
    assert value is synced
    note = "idempotent channel: resent under the same key"
    assert change(start) == Move.start_attempt(verifying(), "app/1", 60.0, note, "app/2")


def test_reconcile_of_an_idempotent_channel_gives_up_once_attempts_are_exhausted(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    last = verifying(attempts=3)
    failed = row(status=Status.FAILED, attempts=3, error_kind=ErrorKind.AMBIGUOUS)
    value, (_, given_up) = drive(
        flows.reconcile(IDEMPOTENT, last), (store.history, HELD_ONCE), (Move, [failed])
    )
    assert value is failed
    move = change(given_up)
    assert (move.to_status, move.error_kind) == (Status.FAILED, ErrorKind.AMBIGUOUS)
    assert [a.reason for a in told] == ["exhausted"]


FIRST = datetime(2026, 1, 1, tzinfo=UTC)
FIRST_HOLD = Event(0, 1, FIRST, "attempt", Status.REQUESTING, Status.REQUESTING, 1, "gone/1")


def test_reconcile_resends_while_the_idempotency_window_is_open(flows: Flows, store: Mock) -> None:
    resent = verifying(locked_by="app/1")
    synced = row(status=Status.SYNCED, attempts=1)
    value, (window, start, _, _) = drive(
        flows.reconcile(WINDOWED, verifying()),
        (store.history, ([FIRST_HOLD], FIRST + timedelta(minutes=5))),
        (Move, [resent]),
        (Call, CallResult("r-2")),
        (Settle, [synced]),
    )
    assert value is synced and asked(window) == (1,)
    assert change(start).to_status is Status.REQUESTING


def test_reconcile_asks_a_person_once_the_idempotency_window_has_closed(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    """The provider may have forgotten the key: a resend could act twice."""
    held = row(in_doubt=True)
    value, (_, hold) = drive(
        flows.reconcile(WINDOWED, verifying()),
        (store.history, ([FIRST_HOLD], FIRST + timedelta(hours=2))),
        (Move, [held]),
    )
    assert value is held
    note = "idempotency window closed: left for a person"
    assert change(hold) == Move.still_in_doubt(verifying(), "app", None, note, again=False)
    assert [(a.reason, a.submission) for a in told] == [("in_doubt", held)]


def test_reconcile_without_verify_or_idempotency_asks_a_person(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    ambiguous = verifying(status=Status.FAILED, attempts=1, error_kind=ErrorKind.AMBIGUOUS)
    held = row(status=Status.FAILED, attempts=1, error_kind=ErrorKind.AMBIGUOUS)
    value, (_, hold) = drive(
        flows.reconcile(PLAIN, ambiguous), (store.history, HELD_ONCE), (Move, [held])
    )
    assert value is held
    move = change(hold)
    assert (move.to_status, move.retry_in, move.lease) == (Status.FAILED, None, None)
    assert [a.reason for a in told] == ["in_doubt"]


def test_a_verdict_whose_move_loses_reads_the_row_again_and_tells_nobody(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    theirs = row(status=Status.SYNCED, attempts=1, resolution="found by a person")
    value, _ = drive(
        flows.reconcile(VERIFIED, verifying()),
        (Check, Unknown()),
        (store.history, HELD_ONCE),
        (Move, [None]),
        (store.get, theirs),
    )
    assert value is theirs and told == []


def test_a_row_verify_still_cannot_tell_is_asked_later_with_no_new_line_nor_alert(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    """Kept in doubt in this state 30 s ago (its history ends with that one `verify`
    line): no second line, no second alert, and the next question waits longer than
    the first did (2 s): initial + (multiplier − 1) × 30 s."""
    kept = event("verify", 0, ago=30)
    still = row(in_doubt=True)
    value, (_, read, held) = drive(
        flows.reconcile(VERIFIED, verifying()),
        (Check, Unknown("lookup said 503")),
        (store.history, ([event("attempt", 1, ago=90), kept], NOW)),
        (Move, [still]),
    )
    assert value is still and told == [] and asked(read) == (1,)
    move = change(held)
    assert move == Move.still_in_doubt(
        verifying(), "app", 32.0, "verify: unknown (lookup said 503)", again=True
    )
    assert move.event is None and move.retry_in == 32.0


def test_holds_whose_sender_died_count_toward_exhaustion(
    flows: Flows, store: Mock, told: list[Alert]
) -> None:
    """Three holds to send it, none settled (its sender died each time): no attempt is
    counted, yet a row not delivered is given up once the holds reach `max_attempts`,
    instead of being resent for ever."""
    holds = [event("attempt", 1, ago=ago) for ago in (300, 200, 100)]
    failed = row(status=Status.FAILED, error_kind=ErrorKind.TRANSIENT)
    value, (*_, given_up) = drive(
        flows.reconcile(VERIFIED, verifying()),
        (Check, NotDelivered()),
        (store.history, (holds, NOW)),
        (Move, [failed]),
    )
    assert value is failed
    note = "verify: not delivered; attempts exhausted"
    assert change(given_up) == Move.verified_given_up(verifying(), "app", ErrorKind.TRANSIENT, note)
    assert [a.reason for a in told] == ["exhausted"]
