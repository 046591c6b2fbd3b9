"""The ledger's contract (SPEC §4-§6, §10), on every backend, each test on a fresh database."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import denpyo
from conftest import driver_connection
from denpyo import Backoff, Delivered, ErrorKind, NotDelivered, Status, Submission, Unknown
from denpyo.domain.moves import Move
from denpyo.errors import SubmissionNotFound
from denpyo.store.postgresql import PostgresStore

NOW = Backoff(initial=0.0, maximum=0.0)  # retries due at once, for tests


class Script:
    """A channel whose behaviour per call is scripted; it counts its calls."""

    def __init__(self, *steps: Callable[[Submission], Any]) -> None:
        self.steps = list(steps)
        self.calls: list[Submission] = []

    def __call__(self, sub: Submission) -> Any:
        self.calls.append(sub)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return step(sub)


def ok(sub: Submission) -> str:
    return f"remote-{sub.key}"


def fail(exc: BaseException) -> Callable[[Submission], Any]:
    def raise_(sub: Submission) -> Any:
        raise exc

    return raise_


SQL = Callable[[str], list[tuple[Any, ...]]]


# -- schema -----------------------------------------------------------------------------


def test_an_empty_url_is_refused_not_taken_for_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DENPYO_DATABASE_URL", raising=False)
    for url in ("", "  "):
        with pytest.raises(denpyo.InvalidDatabaseURL, match="the database URL is empty"):
            denpyo.Ledger(url)
    assert list(tmp_path.iterdir()) == []  # no ./denpyo.db


def test_migrate_twice_is_harmless(empty_url: str) -> None:
    with denpyo.Ledger(empty_url) as ledger:
        every = list(range(1, ledger.store.latest_version() + 1))
        assert ledger.migrate() == every and len(every) >= 4
        assert ledger.migrate() == []
        assert ledger.store.schema_version() == every[-1]


def test_operations_before_migrate_say_so(empty_url: str) -> None:
    with denpyo.Ledger(empty_url) as ledger:
        ledger.channel("c")(ok)
        with pytest.raises(denpyo.SchemaError, match="denpyo migrate"):
            ledger.submit("c", "k", {})


def test_status_check_constraint(ledger: denpyo.Ledger, sql: SQL) -> None:
    ledger.channel("c")(ok)
    sub = ledger.enqueue("c", "k", {})
    with pytest.raises(Exception, match=r"(?i)check|constraint"):
        sql(f"UPDATE denpyo_submissions SET status = 'sent' WHERE id = {sub.id}")
    assert ledger.get("c", "k").status is Status.REQUESTING  # type: ignore[union-attr]


# -- submit --------------------------------------------------------------------------


def test_submit_records_calls_and_settles(ledger: denpyo.Ledger) -> None:
    channel = Script(ok)
    ledger.channel("invoice-email")(channel)
    sub = ledger.submit("invoice-email", "order:42", {"to": "a@example.com"})
    assert sub.status is Status.SYNCED and sub.remote_id == "remote-order:42"
    assert sub.attempts == 1 and sub.synced_at is not None and sub.locked_by is None
    assert channel.calls[0].status is Status.REQUESTING  # recorded before the call
    kinds = [(e.kind, e.from_status, e.to_status) for e in ledger.events(sub.id)]
    assert kinds == [
        ("created", None, Status.REQUESTING),
        ("attempt", Status.REQUESTING, Status.REQUESTING),
        ("settle", Status.REQUESTING, Status.SYNCED),
    ]


def test_the_rows_writes_return_are_the_rows_as_stored(ledger: denpyo.Ledger) -> None:
    """An insert and a settle send back only what their statements computed (the id
    and times; what a settle changed) and build the rest from what was sent: each
    row returned is the row as read back, to the last field."""
    read: list[tuple[Submission, Submission | None]] = []

    def send(sub: Submission) -> str:
        read.append((sub, ledger.store.get(sub.id)))
        return "r-1"

    ledger.channel("c")(send)
    queued = ledger.enqueue("c", "queued", {"n": [1, "二"], "x": None}, ordering_key="o")
    assert queued == ledger.store.get(queued.id)
    sent = ledger.submit("c", "sent", {"n": 2})
    [(held, stored)] = read
    assert held == stored and held.locked_by is not None and held.lease is not None
    assert sent == ledger.store.get(sent.id) and sent.status is Status.SYNCED


def test_row_is_committed_before_the_call(ledger: denpyo.Ledger, db_url: str) -> None:
    seen: list[Submission | None] = []

    def look_from_another_connection(sub: Submission) -> str:
        with denpyo.Ledger(db_url) as other:
            seen.append(other.get("c", sub.key))
        return "r"

    ledger.channel("c")(look_from_another_connection)
    ledger.submit("c", "k", {})
    assert seen[0] is not None and seen[0].status is Status.REQUESTING and seen[0].in_flight


def test_same_key_never_calls_twice_once_synced_or_rejected(ledger: denpyo.Ledger) -> None:
    channel = Script(ok)
    ledger.channel("c")(channel)
    first = ledger.submit("c", "k", {"n": 1})
    again = ledger.submit("c", "k", {"n": 1})
    assert again.id == first.id and len(channel.calls) == 1

    refusing = Script(fail(denpyo.Rejected("unknown customer")))
    ledger.channel("r")(refusing)
    with pytest.raises(denpyo.SubmissionRejected) as refused:
        ledger.submit("r", "k", {})
    assert refused.value.submission.status is Status.REJECTED
    assert refused.value.submission.error_kind is ErrorKind.REJECTED
    assert "unknown customer" in (refused.value.submission.last_error or "")
    with pytest.raises(denpyo.SubmissionRejected):
        ledger.submit("r", "k", {})
    assert len(refusing.calls) == 1


def test_failed_row_is_retried_under_the_same_idempotency_key(ledger: denpyo.Ledger) -> None:
    channel = Script(fail(denpyo.Transient("HTTP 503")), ok)
    ledger.channel("c", backoff=NOW)(channel)
    with pytest.raises(denpyo.SubmissionFailed) as failed:
        ledger.submit("c", "k", {})
    assert failed.value.submission.error_kind is ErrorKind.TRANSIENT
    assert failed.value.submission.next_attempt_at is not None
    sub = ledger.submit("c", "k", {})
    assert sub.status is Status.SYNCED and sub.attempts == 2
    assert channel.calls[0].idempotency_key == channel.calls[1].idempotency_key


def test_idempotency_keys_are_unique_and_header_safe(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    keys = {ledger.enqueue("c", f"k{i}", {}).idempotency_key for i in range(50)}
    assert len(keys) == 50
    assert all(k.isascii() and k.replace("-", "").isalnum() for k in keys)


def test_same_key_with_another_payload_is_refused(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    ledger.submit("c", "k", {"amount": 10})
    with pytest.raises(denpyo.KeyReused):
        ledger.submit("c", "k", {"amount": 11})
    with pytest.raises(denpyo.KeyReused):
        ledger.enqueue("c", "k", {"amount": 11})


def test_classification(ledger: denpyo.Ledger) -> None:
    ledger.channel("timeout")(Script(fail(TimeoutError("read timed out"))))
    with pytest.raises(denpyo.SubmissionInDoubt) as doubt:
        ledger.submit("timeout", "k", {})
    sub = doubt.value.submission
    assert (sub.status, sub.error_kind, sub.in_doubt) == (Status.FAILED, ErrorKind.AMBIGUOUS, True)
    assert "read timed out" in (sub.last_error or "")

    def classify(exc: BaseException) -> denpyo.Outcome | None:
        if isinstance(exc, TimeoutError):
            return denpyo.Outcome(denpyo.OutcomeKind.TRANSIENT, error="connect timeout")
        return None

    ledger.channel("custom", classify=classify)(Script(fail(TimeoutError())))
    with pytest.raises(denpyo.SubmissionFailed) as failed:
        ledger.submit("custom", "k", {})
    assert failed.value.submission.error_kind is ErrorKind.TRANSIENT
    assert failed.value.submission.last_error == "connect timeout"


def test_a_sync_call_that_could_not_start_is_transient_not_in_doubt(
    ledger: denpyo.Ledger,
) -> None:
    """The call threads are shut down (the ledger is closing) before a sync channel
    could start: nothing left, so the row is known not sent, not in doubt."""
    calls = Script(ok)
    ledger.channel("c")(calls)

    async def main() -> None:
        ledger.async_runner()
        assert ledger._calls is not None
        ledger._calls.shutdown()
        with pytest.raises(denpyo.SubmissionFailed) as caught:
            await ledger.asubmit("c", "k", {})
        row = caught.value.submission
        assert (row.status, row.error_kind, row.in_doubt) == (
            Status.FAILED,
            ErrorKind.TRANSIENT,
            False,
        )
        assert "cannot schedule new futures after shutdown" in (row.last_error or "")

    asyncio.run(main())
    assert calls.calls == []


def test_timeout_after_acceptance_is_verified_not_resent(ledger: denpyo.Ledger) -> None:
    delivered: dict[str, str] = {}

    def accepts_then_times_out(sub: Submission) -> str:
        delivered[sub.idempotency_key] = "remote-1"
        raise TimeoutError("no reply within 10s")

    def lookup(sub: Submission) -> denpyo.Verdict:
        found = delivered.get(sub.idempotency_key)
        return Delivered(found) if found else NotDelivered()

    channel = Script(accepts_then_times_out)
    ledger.channel("c", verify=lookup, backoff=NOW)(channel)
    with pytest.raises(denpyo.SubmissionInDoubt):
        ledger.submit("c", "k", {})
    ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.SYNCED and sub.remote_id == "remote-1"
    assert len(channel.calls) == 1
    assert [e.kind for e in ledger.events(sub.id)][-1] == "verify"


def test_async_channels_from_sync_and_sync_channels_from_async(ledger: denpyo.Ledger) -> None:
    async def async_send(sub: Submission) -> str:
        await asyncio.sleep(0)
        return "a"

    ledger.channel("async")(async_send)
    ledger.channel("sync")(ok)
    assert ledger.submit("async", "k", {}).remote_id == "a"

    async def main() -> tuple[Submission, Submission]:
        return (
            await ledger.asubmit("sync", "k", {}),
            await ledger.asubmit("async", "k2", {}),
        )

    from_sync, from_async = asyncio.run(main())
    assert from_sync.remote_id == "remote-k" and from_async.remote_id == "a"


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "key", "payload", "error"),
    [
        ("nope", "k", {}, denpyo.UnknownChannel),
        ("c", "k", {"when": object()}, denpyo.PayloadNotJSON),
        ("c", "k", {"blob": "x" * (1024 * 1024)}, denpyo.PayloadTooLarge),
        ("c", "k" * 256, {}, denpyo.InvalidKey),
        ("c", "", {}, denpyo.InvalidKey),
    ],
)
def test_bad_input_writes_nothing(
    ledger: denpyo.Ledger, sql: SQL, channel: str, key: str, payload: Any, error: type[Exception]
) -> None:
    calls = Script(ok)
    ledger.channel("c")(calls)
    with pytest.raises(error):
        ledger.submit(channel, key, payload)
    with pytest.raises(error):
        ledger.enqueue(channel, key, payload)
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)] and calls.calls == []


def nested(depth: int) -> list[Any]:
    """Arrays `depth` levels deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("key", "payload", "ordering_key", "error"),
    [
        ("k", {"to": "\ud800"}, None, denpyo.PayloadNotJSON),
        ("k", {"\udfff": "a lone surrogate as a field name"}, None, denpyo.PayloadNotJSON),
        ("k", {"to": "a\x00b"}, None, denpyo.PayloadNotJSON),
        ("k", nested(100_000), None, denpyo.PayloadNotJSON),
        ("k", nested(32), None, denpyo.PayloadNotJSON),
        ("\ud800", {}, None, denpyo.InvalidKey),
        ("k", {}, "\udfff", denpyo.InvalidKey),
    ],
    ids=["surrogate", "surrogate-name", "nul", "deep-100000", "deep-32", "key", "ordering-key"],
)
def test_text_no_database_can_store_is_refused_by_every_entry_and_writes_nothing(
    ledger: denpyo.Ledger,
    sql: SQL,
    key: str,
    payload: Any,
    ordering_key: str | None,
    error: type[Exception],
) -> None:
    """Lone surrogates, NUL and nesting past what every database keeps are the
    package's own errors, never a driver's UnicodeEncodeError or a RecursionError."""
    calls = Script(ok)
    ledger.channel("c")(calls)
    entries: list[Callable[[], Any]] = [
        lambda: ledger.submit("c", key, payload, ordering_key=ordering_key),
        lambda: ledger.enqueue("c", key, payload, ordering_key=ordering_key),
        lambda: ledger.enqueue_many("c", [("first", {}), (key, payload, ordering_key)]),
        lambda: asyncio.run(ledger.asubmit("c", key, payload, ordering_key=ordering_key)),
        lambda: asyncio.run(ledger.aenqueue("c", key, payload, ordering_key=ordering_key)),
    ]
    for entry in entries:
        with pytest.raises(error):
            entry()
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)] and calls.calls == []


def test_payloads_up_to_the_nesting_limit_are_kept_and_read_back(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    deepest = nested(31)
    text = {"escaped": "\\u0000 is text here, not a NUL", "é": "\U0001f600"}
    assert ledger.enqueue("c", "deep", deepest).payload == deepest
    assert ledger.enqueue("c", "text", text).payload == text
    assert ledger.get("c", "deep").payload == deepest  # type: ignore[union-attr]
    assert ledger.get("c", "text").payload == text  # type: ignore[union-attr]


def test_an_outcome_whose_text_no_database_can_store_is_still_recorded(
    ledger: denpyo.Ledger,
) -> None:
    """An exception's message or a remote id holding a NUL or a lone surrogate is
    written escaped: the store refused the whole settle, and the outcome was lost."""
    outcomes: dict[str, Callable[[Submission], Any]] = {
        "transient": fail(denpyo.Transient("503 \x00 from the proxy")),
        "ambiguous": fail(RuntimeError("reply cut at \udcff")),
        "synced": lambda sub: "msg_\ud800\x00",
    }
    ledger.channel("c", idempotent=True)(lambda sub: outcomes[sub.key](sub))
    for key in outcomes:
        with contextlib.suppress(denpyo.SubmissionError):
            ledger.submit("c", key, {})
    rows = {key: ledger.get("c", key) for key in outcomes}
    assert {k: (r.status, r.error_kind) for k, r in rows.items() if r} == {
        "transient": (Status.FAILED, ErrorKind.TRANSIENT),
        "ambiguous": (Status.FAILED, ErrorKind.AMBIGUOUS),
        "synced": (Status.SYNCED, None),
    }
    assert rows["transient"].last_error == "Transient: 503 \\x00 from the proxy"  # type: ignore[union-attr]
    assert rows["ambiguous"].last_error == "RuntimeError: reply cut at \\udcff"  # type: ignore[union-attr]
    assert rows["synced"].remote_id == "msg_\\ud800\\x00"  # type: ignore[union-attr]


def test_disallowed_move_raises_and_writes_nothing(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    sub = ledger.submit("c", "k", {})
    with pytest.raises(denpyo.TransitionNotAllowed):
        ledger.store.move([denpyo.domain.moves.Move(sub.id, Status.SYNCED, Status.FAILED, "x")])
    assert ledger.get("c", "k") == sub


def test_compare_and_set_loses_when_the_row_moved(ledger: denpyo.Ledger) -> None:
    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)
    sub = ledger.enqueue("c", "k", {})
    [claimed] = ledger.store.claim("c", holder="w1", limit=5, lease=60)
    assert claimed.locked_by == "w1" and claimed.attempts == 1
    assert ledger.store.claim("c", holder="w2", limit=5, lease=60) == []
    wrong_holder = Move(sub.id, Status.REQUESTING, Status.SYNCED, "w2", holder="w2")
    wrong_status = Move(sub.id, Status.FAILED, Status.SYNCED, "w1", holder="w1")
    assert ledger.store.move([wrong_holder, wrong_status]) == [None, None]
    right = Move(sub.id, Status.REQUESTING, Status.SYNCED, "w1", holder="w1", event="x")
    [moved] = ledger.store.move([right])
    assert moved is not None and moved.status is Status.SYNCED
    assert ledger.store.move([right]) == [None]  # a second settle of the same row loses


def test_a_batch_of_moves_answers_each_in_its_place(ledger: denpyo.Ledger) -> None:
    """Winners and losers mixed in one batch: each move gets its own row back (or None),
    in the order given, and only the winners write their event."""
    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)
    ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(5)])
    claimed = ledger.store.claim("c", holder="w", limit=5, lease=60)
    assert len(claimed) == 5

    def settle(sub: Submission, holder: str) -> Move:
        return Move(sub.id, Status.REQUESTING, Status.SYNCED, holder, holder=holder,
                    event="settle", remote_id=f"r-{sub.key}")  # fmt: skip

    holders = ["w", "thief", "w", "thief", "w"]
    results = ledger.store.move([settle(s, h) for s, h in zip(claimed, holders, strict=True)])
    for sub, holder, result in zip(claimed, holders, results, strict=True):
        if holder == "thief":
            assert result is None
            assert [e.kind for e in ledger.store.events(sub.id)] == ["created", "attempt"]
        else:
            assert result is not None and result.id == sub.id and result.payload == sub.payload
            assert result.status is Status.SYNCED and result.remote_id == f"r-{sub.key}"
            assert [e.kind for e in ledger.store.events(sub.id)] == [
                "created", "attempt", "settle",
            ]  # fmt: skip


def _move_paths(ledger: denpyo.Ledger) -> list[Callable[[list[Any]], list[Submission | None]]]:
    """The ways moves reach the database: the store, and the worker's async form
    (on its event loop where the driver has one: PostgreSQL)."""

    async def natively(batch: list[Any]) -> list[Submission | None]:
        native = ledger.store.async_ops(db)
        await native.open()
        try:
            return await native.move(batch)
        finally:
            await native.close()

    db = ThreadPoolExecutor(1)
    return [ledger.store.move, lambda batch: asyncio.run(natively(batch))]


def test_a_moved_row_takes_its_payload_from_the_mover_when_it_has_it(
    ledger: denpyo.Ledger,
) -> None:
    """A move never changes the payload: given the row as the mover read it, the
    store hands back that payload instead of reading it again (the worker's settles);
    without it, the stored payload is read. Alone or in a batch, by every path."""
    import dataclasses

    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)

    def settle(sub: Submission, row: Submission | None) -> Move:
        return Move(sub.id, Status.REQUESTING, Status.SYNCED, sub.locked_by or "",
                    holder=sub.locked_by, event="settle", row=row)  # fmt: skip

    for n, apply in enumerate(_move_paths(ledger)):
        ledger.enqueue_many("c", [(f"p{n}-{i}", {"i": i}) for i in range(3)])
        claimed = ledger.store.claim("c", holder=f"w{n}", limit=3, lease=60)
        as_read = [dataclasses.replace(sub, payload={"as read by": sub.key}) for sub in claimed]

        alone = apply([settle(claimed[0], as_read[0])])
        together = apply([settle(claimed[1], as_read[1]), settle(claimed[2], None)])
        got = [sub.payload if sub else None for sub in [*alone, *together]]
        assert got == [{"as read by": f"p{n}-0"}, {"as read by": f"p{n}-1"}, {"i": 2}]
        stored = [ledger.get("c", sub.key) for sub in claimed]
        assert [sub.payload if sub else None for sub in stored] == [{"i": 0}, {"i": 1}, {"i": 2}]
    if isinstance(ledger.store, PostgresStore):  # and the server does not send it back
        from denpyo.store.postgresql import _statements

        ledger.enqueue_many("c", [(f"q{i}", {"i": i}) for i in range(3)])
        held = ledger.store.claim("c", holder="w", limit=3, lease=60)
        note = dataclasses.replace(settle(held[0], held[0]), event="note")
        moves = [[note], [settle(held[1], held[1]), settle(held[2], None)]]
        statements = [statement for batch in moves for statement, _ in _statements(batch)]
        assert [query for query, _ in statements] == [
            "submission_move_one",
            "submission_move_batch",
        ]
        with ledger.store.transaction() as tx:
            rows = [row for query, params in statements for row in tx.fetch_all(query, params)]
        payloads = {row["id"]: row["payload"] for row in rows}
        assert payloads == {held[0].id: None, held[1].id: None, held[2].id: {"i": 2}}


def test_ended_attempts_are_recorded_alike_by_every_statement(ledger: denpyo.Ledger) -> None:
    """A settle (`Settle`) goes by a statement of its own, leaner than a move's: every
    outcome, and a settle whose lease was lost, ends with the same row, the same
    returned row and the same event as the same change written as a general `Move`,
    by every path."""
    import dataclasses

    from denpyo.domain.moves import Settle
    from denpyo.domain.policy import AttemptDecision

    ledger.channel("c")(ok)
    outcomes = [
        AttemptDecision(Status.SYNCED, remote_id="r-1"),
        AttemptDecision(Status.FAILED, ErrorKind.TRANSIENT, "HTTP 503", retry_in=30),
        AttemptDecision(Status.REJECTED, ErrorKind.REJECTED, "HTTP 422: no such customer"),
        AttemptDecision(Status.FAILED, ErrorKind.AMBIGUOUS, "read timed out", retry_in=5),
        AttemptDecision(Status.SYNCED),
    ]
    lost = len(outcomes)  # one more row, whose lease another worker took

    def shape(sub: Submission | None) -> tuple[Any, ...] | None:
        if sub is None:
            return None
        return (sub.status, sub.attempts, sub.locked_by, sub.locked_until, sub.remote_id,
                sub.last_error, sub.error_kind, sub.resolution, sub.in_doubt, sub.payload,
                sub.next_attempt_at is None, sub.synced_at is None,
                sub.updated_at is None)  # fmt: skip

    seen: list[Any] = []
    for n, apply in enumerate(_move_paths(ledger)):
        for known in (True, False):
            prefix = f"{n}-{known}-"
            ledger.enqueue_many("c", [(f"{prefix}{i}", {"i": i}) for i in range(lost + 1)])
            held = ledger.store.claim("c", holder="claimer", limit=lost + 1, lease=60)
            held[lost] = dataclasses.replace(held[lost], locked_by="someone else")
            settles = [
                Settle.of(sub, "w", outcome, duration_ms=12)
                for sub, outcome in zip(held, [*outcomes, outcomes[0]], strict=True)
            ]
            changes: list[Any] = settles if known else [s.as_move() for s in settles]
            returned = apply(changes)
            stored = [ledger.get("c", sub.key) for sub in held]
            events = [
                [(e.kind, e.from_status, e.to_status, e.attempt, e.actor, e.detail, e.duration_ms)
                 for e in ledger.events(sub.id)]
                for sub in held
            ]  # fmt: skip
            assert returned[lost] is None and stored[lost] is not None
            assert stored[lost].status is Status.REQUESTING and stored[lost].locked_by == "claimer"
            returned, stored = returned[:lost], stored[:lost]
            assert [shape(sub) for sub in returned] == [shape(sub) for sub in stored]
            seen.append(([shape(sub) for sub in returned], events))
    for case in seen:
        assert case == seen[0]
    assert [row[0] for row in seen[0][0]] == [outcome.status for outcome in outcomes]
    assert seen[0][1][0][-1] == ("settle", Status.REQUESTING, Status.SYNCED, 1, "w", "r-1", 12)
    assert [kind for kind, *_ in seen[0][1][lost]] == ["created", "attempt"]


def test_a_batch_naming_a_row_twice_applies_its_moves_in_order(ledger: denpyo.Ledger) -> None:
    """Each move sees the one before it, through the store and, where the worker
    runs its claims and settles on its event loop (PostgreSQL), through that path."""
    from denpyo.domain.moves import Move

    ledger.channel("c")(ok)

    def moves(row_id: int) -> list[Move]:
        return [
            Move(row_id, Status.REQUESTING, Status.FAILED, "w1", holder="w1",
                 event="settle", retry_in=0, error_kind=denpyo.ErrorKind.TRANSIENT,
                 last_error="HTTP 503"),
            Move(row_id, Status.FAILED, Status.REQUESTING, "w2", event="attempt",
                 new_holder="w2", lease=60, attempt_delta=1, keep_error=True),
        ]  # fmt: skip

    for n, apply in enumerate(_move_paths(ledger)):
        ledger.enqueue("c", f"k{n}", {})
        [claimed] = ledger.store.claim("c", holder="w1", limit=5, lease=60)
        failed, retaken = apply(moves(claimed.id))
        assert failed is not None and failed.status is Status.FAILED
        assert retaken is not None and retaken.status is Status.REQUESTING
        assert retaken.attempts == 2 and retaken.locked_by == "w2"
        assert retaken.last_error == "HTTP 503"
        kinds = [event.kind for event in ledger.events(claimed.id)]
        assert kinds == ["created", "attempt", "settle", "attempt"]


# -- enqueue in the caller's transaction ---------------------------------------------------


def test_enqueue_joins_a_driver_transaction(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    ledger.channel("c")(ok)
    conn = driver_connection(backend, db_url)
    try:
        ledger.enqueue("c", "rolled-back", {}, conn=conn)
        conn.rollback()
        ledger.enqueue("c", "committed", {}, conn=conn)
        conn.commit()
    finally:
        conn.close()
    assert ledger.get("c", "rolled-back") is None
    assert ledger.get("c", "committed") is not None


def _sqlalchemy_url(backend: str, db_url: str) -> str:
    return {
        "sqlite": db_url,
        "postgresql": db_url.replace("postgresql://", "postgresql+psycopg://"),
        "mysql": db_url.replace("mysql://", "mysql+pymysql://"),
    }[backend]


def test_enqueue_joins_a_sqlalchemy_connection_and_session(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    ledger.channel("c")(ok)
    engine = sqlalchemy.create_engine(_sqlalchemy_url(backend, db_url))
    try:
        with engine.connect() as conn:
            with conn.begin() as tx:
                ledger.enqueue("c", "conn-rolled-back", {}, conn=conn)
                tx.rollback()
            with conn.begin():
                ledger.enqueue("c", "conn-committed", {}, conn=conn)
        with Session(engine) as session:
            ledger.enqueue("c", "session-rolled-back", {}, conn=session)
            session.rollback()
            ledger.enqueue("c", "session-committed", {}, conn=session)
            session.commit()
    finally:
        engine.dispose()
    assert ledger.get("c", "conn-rolled-back") is None
    assert ledger.get("c", "session-rolled-back") is None
    assert ledger.get("c", "conn-committed") is not None
    assert ledger.get("c", "session-committed") is not None


def test_enqueue_refuses_a_supersedes_that_names_no_row_of_its_channel(
    ledger: denpyo.Ledger, backend: str, db_url: str
) -> None:
    """Checked before the insert: a caller's sqlite3 connection enforces no foreign
    key, and on PostgreSQL the violation would abort the caller's own transaction."""
    ledger.channel("c")(ok)
    ledger.channel("other")(ok)
    elsewhere = ledger.enqueue("other", "o", {})
    conn = driver_connection(backend, db_url)
    try:
        with pytest.raises(SubmissionNotFound, match="supersedes=99999"):
            ledger.enqueue("c", "k", {}, conn=conn, supersedes=99999)
        with pytest.raises(denpyo.InvalidInput, match="of channel 'other'"):
            ledger.enqueue("c", "k", {}, conn=conn, supersedes=elsewhere.id)
        after = ledger.enqueue("c", "after", {}, conn=conn)  # the caller's transaction goes on
        # A row the caller's transaction wrote, not yet committed, may be superseded in it.
        assert ledger.enqueue("c", "later", {}, conn=conn, supersedes=after.id).supersedes
        conn.commit()
    finally:
        conn.close()
    assert ledger.get("c", "k") is None and ledger.get("c", "after") is not None
    old = ledger.enqueue("c", "old", {})
    assert ledger.enqueue("c", "new", {}, supersedes=old.id).supersedes == old.id


def test_enqueue_refuses_a_connection_of_another_database(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    with pytest.raises(denpyo.ConfigurationError, match="conn must be"):
        ledger.enqueue("c", "k", {}, conn=object())


# -- work and reconcile --------------------------------------------------------------------


def test_work_sends_enqueued_rows_and_retries_due_failures(ledger: denpyo.Ledger) -> None:
    flaky = Script(fail(denpyo.Transient("503")), ok)
    ledger.channel("c", backoff=NOW)(flaky)
    for i in range(5):
        ledger.enqueue("c", f"k{i}", {"i": i})
    report = ledger.work(until_idle=True, poll_interval=0.01)
    assert report.outcomes["synced"] == 5 and report.outcomes["failed"] == 1
    statuses = {ledger.get("c", f"k{i}").status for i in range(5)}  # type: ignore[union-attr]
    assert statuses == {Status.SYNCED}


def test_exhausted_attempts_stay_failed_with_an_alert(ledger: denpyo.Ledger) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    always = Script(fail(denpyo.Transient("HTTP 503")))
    ledger.channel("c", backoff=NOW, max_attempts=3)(always)
    ledger.enqueue("c", "k", {})
    ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.FAILED and sub.attempts == 3
    assert sub.next_attempt_at is None and sub.is_exhausted
    assert len(always.calls) == 3
    assert [a.reason for a in alerts] == ["exhausted"] and alerts[0].submission.id == sub.id
    assert "c:k" in str(alerts[0])


def test_in_doubt_without_verify_is_never_resent(ledger: denpyo.Ledger) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    channel = Script(fail(ConnectionResetError("dropped mid-reply")))
    ledger.channel("c", backoff=NOW)(channel)
    ledger.enqueue("c", "k", {})
    for _ in range(3):
        ledger.work(until_idle=True, poll_interval=0.01)
        ledger.reconcile()
    sub = ledger.get("c", "k")
    assert sub is not None and sub.in_doubt and sub.next_attempt_at is None
    assert len(channel.calls) == 1
    assert [a.reason for a in alerts] == ["in_doubt"]


def test_idempotent_channel_resends_in_doubt_rows(ledger: denpyo.Ledger) -> None:
    channel = Script(fail(ConnectionResetError("dropped")), ok)
    ledger.channel("c", idempotent=True, backoff=NOW)(channel)
    ledger.enqueue("c", "k", {})
    ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is Status.SYNCED and len(channel.calls) == 2
    assert channel.calls[0].idempotency_key == channel.calls[1].idempotency_key


def _expire_lease(ledger: denpyo.Ledger, sub: Submission) -> None:
    """What a crash leaves: `requesting`, held by a sender that is gone, lease run out."""
    from denpyo.domain.moves import Move

    [moved] = ledger.store.move(
        [Move(sub.id, Status.REQUESTING, Status.REQUESTING, "dead", holder=sub.locked_by,
              new_holder=sub.locked_by, lease=0, retry_in=0, keep_error=True)]
    )  # fmt: skip
    assert moved is not None and moved.in_doubt


@pytest.mark.parametrize(
    ("verdict", "status", "calls"),
    [
        (Delivered("remote-x"), Status.SYNCED, 0),
        (NotDelivered(), Status.SYNCED, 1),
        (Unknown("lookup said 503"), Status.REQUESTING, 0),
    ],
)
def test_reconcile_settles_expired_leases_by_verdict(
    ledger: denpyo.Ledger, verdict: denpyo.Verdict, status: Status, calls: int
) -> None:
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    channel = Script(ok)
    ledger.channel("c", verify=lambda sub: verdict)(channel)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="crashed-worker", limit=1, lease=60)
    _expire_lease(ledger, held)
    report = ledger.reconcile()
    assert report.reconciled == 1
    sub = ledger.get("c", "k")
    assert sub is not None and sub.status is status and len(channel.calls) == calls
    if isinstance(verdict, Unknown):
        assert sub.in_doubt and sub.next_attempt_at is not None
        assert [a.reason for a in alerts] == ["in_doubt"] and "503" in alerts[0].message
    if isinstance(verdict, Delivered):
        assert sub.remote_id == "remote-x"


def test_a_verify_that_finds_the_call_names_its_remote_id_in_the_event(
    ledger: denpyo.Ledger,
) -> None:
    ledger.channel("c", verify=lambda sub: Delivered("remote-found"))(ok)
    ledger.enqueue("c", "k", {})
    [held] = ledger.store.claim("c", holder="crashed-worker", limit=1, lease=60)
    _expire_lease(ledger, held)
    assert ledger.reconcile().reconciled == 1
    [verify] = [e for e in ledger.events(held.id) if e.kind == "verify"]
    assert verify.to_status is Status.SYNCED
    assert verify.detail == "verify: delivered, remote id remote-found"


def test_live_leases_are_left_alone(ledger: denpyo.Ledger) -> None:
    ledger.channel("c", verify=lambda sub: NotDelivered())(ok)
    ledger.enqueue("c", "k", {})
    ledger.store.claim("c", holder="busy-worker", limit=1, lease=60)
    assert ledger.reconcile().reconciled == 0
    assert ledger.work(until_idle=True, poll_interval=0.01).attempted == 0


def test_ordering_key_sends_one_at_a_time_in_order(ledger: denpyo.Ledger) -> None:
    order: list[str] = []

    async def record(sub: Submission) -> str:
        order.append(sub.key)
        await asyncio.sleep(0.01)
        return "r"

    ledger.channel("c")(record)
    for i in range(6):
        ledger.enqueue("c", f"a{i}", {}, ordering_key="customer:a")
    claimed = ledger.store.claim("c", holder="w", limit=10, lease=60)
    assert [s.key for s in claimed] == ["a0"]  # followers wait for their head
    ledger.store.move(
        [denpyo.domain.moves.Move(claimed[0].id, Status.REQUESTING, Status.REQUESTING, "w",
                                  holder="w", attempt_delta=-1, retry_in=0)]
    )  # fmt: skip
    ledger.work(until_idle=True, poll_interval=0.01)
    assert order == [f"a{i}" for i in range(6)]


def test_an_inline_submit_behind_an_open_row_of_its_ordering_key_waits_its_turn(
    ledger: denpyo.Ledger,
) -> None:
    sent: list[str] = []
    ledger.channel("c")(lambda sub: sent.append(sub.key) or "r")
    ledger.enqueue("c", "a0", {}, ordering_key="customer:a")  # the head, for a worker
    follower = ledger.submit("c", "a1", {}, ordering_key="customer:a")
    assert sent == [] and follower.status is Status.REQUESTING and follower.attempts == 0
    assert [e.kind for e in ledger.events(follower.id)][-1] == "released"
    assert ledger.submit("c", "b0", {}, ordering_key="customer:b").status is Status.SYNCED
    ledger.work(until_idle=True, poll_interval=0.01)
    assert sent == ["b0", "a0", "a1"]


def test_a_failed_row_submitted_again_behind_an_open_one_is_left_to_the_worker(
    ledger: denpyo.Ledger,
) -> None:
    sent: list[str] = []
    ledger.channel("c")(lambda sub: sent.append(sub.key) or "r")
    ledger.enqueue("c", "head", {}, ordering_key="k")
    failed = ledger.enqueue("c", "next", {}, ordering_key="k")
    ledger.store.move([Move.claim(failed.id, Status.REQUESTING, "w", 60, verify=False)])
    ledger.store.move(
        [
            Move(
                failed.id,
                Status.REQUESTING,
                Status.FAILED,
                "w",
                holder="w",
                error_kind=ErrorKind.TRANSIENT,
                last_error="HTTP 503",
                retry_in=0,
            )
        ]
    )  # a failure the head's order would have prevented (a race), made here
    with pytest.raises(denpyo.SubmissionFailed):
        ledger.submit("c", "next", {}, ordering_key="k")
    assert sent == []
    ledger.work(until_idle=True, poll_interval=0.01)
    assert sent == ["head", "next"]


def test_honest_counts_after_a_mixed_run(ledger: denpyo.Ledger, sql: SQL) -> None:
    """COUNT(*) WHERE status = 'synced' equals what the provider accepted."""
    accepted: Counter[str] = Counter()

    def provider(sub: Submission) -> str:
        n = int(sub.key.split(":")[1])
        if n % 7 == 0:
            raise denpyo.Rejected("invalid address")
        if n % 3 == 0 and sub.attempts == 1:
            raise denpyo.Transient("HTTP 503")
        if n % 5 == 0 and sub.attempts == 1:
            accepted[sub.idempotency_key] += 1
            raise TimeoutError("accepted, then the reply was lost")
        accepted[sub.idempotency_key] += 1
        return f"r{n}"

    def lookup(sub: Submission) -> denpyo.Verdict:
        return Delivered() if accepted[sub.idempotency_key] else NotDelivered()

    ledger.channel("email", verify=lookup, backoff=NOW)(provider)
    for n in range(1, 101):
        ledger.enqueue("email", f"order:{n}", {"n": n})
    ledger.work(until_idle=True, poll_interval=0.01)
    synced = sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'")
    rejected = sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'rejected'")
    assert synced[0][0] == len(accepted) == 100 - 14
    assert rejected[0][0] == 14
    assert max(accepted.values()) == 1  # no double effect
    pending = sql(
        "SELECT COUNT(*) FROM denpyo_submissions WHERE status IN ('failed', 'requesting')"
    )
    assert pending[0][0] == 0


def test_two_processes_migrating_at_once(empty_url: str) -> None:
    import subprocess
    import sys

    script = "import sys, denpyo; print(denpyo.Ledger(sys.argv[1]).migrate())"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, empty_url], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = sorted(child.communicate(timeout=120)[0].strip() for child in children)
    assert [child.returncode for child in children] == [0, 0, 0]
    with denpyo.Ledger(empty_url) as ledger:
        every = list(range(1, ledger.store.latest_version() + 1))
        assert outputs == [str(every), "[]", "[]"]  # exactly one applied it
        assert ledger.store.schema_version() == every[-1]


def test_enqueue_many(ledger: denpyo.Ledger, sql: SQL) -> None:
    ledger.channel("c")(ok)
    assert ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(500)]) == 500
    assert ledger.enqueue_many("c", [("k1", {"i": 1}), ("k500", {"i": 500}, "group")]) == 1
    with pytest.raises(denpyo.KeyReused):
        ledger.enqueue_many("c", [("k501", {}), ("k2", {"i": "changed"})])
    assert ledger.get("c", "k501") is None  # all or nothing
    with pytest.raises(denpyo.InvalidKey):
        ledger.enqueue_many("c", [("ok", {}), ("", {})])
    with pytest.raises(denpyo.InvalidInput, match="twice"):
        ledger.enqueue_many("c", [("dup", {}), ("dup", {})])
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(501,)]
    assert sql("SELECT COUNT(*) FROM denpyo_events WHERE kind = 'created'") == [(501,)]
    assert ledger.get("c", "k500").ordering_key == "group"  # type: ignore[union-attr]
    assert ledger.work(until_idle=True, poll_interval=0.01).outcomes["synced"] == 501


def test_enqueue_many_writes_nothing_when_a_late_item_is_bad(
    ledger: denpyo.Ledger, sql: SQL, backend: str
) -> None:
    """Rows are written while later ones are still being checked (PostgreSQL sends
    them in chunks): a bad item after several chunks leaves no row at all, in the
    ledger's transaction, and in the caller's once the caller rolls back."""
    ledger.channel("c")(ok)
    ledger.enqueue("c", "known", {"v": 1})

    n = 3500 if backend == "postgresql" else 300  # PostgreSQL: several chunks of 1,000

    def items(bad: tuple[str, Any]) -> Iterator[tuple[str, Any]]:
        yield from ((f"k{i}", {"i": i}) for i in range(n))
        yield bad
        yield ("after", {})

    for bad, error in (
        (("", {}), denpyo.InvalidKey),
        (("big", {"x": "y" * 2_000_000}), denpyo.PayloadTooLarge),
        (("known", {"v": 2}), denpyo.KeyReused),
    ):
        with pytest.raises(error):
            ledger.enqueue_many("c", items(bad))
        conn = driver_connection(backend, ledger.url)
        try:
            with pytest.raises(error):
                ledger.enqueue_many("c", items(bad), conn=conn)
            conn.rollback()
        finally:
            conn.close()
        assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(1,)]
        assert sql("SELECT COUNT(*) FROM denpyo_events") == [(1,)]
    assert ledger.enqueue_many("c", items(("known", {"v": 1}))) == n + 1


def test_a_bulk_enqueue_in_the_callers_transaction_commits_with_it_and_wakes_at_commit(
    postgres_url: str,
) -> None:
    """PostgreSQL copies a batch of `COPY_FROM` rows or more in, under a savepoint of
    the caller's transaction: nothing is seen or heard before the commit, a rollback
    leaves nothing, a row the caller wrote before keeps its history, a bad item
    leaves the caller's transaction usable, and an autocommit connection works too."""
    import psycopg

    from denpyo.store.postgresql import COPY_FROM

    n = 300
    assert n >= COPY_FROM
    batch = [(f"k{i}", {"i": i}) for i in range(n)]
    with (
        denpyo.Ledger(postgres_url) as ledger,
        psycopg.connect(postgres_url, autocommit=True) as listener,
        psycopg.connect(postgres_url) as conn,
    ):
        ledger.channel("c")(ok)
        listener.execute("LISTEN denpyo")
        ledger.enqueue("c", "before", {}, conn=conn)
        assert ledger.enqueue_many("c", batch, conn=conn) == n
        assert ledger.get("c", "k1") is None
        conn.rollback()
        assert ledger.get("c", "before") is None and ledger.get("c", "k1") is None
        assert list(listener.notifies(timeout=0.3)) == []

        ledger.enqueue("c", "before", {}, conn=conn)
        assert ledger.enqueue_many("c", batch, conn=conn) == n
        assert list(listener.notifies(timeout=0.3)) == []
        conn.commit()
        assert [note.payload for note in listener.notifies(timeout=5, stop_after=1)] == ["c"]
        assert ledger.enqueue_many("c", [*batch[n // 2 :], ("new", {})], conn=conn) == 1
        conn.commit()

        def late_bad() -> Iterator[tuple[str, Any]]:
            yield from ((f"late{i}", {}) for i in range(2 * n))
            yield ("", {})

        ledger.enqueue("c", "kept", {}, conn=conn)
        with pytest.raises(denpyo.InvalidKey):
            ledger.enqueue_many("c", late_bad(), conn=conn)
        conn.commit()  # the caller's own write survives; none of the batch's rows
        assert ledger.get("c", "kept") is not None and ledger.get("c", "late0") is None

        with psycopg.connect(postgres_url, autocommit=True) as auto:
            assert ledger.enqueue_many("c", [(f"a{i}", {}) for i in range(n)], conn=auto) == n
        rows = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT e.submission_id), MIN(s.attempts),"
            " MAX(s.attempts) FROM denpyo_submissions s"
            " JOIN denpyo_events e ON e.submission_id = s.id AND e.kind = 'created'"
        ).fetchone()
        conn.rollback()
    assert rows == (2 * n + 3, 2 * n + 3, 0, 0)


def test_a_bulk_enqueue_finds_its_copied_rows_by_primary_key(postgres_url: str) -> None:
    """The statement that writes the events of copied rows reads them by a range of
    the primary key, in a custom plan and in a generic one, on a table that has no
    statistics (never analysed)."""
    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c")(ok)
        assert ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(5000)]) == 5000
        first, last = ledger.get("c", "k0"), ledger.get("c", "k4999")
        assert first is not None and last is not None
        store = ledger.store
        assert isinstance(store, PostgresStore)
        query = store.queries["submission_record_copied"]
        with store.pool.connection() as conn:
            params = {"first": first.idempotency_key, "last": last.idempotency_key, "actor": "x"}
            custom = "\n".join(
                row["QUERY PLAN"] for row in conn.execute(f"EXPLAIN {query}", params)
            )
            prepared, nulls = _as_prepared(query)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.execute(f"PREPARE copied_plan AS {prepared}")
            generic = "\n".join(
                row["QUERY PLAN"]
                for row in conn.execute(f"EXPLAIN EXECUTE copied_plan {nulls}").fetchall()
            )
            conn.execute("DEALLOCATE copied_plan")
            conn.execute("RESET plan_cache_mode")
    for plan in (custom, generic):
        assert "on denpyo_submissions_pkey" in plan and "Seq Scan" not in plan, plan


def test_printed_ddl_builds_the_same_schema(empty_url: str, backend: str) -> None:
    """Users who run their own migrations apply `denpyo sql`; migrate then has nothing to do."""
    from denpyo.store.queries import ddl, split_statements

    conn = driver_connection(backend, empty_url)
    try:
        cursor = conn.cursor()
        script = ddl(backend)
        # PostgreSQL takes the script whole (it has function bodies); the others by statement.
        for statement in [script] if backend == "postgresql" else split_statements(script):
            cursor.execute(statement)
        conn.commit()
    finally:
        conn.close()
    with denpyo.Ledger(empty_url) as ledger:
        assert ledger.migrate() == []
        ledger.channel("c")(ok)
        assert ledger.submit("c", "k", {}).status is Status.SYNCED


def test_running_counts_match_the_rows(postgres_url: str) -> None:
    """PostgreSQL's counts by status come from triggers; they must equal COUNT(*)
    after sends, failures, a prune and the application's own SQL."""
    import psycopg

    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c", backoff=NOW, max_attempts=2)(lambda sub: _flaky(sub))
        ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(60)])
        ledger.work(until_idle=True, poll_interval=0.01)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("UPDATE denpyo_submissions SET created_at = now() - interval '100 days' "
                         "WHERE key LIKE 'k1%'")  # fmt: skip
            conn.execute("UPDATE denpyo_submissions SET status = 'rejected' WHERE key = 'k59'")
        ledger.prune(older_than=90 * 86400)
        counted = {(c, s.value): n for c, s, n in ledger.store.count_by_status()}
        with psycopg.connect(postgres_url) as conn:
            real = {
                (c, s): n
                for c, s, n in conn.execute(
                    "SELECT channel, status, COUNT(*) FROM denpyo_submissions GROUP BY 1, 2"
                ).fetchall()
            }
    assert counted == real and sum(real.values()) < 60


def test_an_inline_settle_is_planned_once_and_reaches_its_row_by_index(
    postgres_url: str,
) -> None:
    """A submit settles one row. Its statement must keep one plan for the session
    (not be planned again at each call) and that plan must find the row by its
    primary key, even when it was made on a nearly empty table; so must the plan of
    any other lone move (a person's, say)."""
    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c")(lambda sub: "r")
        for i in range(30):
            ledger.submit("c", f"k{i}", {"i": i})
        store = ledger.store
        assert isinstance(store, PostgresStore)
        plans: dict[str, str] = {}
        with store.pool.connection() as conn:
            cached = conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE %s",
                ["-- submission_settle_one:%"],
            ).fetchall()
            assert cached and all(row["generic_plans"] > 0 for row in cached)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            for name in ("submission_settle_one", "submission_move_one"):
                prepared, nulls = _as_prepared(store.queries[name])
                conn.execute(f"PREPARE lone_plan AS {prepared}")
                plans[name] = "\n".join(
                    row["QUERY PLAN"]
                    for row in conn.execute(f"EXPLAIN EXECUTE lone_plan {nulls}").fetchall()
                )
                conn.execute("DEALLOCATE lone_plan")
            conn.execute("RESET plan_cache_mode")
    for plan in plans.values():
        assert "Index Scan using denpyo_submissions_pkey" in plan and "Seq Scan" not in plan


def _as_prepared(query: str) -> tuple[str, str]:
    """A named query for PREPARE (its %(name)s parameters as $1, $2, ...), and an
    argument list for EXECUTE with NULL for each."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", query)
    return numbered, "(" + ", ".join(["NULL"] * len(names)) + ")"


def _flaky(sub: Submission) -> str:
    n = int(sub.key[1:])
    if n % 4 == 0:
        raise denpyo.Rejected("no")
    if n % 3 == 0:
        raise denpyo.Transient("503")
    return "r"


ATTENTION_BY_SCANNING = """
SELECT
    COUNT(*) FILTER (WHERE (status = 'requesting' AND locked_until <= now())
                        OR (status = 'failed' AND error_kind = 'ambiguous')) AS in_doubt,
    COUNT(*) FILTER (WHERE status = 'failed' AND next_attempt_at IS NULL
                       AND resolution IS NULL
                       AND COALESCE(error_kind, '') <> 'ambiguous') AS exhausted,
    COUNT(*) FILTER (WHERE status = 'rejected' AND resolution IS NULL) AS rejected_open,
    COUNT(*) FILTER (WHERE resolution IS NULL
                       AND ((status = 'requesting' AND locked_until <= now())
                            OR (status = 'failed'
                                AND (error_kind = 'ambiguous' OR next_attempt_at IS NULL))
                            OR status = 'rejected')) AS needs_attention,
    COUNT(*) FILTER (WHERE status = 'requesting'
                        OR (status = 'failed' AND next_attempt_at IS NOT NULL)) AS pending,
    MIN(created_at) FILTER (WHERE status = 'requesting'
                               OR (status = 'failed' AND next_attempt_at IS NOT NULL))
        AS oldest_pending,
    COUNT(*) FILTER (WHERE resolution IS NOT NULL AND status <> 'synced') AS resolved
FROM denpyo_submissions
"""


def test_attention_counts_match_a_scan_of_the_rows(postgres_url: str) -> None:
    """PostgreSQL counts what needs a person from running counts and the claim
    indexes; the figures must equal a scan of every row, whatever mix of states
    the rows are in (the application's own SQL included)."""
    import psycopg
    from psycopg.rows import dict_row

    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("c", backoff=NOW, max_attempts=2)(lambda sub: _flaky(sub))
        ledger.enqueue_many("c", [(f"k{i}", {"i": i}) for i in range(80)])
        ledger.work(until_idle=True, poll_interval=0.01)
        ledger.enqueue_many("c", [(f"w{i}", {"i": i}) for i in range(5)])  # waiting
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for sql in (
                # sent by a process that died: lease run out
                "UPDATE denpyo_submissions SET locked_by = 'gone/1', attempts = 1,"
                " locked_until = now() - interval '1 minute' WHERE key IN ('w0', 'w1')",
                # an ambiguous failure, due for verification, and one held for a person
                "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'ambiguous',"
                " next_attempt_at = now() WHERE key = 'k1'",
                "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'ambiguous',"
                " next_attempt_at = NULL WHERE key = 'k2'",
                # a transient failure waiting for its retry
                "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'transient',"
                " next_attempt_at = now() + interval '1 hour' WHERE key = 'k5'",
                # resolved by a person: a rejected row, an exhausted one, an in-doubt one
                "UPDATE denpyo_submissions SET resolution = 'abandoned: x'"
                " WHERE key IN ('k4', 'k3', 'w1', 'k2')",
            ):
                conn.execute(sql)
        counts = ledger.store.count_attention()
        by_channel = ledger.store.count_attention("c")
        other = ledger.store.count_attention("nothing-here")
        with psycopg.connect(postgres_url, row_factory=dict_row) as conn:
            real = conn.execute(ATTENTION_BY_SCANNING).fetchone()
    assert real is not None
    for name in ("in_doubt", "exhausted", "rejected_open", "needs_attention", "pending",
                 "resolved", "oldest_pending"):  # fmt: skip
        assert counts[name] == real[name], name
        assert by_channel[name] == real[name], name
    assert counts["in_doubt"] >= 3 and counts["resolved"] == 4 and counts["exhausted"] > 0
    assert other["pending"] == other["needs_attention"] == 0 and other["oldest_pending"] is None


def test_a_connection_that_fails_at_the_first_step_goes_back_to_the_pool(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout whose cursor cannot even be made (the connection closed under it)
    leaves as StoreError, and the pool gets the connection back to replace it:
    nothing is lost from the pool, the next statement works."""
    with denpyo.Ledger(postgres_url) as ledger:
        store = ledger.store
        assert isinstance(store, PostgresStore)
        store.now()  # the pool is open, one connection in it
        checkout = store._checkout

        def closed_one() -> Any:
            conn = checkout()
            conn.close()
            return conn

        monkeypatch.setattr(store, "_checkout", closed_one)
        with pytest.raises(denpyo.StoreError, match="closed"):
            store.now()
        monkeypatch.undo()
        assert store.pool.get_stats()["pool_size"] >= 1
        assert store.now() is not None
