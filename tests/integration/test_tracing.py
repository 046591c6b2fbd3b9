"""OpenTelemetry traces, on every database: a row keeps the trace context it was
written in; the worker's attempt of it is a span of that trace (child and link),
and the request's span and the call are one trace when an OTLP exporter sends them
to a collector; the provider and the brokers receive the attempt's traceparent;
verifies, a person's resend, the worker's claims and settles; log records carry
the ids. The spans go to the SDK's in-memory exporter through `tracing.use`, so no
global tracer provider is set."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

import denpyo
from database_records import database_record
from denpyo import Status, Submission
from denpyo.channels.http import HttpChannel
from denpyo.domain.moves import Move
from denpyo.engine import operator as op
from denpyo.engine import tracing
from denpyo.store import NewSubmission
from doc_pages import named
from trace_servers import OtlpReceiver, RecordingProvider

Sql = Callable[[str], list[tuple[Any, ...]]]


class Traces:
    """An SDK tracer provider of the test's own, its finished spans, and a tracer for
    the application's spans."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.app = self.provider.get_tracer("app")

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        [span] = self.named(name)
        return span


@pytest.fixture
def traces() -> Iterator[Traces]:
    made = Traces()
    tracing.use(made.provider)
    yield made
    tracing.use(None)
    made.provider.shutdown()


def traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def stored(sql: Sql, row: Submission | int) -> tuple[str | None, str | None]:
    """What the row keeps, read with plain SQL."""
    row_id = row if isinstance(row, int) else row.id
    query = f"SELECT traceparent, tracestate FROM denpyo_submissions WHERE id = {row_id}"
    [(parent, state)] = sql(query)
    return parent, state


def row(ledger: denpyo.Ledger, key: str) -> Submission:
    found = ledger.get("email", key)
    assert found is not None
    return found


def context_of(span: ReadableSpan) -> SpanContext:
    assert span.context is not None
    return span.context


def assert_child_and_link(span: ReadableSpan, of: ReadableSpan) -> None:
    """`span` belongs to `of`'s trace: its parent, and a link to it."""
    request = context_of(of)
    assert span.parent is not None
    assert (span.parent.trace_id, span.parent.span_id) == (request.trace_id, request.span_id)
    assert context_of(span).trace_id == request.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (request.trace_id, request.span_id)
    ]


def test_a_row_keeps_the_trace_context_it_was_written_in(
    ledger: denpyo.Ledger, traces: Traces, sql: Sql
) -> None:
    ledger.channel("email")(lambda sub: "r")
    state = trace.TraceState([("vendor", "blue")])
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=state)
    with traces.app.start_as_current_span("request") as request:
        ledger.enqueue("email", "one", {})
        ledger.enqueue_many("email", [("many-1", {}), ("many-2", {})])
        asyncio.run(ledger.aenqueue("email", "async", {}))
        asyncio.run(ledger.aenqueue_many("email", [("async-many", {})]))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    try:
        ledger.enqueue("email", "remote", {})  # a request whose caller sent a traceparent
    finally:
        otel_context.detach(token)
    ledger.enqueue("email", "untraced", {})

    expected = traceparent(request.get_span_context())
    for key in ("one", "many-1", "many-2", "async", "async-many"):
        assert stored(sql, row(ledger, key)) == (expected, None)
    assert stored(sql, row(ledger, "remote")) == (traceparent(remote), "vendor=blue")
    assert stored(sql, row(ledger, "untraced")) == (None, None)
    kept = row(ledger, "remote")
    assert (kept.traceparent, kept.tracestate) == (traceparent(remote), "vendor=blue")


def test_an_asyncio_applications_own_transaction_keeps_the_trace(
    backend: str, db_url: str, ledger: denpyo.Ledger, traces: Traces, sql: Sql
) -> None:
    """`aenqueue(conn=...)` runs its statements on the application's connection."""
    ledger.channel("email")(lambda sub: "r")

    async def enqueue(conn: Any) -> None:
        await ledger.aenqueue("email", "conn", {}, conn=conn)
        await ledger.aenqueue_many("email", [("conn-many", {})], conn=conn)

    async def body() -> None:
        record = database_record(backend)  # its last driver: asyncpg on PostgreSQL
        async with record.app_transaction(db_url, record.async_drivers[-1]) as conn:
            await enqueue(conn)

    with traces.app.start_as_current_span("request") as request:
        asyncio.run(body())
    expected = traceparent(request.get_span_context())
    assert stored(sql, row(ledger, "conn")) == (expected, None)
    assert stored(sql, row(ledger, "conn-many")) == (expected, None)


def test_the_workers_attempt_is_a_span_of_the_request_that_wrote_the_row(
    ledger: denpyo.Ledger, traces: Traces
) -> None:
    current: list[SpanContext] = []

    @ledger.channel("email")
    def send(sub: Submission) -> str:  # a sync channel: run in a pool thread
        current.append(trace.get_current_span().get_span_context())
        return f"remote-{sub.key}"

    with traces.app.start_as_current_span("request") as request:
        sub = ledger.enqueue("email", "order:1", {"to": "ada@example.com"})
    ledger.work(until_idle=True)

    attempt = traces.one("denpyo.attempt email")
    assert attempt.kind is SpanKind.CLIENT
    assert_child_and_link(attempt, traces.one("request"))
    assert attempt.attributes == {
        "denpyo.channel": "email",
        "denpyo.submission_id": sub.id,
        "denpyo.key": "order:1",
        "denpyo.attempt": 1,
        "denpyo.outcome": "synced",
        "denpyo.in_doubt": False,
        "denpyo.remote_id": "remote-order:1",
    }
    assert attempt.status.status_code is StatusCode.UNSET
    assert current == [context_of(attempt)]  # the current span while the channel ran
    assert request.get_span_context().trace_id == context_of(attempt).trace_id


def test_a_rejected_attempt_is_an_error_and_its_alert_line_carries_the_trace(
    ledger: denpyo.Ledger, traces: Traces, caplog: pytest.LogCaptureFixture
) -> None:
    current: list[SpanContext] = []

    @ledger.channel("email")
    async def send(sub: Submission) -> str:  # an async channel: on the worker's loop
        current.append(trace.get_current_span().get_span_context())
        raise denpyo.Rejected("no such mailbox")

    with traces.app.start_as_current_span("request"):
        ledger.enqueue("email", "order:2", {})
    with caplog.at_level(logging.WARNING, logger="denpyo.alerts"):
        ledger.work(until_idle=True)

    attempt = traces.one("denpyo.attempt email")
    assert_child_and_link(attempt, traces.one("request"))
    assert attempt.attributes is not None
    assert attempt.attributes["denpyo.outcome"] == "rejected"
    assert attempt.attributes["denpyo.error_kind"] == "rejected"
    assert attempt.status.status_code is StatusCode.ERROR
    assert "no such mailbox" in (attempt.status.description or "")
    assert [event.name for event in attempt.events] == ["exception"]
    assert current == [context_of(attempt)]
    [alert] = [r for r in caplog.records if r.name == "denpyo.alerts"]
    assert alert.__dict__["trace_id"] == f"{context_of(attempt).trace_id:032x}"
    assert alert.__dict__["span_id"] == f"{context_of(attempt).span_id:016x}"


def test_a_hidden_value_an_error_quotes_is_not_on_the_span(
    ledger: denpyo.Ledger, traces: Traces
) -> None:
    """The redaction rule holds on the way to the collector too: the error's text on
    the span has the payload's hidden values replaced."""

    @ledger.channel("email")
    def send(sub: Submission) -> str:
        raise denpyo.Rejected(f"card {sub.payload['card_number']} declined")

    ledger.enqueue("email", "order:9", {"card_number": "4242-4242-4242-4242"})
    ledger.work(until_idle=True)
    attempt = traces.one("denpyo.attempt email")
    [event] = attempt.events
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "Rejected"
    assert event.attributes["exception.message"] == "card [redacted] declined"
    assert "4242" not in (attempt.status.description or "")


def test_an_error_the_flow_raises_goes_to_the_span_unquoted(traces: Traces) -> None:
    """An exception a flow raises (a store's error quoting the payload) reaches its
    span through the same unquoting as the stored error: message, traceback, status."""
    sub = Submission(1, "email", "k", "i", {"to": "frank.pii@example.com"}, Status.REQUESTING)
    span = tracing.attempt_span(
        "email", sub, inline=False, told=lambda text: text.replace("frank.pii", "[encrypted]")
    )
    try:
        raise RuntimeError("lost after sending to frank.pii@example.com")
    except RuntimeError as exc:
        span.failed(exc)
    span.end()
    attempt = traces.one("denpyo.attempt email")
    assert "frank.pii" not in attempt.to_json()
    [event] = attempt.events
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "lost after sending to [encrypted]@example.com"
    assert "RuntimeError" in str(event.attributes["exception.stacktrace"])


def test_an_inline_submit_is_a_child_of_the_callers_span(
    ledger: denpyo.Ledger, traces: Traces, sql: Sql
) -> None:
    current: list[SpanContext] = []

    @ledger.channel("email")
    def send(sub: Submission) -> str:  # in the caller's thread
        current.append(trace.get_current_span().get_span_context())
        return "r"

    with traces.app.start_as_current_span("request") as request:
        ledger.submit("email", "order:3", {})

    attempt = traces.one("denpyo.attempt email")
    assert_child_and_link(attempt, traces.one("request"))
    assert current == [context_of(attempt)]
    assert stored(sql, row(ledger, "order:3"))[0] == traceparent(request.get_span_context())


def test_an_async_channel_of_a_sync_submit_sees_the_attempt_on_the_private_loop(
    ledger: denpyo.Ledger, traces: Traces
) -> None:
    current: list[SpanContext] = []

    @ledger.channel("email")
    async def send(sub: Submission) -> str:
        current.append(trace.get_current_span().get_span_context())
        return "r"

    with traces.app.start_as_current_span("request"):
        ledger.submit("email", "order:4", {})
    assert current == [context_of(traces.one("denpyo.attempt email"))]


def in_doubt(ledger: denpyo.Ledger, key: str) -> int:
    """A row as a crash leaves it: `requesting`, held to send, its lease run out; written
    inside the current span, as `enqueue` would."""
    parent, state = tracing.row_context()
    new = NewSubmission("email", key, f"idem-{key}", json.dumps({}), None, None, parent, state)
    sub, _ = ledger.store.record(new, actor="w/1", lease=60)
    expire = Move(
        sub.id,
        Status.REQUESTING,
        Status.REQUESTING,
        "w/1",
        holder="w/1",
        new_holder="w/1",
        lease=0,
        retry_in=0,
        keep_error=True,
    )
    [moved] = ledger.store.move([expire])
    assert moved is not None and moved.in_doubt
    return sub.id


def test_a_verify_is_a_span_of_the_request_that_wrote_the_row(
    ledger: denpyo.Ledger, traces: Traces
) -> None:
    current: list[SpanContext] = []

    def verify(sub: Submission) -> denpyo.Delivered:
        current.append(trace.get_current_span().get_span_context())
        return denpyo.Delivered("remote-7")

    ledger.channel("email", verify=verify)(lambda sub: "r")
    with traces.app.start_as_current_span("request"):
        sub_id = in_doubt(ledger, "order:5")
    ledger.reconcile()

    verifying = traces.one("denpyo.verify email")
    assert verifying.kind is SpanKind.CLIENT
    assert_child_and_link(verifying, traces.one("request"))
    assert verifying.attributes == {
        "denpyo.channel": "email",
        "denpyo.submission_id": sub_id,
        "denpyo.key": "order:5",
        "denpyo.verdict": "delivered",
        "denpyo.decision": "mark_synced",
        "denpyo.in_doubt": False,
        "denpyo.remote_id": "remote-7",
    }
    assert current == [context_of(verifying)]
    assert ledger.get_by_id(sub_id).status is Status.SYNCED  # type: ignore[union-attr]


def test_a_persons_resend_joins_the_trace_of_the_row_it_replaces(
    ledger: denpyo.Ledger, traces: Traces, sql: Sql
) -> None:
    @ledger.channel("email")
    def send(sub: Submission) -> str:
        if sub.payload["to"] == "wrong":
            raise denpyo.Rejected("no such mailbox")
        return "r"

    with traces.app.start_as_current_span("request") as request:
        rejected = ledger.enqueue("email", "order:6", {"to": "wrong"})
    ledger.work(until_idle=True)
    resolution = op.resolve_resend(
        ledger, rejected.id, note="address corrected", payload={"to": "right"}, by="ada"
    )
    resent = resolution.created
    assert resent is not None
    assert stored(sql, resent) == (traceparent(request.get_span_context()), None)
    ledger.work(until_idle=True)
    first, again = sorted(
        traces.named("denpyo.attempt email"),
        key=lambda span: span.attributes["denpyo.submission_id"],  # type: ignore[index]
    )
    assert again.attributes is not None and again.attributes["denpyo.submission_id"] == resent.id
    assert again.attributes["denpyo.outcome"] == "synced"
    assert_child_and_link(first, traces.one("request"))
    assert_child_and_link(again, traces.one("request"))


def test_the_workers_claims_and_settles_are_spans_of_their_own(
    ledger: denpyo.Ledger, traces: Traces
) -> None:
    ledger.channel("email")(lambda sub: "r")
    ledger.enqueue_many("email", [(f"order:{i}", {}) for i in range(5)])
    ledger.work(until_idle=True)
    claims = traces.named("denpyo.claim email")
    settles = traces.named("denpyo.settle")
    assert claims and settles
    assert all(span.parent is None for span in claims + settles)
    assert sum(span.attributes["denpyo.rows"] for span in claims) == 5  # type: ignore[index]
    assert sum(span.attributes["denpyo.rows"] for span in settles) >= 5  # type: ignore[index]
    assert all(span.attributes["denpyo.in_doubt"] is False for span in claims)  # type: ignore[index]


def test_the_provider_receives_the_attempts_traceparent(
    ledger: denpyo.Ledger, traces: Traces
) -> None:
    with RecordingProvider() as provider:
        http = HttpChannel(f"{provider.url}/send")
        ledger.channel("email")(http.send)
        with traces.app.start_as_current_span("request"):
            ledger.enqueue("email", "order:8", {})
        ledger.enqueue("email", "order:9", {})  # no trace: no header
        ledger.work(until_idle=True)
    attempts = {
        span.attributes["denpyo.key"]: span  # type: ignore[index]
        for span in traces.named("denpyo.attempt email")
    }
    received = {headers["idempotency-key"]: headers for headers in provider.received}
    traced = received[row(ledger, "order:8").idempotency_key]
    assert traced["traceparent"] == traceparent(context_of(attempts["order:8"]))
    # The untraced row's attempt is a root of its own: its context goes out all the same.
    untraced = received[row(ledger, "order:9").idempotency_key]
    assert untraced["traceparent"] == traceparent(context_of(attempts["order:9"]))
    assert attempts["order:9"].parent is None and not attempts["order:9"].links


def test_without_the_sdk_the_context_a_row_kept_goes_on_to_the_provider(
    ledger: denpyo.Ledger, sql: Sql
) -> None:
    """The API alone (no SDK: its spans record nothing) still carries the context."""
    tracing.use(trace.NoOpTracerProvider())
    remote = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1))
    try:
        with RecordingProvider() as provider:
            ledger.channel("email")(HttpChannel(f"{provider.url}/send").send)
            token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
            try:
                ledger.enqueue("email", "order:10", {})
            finally:
                otel_context.detach(token)
            ledger.work(until_idle=True)
    finally:
        tracing.use(None)
    assert stored(sql, row(ledger, "order:10")) == (traceparent(remote), None)
    [headers] = provider.received
    assert headers["traceparent"] == traceparent(remote)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_request_and_the_workers_call_arrive_at_a_collector_as_one_trace(
    ledger: denpyo.Ledger,
) -> None:
    """End to end: the OTLP HTTP exporter, batching, to a receiver on loopback."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    with OtlpReceiver() as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(receiver.endpoint)))
        tracing.use(provider)
        try:
            ledger.channel("invoice-email")(lambda sub: "remote-1")
            with provider.get_tracer("shop").start_as_current_span("POST /orders"):
                ledger.enqueue("invoice-email", "order:11", {"to": "ada@example.com"})
            ledger.work(until_idle=True)
            assert provider.force_flush(10_000)
        finally:
            tracing.use(None)
            provider.shutdown()
        [request] = receiver.named("POST /orders")
        [attempt] = receiver.named("denpyo.attempt invoice-email")
    assert request.service == attempt.service == "shop"
    assert attempt.trace_id == request.trace_id
    assert attempt.parent_span_id == request.span_id
    assert attempt.links == [(request.trace_id, request.span_id)]
    assert attempt.attributes["denpyo.outcome"] == "synced"
    assert attempt.start_ns >= request.end_ns  # the call came after the request ended


def test_the_pages_setup_sends_the_request_and_the_call_as_one_trace(tmp_path: Path) -> None:
    """The set-up of docs/guide/tracing.md, as written (the global provider, the OTLP
    exporter reading its endpoint from the environment), in a process of its own."""
    script = named("guide/tracing.md", "tracing")["setup"] + textwrap.dedent(f"""
        import denpyo

        with denpyo.Ledger("sqlite:///{tmp_path}/shop.db") as ledger:
            ledger.migrate()
            ledger.channel("invoice-email")(lambda sub: "remote-1")
            with trace.get_tracer("shop").start_as_current_span("POST /orders"):
                ledger.enqueue("invoice-email", "order:12", {{"to": "ada@example.com"}})
            ledger.work(until_idle=True)
        provider.shutdown()
    """)
    with OtlpReceiver() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint}
        env.pop(tracing.SWITCH, None)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        [request] = receiver.named("POST /orders")
        [attempt] = receiver.named("denpyo.attempt invoice-email")
    assert request.service == attempt.service == "shop"
    assert (attempt.trace_id, attempt.parent_span_id) == (request.trace_id, request.span_id)
