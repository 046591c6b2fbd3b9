"""The recipes (docs/how-to/recipes.md), run as written (each block is read from the
page and executed) against the fake provider set up as each kind of API is, and
against the real NATS server: a payment API that honours its key for 24 hours, an
email API with no keys verified by a custom argument, a broker. Every backend."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig

import denpyo
from denpyo import Status, Submission
from denpyo.domain.moves import Move
from denpyo.store import NewSubmission
from denpyo.testing import FakeProvider
from doc_pages import named

PAGE = "how-to/recipes.md"
NATS = "nats://127.0.0.1:4222"
SQL = Callable[[str], list[tuple[Any, ...]]]


def recipe(name: str, **names: Any) -> dict[str, Any]:
    """Run the page's block for `name` with `names` defined; returns its namespace."""
    namespace = dict(names)
    exec(compile(named(PAGE, "recipe")[name], f"{PAGE}: recipe {name}", "exec"), namespace)
    return namespace


def submit(ledger: denpyo.Ledger, channel: str, key: str, payload: Any) -> Submission:
    try:
        return ledger.submit(channel, key, payload)
    except denpyo.SubmissionError as exc:
        return exc.submission


def reconcile_when_due(ledger: denpyo.Ledger, sub: Submission) -> denpyo.WorkReport:
    """Wait for the row's next step (an ambiguous failure is verified after back-off,
    a second or so here), then run one reconcile pass."""
    row = ledger.get_by_id(sub.id)
    assert row is not None
    if row.next_attempt_at is not None:
        time.sleep(max((row.next_attempt_at - ledger.store.now()).total_seconds(), 0) + 0.05)
    return ledger.reconcile()


def crash_before_the_reply(ledger: denpyo.Ledger, sub: Submission) -> Submission:
    """The row as a worker killed mid-call leaves it: `requesting`, lease run out."""
    [expired] = ledger.store.move([Move.still_in_doubt(sub, sub.locked_by or "", 0, "killed")])
    assert expired is not None and expired.in_doubt
    return expired


def backdate_attempts(sql: SQL, backend: str, sub: Submission, hours: int) -> None:
    """Move a row's history back in time, as if its first attempt were `hours` old."""
    shifted = {
        "sqlite": f"strftime('%Y-%m-%d %H:%M:%f', at, '-{hours} hours')",
        "postgresql": f"at - interval '{hours} hours'",
        "mysql": f"at - INTERVAL {hours} HOUR",
    }[backend]
    sql(f"UPDATE denpyo_events SET at = {shifted} WHERE submission_id = {sub.id}")


# -- a payment API that honours its key for 24 hours ---------------------------------------


@pytest.fixture
def payments(ledger: denpyo.Ledger) -> Iterator[FakeProvider]:
    with FakeProvider(key_ttl=86400) as provider:
        recipe("payment", PROVIDER=provider.url, ledger=ledger)
        yield provider


def test_payment_a_lost_reply_is_resent_under_its_key_and_charged_once(
    ledger: denpyo.Ledger, payments: FakeProvider
) -> None:
    charge = submit(ledger, "charge", "order:42", {"amount": 4200, "_fault": "drop"})
    assert charge.in_doubt
    assert reconcile_when_due(ledger, charge).outcomes["synced"] == 1
    settled = ledger.get("charge", "order:42")
    assert settled is not None and settled.status is Status.SYNCED
    assert payments.accepted_ids_for(charge.idempotency_key) == [settled.remote_id]
    assert payments.stats().replayed == 1
    now = ledger.store.now()
    assert ledger.audit("charge", since=now - timedelta(hours=1), until=now).clean


def test_payment_past_the_window_a_row_in_doubt_waits_for_a_person(
    ledger: denpyo.Ledger, payments: FakeProvider, sql: SQL, backend: str
) -> None:
    charge = submit(ledger, "charge", "order:42", {"amount": 4200, "_fault": "drop"})
    backdate_attempts(sql, backend, charge, hours=25)  # the provider has forgotten the key
    reconcile_when_due(ledger, charge)
    held = ledger.get("charge", "order:42")
    assert held is not None and held.in_doubt and held.next_attempt_at is None
    assert payments.stats().requests == 1, "never charged again on the strength of the key"
    now = ledger.store.now()
    report = ledger.audit("charge", since=now - timedelta(hours=1), until=now)
    assert [d.kind for d in report.discrepancies] == [denpyo.DiscrepancyKind.NOT_SYNCED]
    assert report.discrepancies[0].submission is not None


# -- an email API with no keys, verified by a custom argument ----------------------------------


@pytest.fixture
def email(ledger: denpyo.Ledger) -> Iterator[FakeProvider]:
    with FakeProvider(key_header=None) as provider:
        recipe("email", PROVIDER=provider.url, ledger=ledger)
        yield provider


def test_email_a_lost_reply_is_found_by_its_custom_argument_and_not_sent_again(
    ledger: denpyo.Ledger, email: FakeProvider
) -> None:
    sent = submit(ledger, "invoice-email", "order:42", {"to": "a@example.com", "_fault": "drop"})
    assert sent.in_doubt
    reconcile_when_due(ledger, sent)
    settled = ledger.get("invoice-email", "order:42")
    assert settled is not None and settled.status is Status.SYNCED
    [message] = email.accepted()
    assert settled.remote_id == message["id"]
    assert message["payload"]["custom_args"] == {"denpyo_key": sent.idempotency_key}


def test_email_a_call_that_never_left_is_sent_once_after_verify(
    ledger: denpyo.Ledger, email: FakeProvider
) -> None:
    sub, _ = ledger.store.record(
        NewSubmission("invoice-email", "order:43", str(uuid.uuid4()), '{"to": "b@example.com"}'),
        actor="worker/1",
        lease=30,
    )
    crash_before_the_reply(ledger, sub)  # killed before its request left
    ledger.reconcile()
    settled = ledger.get("invoice-email", "order:43")
    assert settled is not None and settled.status is Status.SYNCED
    assert email.stats().accepted == 1


# -- a broker: NATS JetStream ------------------------------------------------------------------


@pytest.fixture
def stream() -> Iterator[str]:
    """A stream of its own, taking the recipe's subject under a fresh prefix."""
    subject = f"t{uuid.uuid4().hex[:10]}.orders.created"
    name = f"DENPYO_RECIPE_{uuid.uuid4().hex[:10]}"

    async def admin(create: bool) -> None:
        client = await nats.connect(NATS)
        try:
            js = client.jetstream()
            if create:
                await js.add_stream(StreamConfig(name=name, subjects=[subject]))
            else:
                await js.delete_stream(name)
        finally:
            await client.close()

    asyncio.run(admin(True))
    yield subject
    asyncio.run(admin(False))


def test_broker_a_crash_after_publishing_is_resent_and_jetstream_keeps_one(
    ledger: denpyo.Ledger, stream: str
) -> None:
    names = recipe("broker", NATS=NATS, ledger=ledger)
    names["order_events"].subject = stream
    sub, _ = ledger.store.record(
        NewSubmission("order-created", "order:42", str(uuid.uuid4()), '{"n": 42}'),
        actor="worker/1",
        lease=15,
    )
    first = ledger.bridge.run(names["order_events"].send(sub))  # published, then killed
    crash_before_the_reply(ledger, sub)
    ledger.reconcile()  # inside the window: resent under its key
    settled = ledger.get("order-created", "order:42")
    assert settled is not None and settled.status is Status.SYNCED
    assert settled.remote_id == first  # JetStream answered with the first copy
    assert first.endswith(":1")
