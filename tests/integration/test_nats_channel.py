"""JetStreamChannel against this machine's NATS server with JetStream (127.0.0.1:4222):
an ack is `synced` as STREAM:SEQUENCE, a resend of the same key inside the duplicate
window is dropped (same sequence, one message), no stream for the subject is
`Rejected`, a full stream `Transient`, a refused connection `Transient`, no ack
*ambiguous*. Each test makes its own stream (uuid names) and deletes it."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from brokers import run, sub
from nats.js.api import DiscardPolicy, StreamConfig

import denpyo
from acceptance.dbproxy import DbProxy
from denpyo import Status
from denpyo.channels.nats import JetStreamChannel
from denpyo.errors import ConfigurationError, Rejected, Transient
from doc_pages import named

SERVER = os.environ.get("DENPYO_TEST_NATS_URL", "nats://127.0.0.1:4222")
T = TypeVar("T")


@dataclass
class Stream:
    name: str
    subject: str


async def admin(action: Callable[[Any], Awaitable[T]]) -> T:
    client = await nats.connect(SERVER)
    try:
        return await action(client.jetstream())
    finally:
        await client.close()


def make_stream(**config: Any) -> Stream:
    tag = uuid.uuid4().hex[:12]
    made = Stream(f"DENPYO_TEST_{tag}", f"denpyo.test.{tag}")
    run(
        lambda: admin(
            lambda js: js.add_stream(
                StreamConfig(name=made.name, subjects=[made.subject], **config)
            )
        )
    )
    return made


@pytest.fixture
def stream() -> Iterator[Stream]:
    made = make_stream()
    yield made
    run(lambda: admin(lambda js: js.delete_stream(made.name)))


def messages(made: Stream) -> int:
    info = run(lambda: admin(lambda js: js.stream_info(made.name)))
    return int(info.state.messages)


def test_an_ack_is_synced_as_stream_and_sequence(stream: Stream) -> None:
    channel = JetStreamChannel(SERVER, subject=stream.subject)

    async def body() -> tuple[str, Any]:
        async with channel:
            remote = await channel.send(sub(payload={"order": 1, "total": "9.50"}))
        stored = await admin(lambda js: js.get_msg(stream.name, 1))
        return remote, stored

    remote, stored = run(body)
    assert remote == f"{stream.name}:1"
    assert stored.headers["Nats-Msg-Id"] == "idem-1"
    assert json.loads(stored.data) == {"order": 1, "total": "9.50"}


def test_a_resend_inside_the_duplicate_window_is_dropped_by_jetstream(stream: Stream) -> None:
    channel = JetStreamChannel(SERVER, subject=stream.subject)

    async def body() -> list[str]:
        async with channel:
            return [
                await channel.send(sub()),
                await channel.send(sub()),
                await channel.send(sub("2")),
            ]

    assert run(body) == [f"{stream.name}:1", f"{stream.name}:1", f"{stream.name}:2"]
    assert messages(stream) == 2


def test_past_the_duplicate_window_a_resend_is_a_second_message() -> None:
    """Why a channel declares its `idempotency_window`: JetStream forgets ids."""
    made = make_stream(duplicate_window=0.3)
    channel = JetStreamChannel(SERVER, subject=made.subject)

    async def body() -> list[str]:
        async with channel:
            first = await channel.send(sub())
            await asyncio.sleep(0.6)
            return [first, await channel.send(sub())]

    try:
        assert run(body) == [f"{made.name}:1", f"{made.name}:2"]
    finally:
        run(lambda: admin(lambda js: js.delete_stream(made.name)))


def test_no_stream_for_the_subject_or_another_stream_is_rejected(stream: Stream) -> None:
    nowhere = JetStreamChannel(SERVER, subject=f"{stream.subject}.nobody.listens")
    elsewhere = JetStreamChannel(SERVER, subject=stream.subject, stream="ANOTHER_STREAM")

    async def body() -> None:
        async with nowhere, elsewhere:
            with pytest.raises(Rejected, match="no JetStream stream"):
                await nowhere.send(sub())
            with pytest.raises(Rejected, match="refused"):
                await elsewhere.send(sub())

    run(body)
    assert messages(stream) == 0


def test_a_full_stream_that_discards_new_messages_is_transient() -> None:
    made = make_stream(max_msgs=1, discard=DiscardPolicy.NEW)
    channel = JetStreamChannel(SERVER, subject=made.subject)

    async def body() -> None:
        async with channel:
            await channel.send(sub("a"))
            with pytest.raises(Transient, match="for now"):
                await channel.send(sub("b"))

    try:
        run(body)
    finally:
        run(lambda: admin(lambda js: js.delete_stream(made.name)))


def test_a_refused_connection_is_transient() -> None:
    channel = JetStreamChannel("nats://127.0.0.1:1", subject="x", connect_timeout=1)
    with pytest.raises(Transient, match="cannot reach NATS"):
        run(lambda: channel.send(sub()))


def test_no_ack_or_a_lost_connection_after_publishing_is_ambiguous(stream: Stream) -> None:
    async def body() -> None:
        proxy = DbProxy("127.0.0.1", 4222)
        port = await proxy.start()
        channel = JetStreamChannel(f"nats://127.0.0.1:{port}", subject=stream.subject, timeout=1)
        try:
            await channel.send(sub("before"))
            proxy.blackhole(1.5)
            with pytest.raises(TimeoutError, match="may have arrived"):
                await channel.send(sub("silent"))
            await asyncio.sleep(0.7)  # the black-hole is over: its connection was reset
            assert (await channel.send(sub("after"))).startswith(stream.name)
            proxy.blackhole(30)
            asyncio.get_running_loop().call_later(0.3, proxy.cut)
            with pytest.raises((ConnectionError, TimeoutError), match="may have arrived"):
                await channel.send(sub("cut"))
        finally:
            proxy.cut()
            proxy.server.close()
            await channel.aclose()

    run(body)


def test_a_ledger_sends_through_it_and_close_closes_its_connection(
    stream: Stream, ledger: denpyo.Ledger
) -> None:
    channel = JetStreamChannel(SERVER, subject=stream.subject)
    ledger.channel("events", idempotent=True, idempotency_window=60)(channel.send)
    sent = ledger.submit("events", "order:1", {"order": 1})
    assert (sent.status, sent.remote_id) == (Status.SYNCED, f"{stream.name}:1")
    clients = list(channel._links._open.values())
    assert len(clients) == 1 and not clients[0].is_closed
    ledger.close()
    assert clients[0].is_closed and not channel._links._open


def test_the_message_carries_the_attempts_traceparent(
    stream: Stream, ledger: denpyo.Ledger
) -> None:
    """A consumer's spans can join the trace of the request that wrote the row."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from denpyo.engine import tracing

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        ledger.channel("events")(JetStreamChannel(SERVER, subject=stream.subject).send)
        with provider.get_tracer("app").start_as_current_span("request"):
            ledger.submit("events", "order:1", {"order": 1})
    finally:
        tracing.use(None)
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "denpyo.attempt events"]
    assert attempt.context is not None
    stored = run(lambda: admin(lambda js: js.get_msg(stream.name, 1)))
    assert stored.headers["traceparent"] == (
        f"00-{attempt.context.trace_id:032x}-{attempt.context.span_id:016x}-"
        f"{int(attempt.context.trace_flags):02x}"
    )


@pytest.mark.parametrize(
    "bad",
    [{"servers": "http://127.0.0.1:4222"}, {"servers": []}, {"subject": ""}, {"timeout": 0}],
)
def test_bad_settings_are_refused_when_the_channel_is_made(bad: dict[str, Any]) -> None:
    options: dict[str, Any] = {"servers": SERVER, "subject": "x", **bad}
    with pytest.raises(ConfigurationError):
        JetStreamChannel(options.pop("servers"), **options)


def test_the_channels_page_s_nats_example_publishes(stream: Stream, tmp_path: Path) -> None:
    """The guide's block as printed, but for its subject (this test's stream's), on
    a ledger of its own."""
    code = named("guide/channels.md", "channels")["nats"]
    code = code.replace('"orders.created"', repr(stream.subject))
    with denpyo.Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.migrate()
        exec(code, {"ledger": ledger})
        sent = ledger.submit("order-created", "order:1", {"order": 1})
    assert (sent.status, sent.remote_id) == (Status.SYNCED, f"{stream.name}:1")
    assert messages(stream) == 1
