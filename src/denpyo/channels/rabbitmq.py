"""`RabbitMQChannel`: the outbox relay to RabbitMQ, with publisher confirms.

Each submission is one message: its payload as a JSON body, ``message_id`` = the
submission's idempotency key (the same for every attempt), persistent delivery,
published ``mandatory`` so that a message no queue would take comes back. How a
publish is classified — never "did not arrive" unless that is certain:

- the broker confirms (``basic.ack``): delivered to every queue it was routed to;
  the row becomes `synced` (RabbitMQ has no message id of its own: no remote id);
- the message comes back unroutable (``basic.return``), or the exchange does not
  exist, or access to it is refused: `Rejected`; no resend can help, a person must
  look at the broker's bindings;
- the broker refuses it (``basic.nack``, e.g. a queue full with
  ``x-overflow: reject-publish``): `Transient`, retried after back-off;
- no connection could be made: `Transient`, nothing was sent;
- the connection or channel is lost, or no confirm comes within ``timeout``,
  after the message was written: raised as `ConnectionError` / `TimeoutError`,
  which the engine records as *ambiguous*: the message may be in the queue.

A broker has no lookup, so an ambiguous publish (or a crash after it) leaves the
row in doubt. Consumers that deduplicate by ``message_id`` make a resend
harmless: declare the channel ``idempotent=True`` then, with
``idempotency_window`` = how long they remember ids (docs/guide/idempotency-window.md).

One connection and one AMQP channel per event loop, opened on first use and
again after an error; `Ledger.close()` closes them (or `aclose()` on a loop).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from denpyo.channels._loops import ClosesPerLoop, PerLoop
from denpyo.domain.limits import wire_body
from denpyo.domain.submission import Submission
from denpyo.engine import tracing
from denpyo.errors import ConfigurationError, Rejected, Transient
from denpyo.extras import missing

try:
    import aio_pika
    import aio_pika.abc
    import aio_pika.exceptions
    import aiormq.exceptions
except ImportError as exc:  # the extra is not installed
    raise missing("rabbitmq", "denpyo.channels.rabbitmq", exc) from exc

RoutingKey = str | Callable[[Submission], str]


@dataclass(slots=True)
class _Link:
    connection: aio_pika.abc.AbstractConnection
    channel: aio_pika.abc.AbstractChannel
    exchange: aio_pika.abc.AbstractExchange


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class RabbitMQChannel(ClosesPerLoop):
    """Publish each submission to `exchange` (``""``: the default exchange, where the
    routing key names a queue) with `routing_key` (text, or a function of the
    submission), and wait for the broker's confirm."""

    def __init__(
        self,
        url: str,
        *,
        exchange: str = "",
        routing_key: RoutingKey,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        if urlsplit(url).scheme not in ("amqp", "amqps") or not urlsplit(url).hostname:
            raise ConfigurationError(f"{_safe(url)!r} is not an amqp:// or amqps:// URL")
        if not callable(routing_key) and not isinstance(routing_key, str):
            raise ConfigurationError("routing_key must be text or a function of the submission")
        if timeout <= 0 or connect_timeout <= 0:
            raise ConfigurationError("timeout and connect_timeout must be positive seconds")
        self.url = url
        self.exchange = exchange
        self.routing_key = routing_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.headers = dict(headers or {})
        self._links: PerLoop[_Link] = PerLoop(self._open, self._close, self._usable)

    def __repr__(self) -> str:
        return f"<RabbitMQChannel {_safe(self.url)} exchange={self.exchange!r}>"

    # -- connections --------------------------------------------------------------

    async def _open(self) -> _Link:
        connection = await aio_pika.connect(self.url, timeout=self.connect_timeout)
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            if self.exchange:
                exchange = await channel.get_exchange(self.exchange, ensure=False)
            else:
                exchange = channel.default_exchange
        except BaseException:
            await connection.close()
            raise
        return _Link(connection, channel, exchange)

    @staticmethod
    async def _close(link: _Link) -> None:
        await link.connection.close()

    @staticmethod
    def _usable(link: _Link) -> bool:
        return not link.connection.is_closed and not link.channel.is_closed

    # -- the call -------------------------------------------------------------------

    async def send(self, sub: Submission) -> None:
        """Publish the submission and wait for the confirm; raise per the module docstring."""
        routing_key = self.routing_key(sub) if callable(self.routing_key) else self.routing_key
        message = aio_pika.Message(
            wire_body(sub.payload),
            message_id=sub.idempotency_key,
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            # With the attempt's traceparent: a consumer's spans join the row's trace.
            headers=tracing.traced(self.headers) or None,
        )
        try:
            link = await self._links.get()
        except (aio_pika.exceptions.AMQPError, OSError, TimeoutError) as exc:
            raise Transient(f"cannot reach RabbitMQ at {_safe(self.url)}: {exc!r}") from exc
        sub.check_lease()  # the last moment: connected, nothing written yet
        where = f"exchange {self.exchange or '(default)'!r} with routing key {routing_key!r}"
        try:
            await link.exchange.publish(message, routing_key, mandatory=True, timeout=self.timeout)
        except aio_pika.exceptions.PublishError as exc:
            raise Rejected(f"unroutable: no queue takes {where}") from exc
        except aio_pika.exceptions.DeliveryError as exc:
            raise Transient(f"the broker refused the message (nack) on {where}") from exc
        except aio_pika.exceptions.ChannelNotFoundEntity as exc:
            self._links.discard(link)
            raise Rejected(f"no {where.split(' with ')[0]} on the broker: {exc}") from exc
        except aiormq.exceptions.ChannelAccessRefused as exc:
            self._links.discard(link)
            raise Rejected(f"access refused to {where}: {exc}") from exc
        except aio_pika.exceptions.ChannelInvalidStateError as exc:
            # The channel was already closed: aio-pika refuses before writing anything.
            self._links.discard(link)
            raise Transient(f"the AMQP channel was closed before publishing: {exc}") from exc
        except TimeoutError as exc:
            self._links.discard(link)
            raise TimeoutError(
                f"no confirm from RabbitMQ within {self.timeout:g} s on {where};"
                " the message may have arrived"
            ) from exc
        except (aio_pika.exceptions.AMQPError, OSError) as exc:
            self._links.discard(link)
            raise ConnectionError(
                f"the connection to RabbitMQ was lost before the confirm ({exc!r});"
                " the message may have arrived"
            ) from exc
