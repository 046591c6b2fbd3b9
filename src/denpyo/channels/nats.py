"""`JetStreamChannel`: the outbox relay to NATS JetStream, deduplicated by message id.

Each submission is one message on `subject`: its payload as a JSON body, with the
header ``Nats-Msg-Id`` = the submission's idempotency key. JetStream drops a
message whose id it has seen within the stream's *duplicate window* (two minutes
by default), and acknowledges it again with the first copy's sequence number. How
a publish is classified:

- the publish ack: the row becomes `synced`, remote id ``STREAM:SEQUENCE`` (the
  first copy's, for a duplicate);
- no stream takes the subject (no responders), or JetStream refuses the message
  for good (a 4xx API error: a wrong expected stream, say): `Rejected`;
- JetStream refuses it for now (a 5xx API error: the stream is full and discards
  new messages, no leader yet): `Transient`;
- no connection could be made, or the client could not write the message (closed,
  draining, its buffer full while reconnecting): `Transient`, nothing was sent;
- no ack within ``timeout``, or the connection lost while waiting for it: raised
  as `TimeoutError` / `ConnectionError`, which the engine records as *ambiguous*.

A broker has no lookup, so an ambiguous publish (or a crash after it) leaves the
row in doubt. Within the duplicate window a resend under the same key is dropped
by JetStream: declare the channel ``idempotent=True`` with ``idempotency_window``
shorter than the stream's ``duplicate_window`` (docs/guide/idempotency-window.md).

One connection per event loop, opened on first use and again after an error;
`Ledger.close()` closes them (or `aclose()` on a loop).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from denpyo.channels._loops import ClosesPerLoop, PerLoop
from denpyo.domain.limits import wire_body
from denpyo.domain.submission import Submission
from denpyo.engine import tracing
from denpyo.errors import ConfigurationError, Rejected, Transient
from denpyo.extras import missing

try:
    import nats
    import nats.errors
    import nats.js.errors
    from nats.aio.client import Client
except ImportError as exc:  # the extra is not installed
    raise missing("nats", "denpyo.channels.nats", exc) from exc

Subject = str | Callable[[Submission], str]

MSG_ID = "Nats-Msg-Id"


class JetStreamChannel(ClosesPerLoop):
    """Publish each submission to `subject` (text, or a function of the submission)
    and wait for JetStream's ack. With `stream`, JetStream refuses the message unless
    that stream takes it (``Nats-Expected-Stream``)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        subject: Subject,
        stream: str | None = None,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        listed = [servers] if isinstance(servers, str) else list(servers)
        if not listed or not all(
            isinstance(s, str) and s.startswith(("nats://", "tls://")) for s in listed
        ):
            raise ConfigurationError(f"servers {servers!r}: expected nats://host:port URLs")
        if not callable(subject) and (not isinstance(subject, str) or not subject):
            raise ConfigurationError("subject must be text or a function of the submission")
        if timeout <= 0 or connect_timeout <= 0:
            raise ConfigurationError("timeout and connect_timeout must be positive seconds")
        self.servers = listed
        self.subject = subject
        self.stream = stream
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.headers = dict(headers or {})
        self._links: PerLoop[Client] = PerLoop(self._open, self._close, self._usable)

    def __repr__(self) -> str:
        return f"<JetStreamChannel {','.join(self.servers)} subject={self.subject!r}>"

    # -- connections --------------------------------------------------------------

    async def _open(self) -> Client:
        async def quiet(exc: Exception) -> None:
            """Errors reach the calls that meet them; the client need not log them too."""

        # Each server is tried at most twice (0 would mean "for ever"); a connection
        # lost later is not reconnected in the background: the next send opens anew.
        return await nats.connect(
            servers=self.servers,
            connect_timeout=max(1, round(self.connect_timeout)),
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            allow_reconnect=False,
            error_cb=quiet,
            name="denpyo",
        )

    @staticmethod
    async def _close(client: Client) -> None:
        await client.close()

    @staticmethod
    def _usable(client: Client) -> bool:
        return not client.is_closed

    # -- the call -------------------------------------------------------------------

    async def send(self, sub: Submission) -> str:
        """Publish the submission and wait for the ack; returns ``STREAM:SEQUENCE``."""
        subject = self.subject(sub) if callable(self.subject) else self.subject
        body = wire_body(sub.payload)
        headers = {**self.headers, MSG_ID: sub.idempotency_key}
        tracing.inject(headers)  # the attempt's span: a consumer's spans join its trace
        try:
            client = await self._links.get()
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise Transient(f"cannot reach NATS at {','.join(self.servers)}: {exc!r}") from exc
        if client.is_closed:
            self._links.discard(client)
            raise Transient("the NATS connection was closed before publishing")
        sub.check_lease()  # the last moment: connected, nothing written yet
        try:
            ack = await client.jetstream().publish(
                subject, body, timeout=self.timeout, stream=self.stream, headers=headers
            )
        except nats.js.errors.NoStreamResponseError as exc:
            raise Rejected(f"no JetStream stream takes subject {subject!r}") from exc
        except nats.js.errors.APIError as exc:
            if exc.code is not None and exc.code >= 500:
                raise Transient(f"JetStream refused the message for now: {exc}") from exc
            raise Rejected(f"JetStream refused the message on {subject!r}: {exc}") from exc
        except (
            nats.errors.OutboundBufferLimitError,
            nats.errors.ConnectionDrainingError,
        ) as exc:
            raise Transient(f"the NATS client could not send the message: {exc}") from exc
        except TimeoutError as exc:  # nats.errors.TimeoutError is one too
            raise TimeoutError(
                f"no ack from JetStream within {self.timeout:g} s on {subject!r};"
                " the message may have arrived"
            ) from exc
        except (nats.errors.Error, OSError) as exc:
            self._links.discard(client)
            raise ConnectionError(
                f"the connection to NATS was lost before the ack ({exc!r});"
                " the message may have arrived"
            ) from exc
        return f"{ack.stream}:{ack.seq}"
