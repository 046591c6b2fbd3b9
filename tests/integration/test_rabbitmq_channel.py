"""RabbitMQChannel against this machine's RabbitMQ (127.0.0.1:5672, guest): a confirm is
`synced`, an unroutable message or a missing exchange `Rejected`, a nack `Transient`, a
refused connection `Transient`, and a publish whose confirm never comes or whose
connection is lost before it *ambiguous*. Each test declares its own exchange and
queues (uuid names) and deletes them."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aio_pika
import pytest
from brokers import run, sub

import denpyo
from acceptance.dbproxy import DbProxy
from denpyo import Status
from denpyo.channels.rabbitmq import RabbitMQChannel
from denpyo.errors import ConfigurationError, Rejected, Transient
from doc_pages import named

URL = os.environ.get("DENPYO_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
T = TypeVar("T")


@dataclass
class Names:
    exchange: str
    queue: str
    routing_key: str


@pytest.fixture
def names() -> Iterator[Names]:
    """A direct exchange and a durable queue bound to it under one routing key."""
    tag = uuid.uuid4().hex[:12]
    made = Names(f"denpyo-test-{tag}", f"denpyo-test-{tag}", f"orders.{tag}")

    async def declare() -> None:
        async with await aio_pika.connect(URL) as connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(made.exchange, "direct", auto_delete=False)
            queue = await channel.declare_queue(made.queue, durable=True)
            await queue.bind(exchange, made.routing_key)

    async def delete() -> None:
        async with await aio_pika.connect(URL) as connection:
            channel = await connection.channel()
            await channel.queue_delete(made.queue)
            await channel.exchange_delete(made.exchange)

    run(declare)
    yield made
    run(delete)


async def drain(queue_name: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Every message waiting in a queue, acknowledged."""
    found = []
    async with await aio_pika.connect(URL) as connection:
        queue = await (await connection.channel()).get_queue(queue_name)
        while (message := await queue.get(fail=False)) is not None:
            await message.ack()
            found.append(message)
    return found


def test_a_confirmed_message_is_synced_with_its_key_as_message_id(names: Names) -> None:
    rabbit = RabbitMQChannel(URL, exchange=names.exchange, routing_key=names.routing_key)

    async def body() -> list[aio_pika.abc.AbstractIncomingMessage]:
        async with rabbit:
            assert await rabbit.send(sub(payload={"order": 1, "total": "9.50"})) is None
        return await drain(names.queue)

    [message] = run(body)
    assert message.message_id == "idem-1"
    assert message.content_type == "application/json"
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert json.loads(message.body) == {"order": 1, "total": "9.50"}


def test_a_resend_carries_the_same_message_id_for_consumers_to_deduplicate(
    names: Names,
) -> None:
    """RabbitMQ itself keeps both copies: deduplicating is the consumers' part."""
    rabbit = RabbitMQChannel(URL, exchange=names.exchange, routing_key=names.routing_key)

    async def body() -> list[str | None]:
        async with rabbit:
            await rabbit.send(sub())
            await rabbit.send(sub())
        return [m.message_id for m in await drain(names.queue)]

    ids = run(body)
    assert ids == ["idem-1", "idem-1"]
    assert len(set(ids)) == 1  # what a deduplicating consumer acts on once


def test_an_unroutable_message_and_a_missing_exchange_are_rejected(names: Names) -> None:
    nowhere = RabbitMQChannel(URL, exchange=names.exchange, routing_key="no.such.binding")
    missing = RabbitMQChannel(URL, exchange=f"{names.exchange}-missing", routing_key="x")
    good = RabbitMQChannel(URL, exchange=names.exchange, routing_key=names.routing_key)

    async def body() -> None:
        async with nowhere, missing, good:
            with pytest.raises(Rejected, match="unroutable"):
                await nowhere.send(sub())
            with pytest.raises(Rejected, match="no exchange"):
                await missing.send(sub())
            with pytest.raises(Rejected, match="no exchange"):  # the channel was reopened
                await missing.send(sub())
            await good.send(sub())

    run(body)
    assert len(run(lambda: drain(names.queue))) == 1


def test_a_nack_is_transient(names: Names) -> None:
    """A queue that is full and rejects publishes makes the broker nack."""
    full = f"{names.queue}-full"

    async def body() -> None:
        async with await aio_pika.connect(URL) as connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(
                full, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
            )
            await queue.bind(names.exchange, "full")
            rabbit = RabbitMQChannel(URL, exchange=names.exchange, routing_key="full")
            try:
                await rabbit.send(sub("a"))
                with pytest.raises(Transient, match="nack"):
                    await rabbit.send(sub("b"))
            finally:
                await rabbit.aclose()
                await channel.queue_delete(full)

    run(body)


def test_a_refused_connection_is_transient() -> None:
    rabbit = RabbitMQChannel("amqp://guest:guest@127.0.0.1:1/", routing_key="q", connect_timeout=2)
    with pytest.raises(Transient, match="cannot reach RabbitMQ"):
        run(lambda: rabbit.send(sub()))


def test_no_confirm_or_a_lost_connection_after_publishing_is_ambiguous(names: Names) -> None:
    """Through a proxy that stops forwarding: the message is written, nothing answers."""

    async def body() -> None:
        proxy = DbProxy("127.0.0.1", 5672)
        port = await proxy.start()
        url = f"amqp://guest:guest@127.0.0.1:{port}/"
        rabbit = RabbitMQChannel(
            url, exchange=names.exchange, routing_key=names.routing_key, timeout=1.0
        )
        try:
            await rabbit.send(sub("before"))  # connected through the proxy
            proxy.blackhole(1.5)
            with pytest.raises(TimeoutError, match="may have arrived"):
                await rabbit.send(sub("silent"))
            await asyncio.sleep(0.7)  # the black-hole is over
            await rabbit.send(sub("after"))  # on a new connection
            proxy.blackhole(30)
            asyncio.get_running_loop().call_later(0.3, proxy.cut)
            with pytest.raises(ConnectionError, match="may have arrived"):
                await rabbit.send(sub("cut"))
        finally:
            proxy.cut()
            proxy.server.close()
            await rabbit.aclose()
        outcome = denpyo.OutcomeKind
        from denpyo.domain.policy import classify_exception

        assert classify_exception(TimeoutError()).kind is outcome.AMBIGUOUS
        assert classify_exception(ConnectionError()).kind is outcome.AMBIGUOUS

    run(body)


def test_a_ledger_sends_through_it_and_close_closes_its_connection(
    names: Names, ledger: denpyo.Ledger
) -> None:
    rabbit = RabbitMQChannel(URL, exchange=names.exchange, routing_key=names.routing_key)
    ledger.channel("events", idempotent=True)(rabbit.send)
    sent = ledger.submit("events", "order:1", {"order": 1})
    assert sent.status is Status.SYNCED and sent.remote_id is None
    links = list(rabbit._links._open.values())
    assert len(links) == 1 and not links[0].connection.is_closed
    ledger.close()
    assert links[0].connection.is_closed and not rabbit._links._open
    [message] = run(lambda: drain(names.queue))
    assert message.message_id == sent.idempotency_key


def test_the_message_carries_the_attempts_traceparent(names: Names, ledger: denpyo.Ledger) -> None:
    """A consumer's spans can join the trace of the request that wrote the row."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from denpyo.engine import tracing

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        rabbit = RabbitMQChannel(
            URL, exchange=names.exchange, routing_key=names.routing_key, headers={"app": "shop"}
        )
        ledger.channel("events")(rabbit.send)
        with provider.get_tracer("app").start_as_current_span("request"):
            ledger.submit("events", "order:1", {"order": 1})
    finally:
        tracing.use(None)
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "denpyo.attempt events"]
    assert attempt.context is not None
    [message] = run(lambda: drain(names.queue))
    assert message.headers["app"] == "shop"
    assert message.headers["traceparent"] == (
        f"00-{attempt.context.trace_id:032x}-{attempt.context.span_id:016x}-"
        f"{int(attempt.context.trace_flags):02x}"
    )
    assert rabbit.headers == {"app": "shop"}  # the channel's own headers untouched


@pytest.mark.parametrize(
    "bad",
    [
        {"url": "http://127.0.0.1:5672/"},
        {"url": "amqp:///"},
        {"timeout": 0},
        {"routing_key": 5},
    ],
)
def test_bad_settings_are_refused_when_the_channel_is_made(bad: dict[str, Any]) -> None:
    options: dict[str, Any] = {"url": URL, "routing_key": "q", **bad}
    with pytest.raises(ConfigurationError):
        RabbitMQChannel(options.pop("url"), **options)


def test_the_channels_page_s_rabbitmq_example_publishes(names: Names, tmp_path: Path) -> None:
    """The guide's block as printed, but for its exchange and routing key (this
    test's own), on a ledger of its own."""
    code = named("guide/channels.md", "channels")["rabbitmq"]
    code = code.replace('"orders"', repr(names.exchange))
    code = code.replace('"order.created"', repr(names.routing_key))
    with denpyo.Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.migrate()
        exec(code, {"ledger": ledger})
        sent = ledger.submit("order-created", "order:1", {"order": 1})
    assert sent.status == Status.SYNCED
    [message] = run(lambda: drain(names.queue))
    assert message.message_id == sent.idempotency_key
    assert json.loads(message.body) == {"order": 1}
