"""OpenTelemetry traces: the request that wrote a row and the calls made for it, in
one trace (docs/guide/tracing.md).

Everything denpyo does with OpenTelemetry is in this module; the rest of denpyo
calls its hooks, and the channels call `inject` for their headers. Only the API
(`opentelemetry-api`, the `otel` extra) is used: the SDK, its exporter and its
sampler are the application's choice.

When the API is not installed, or `DENPYO_TRACING=off` is set (read once, as this
module is imported: the benchmarks and the tests use it to run the path without
OpenTelemetry), every hook is a constant no-op: one test of `ENABLED`, nothing
allocated.

- `row_context()`: the W3C trace context active as a row is written, which the
  row keeps (`traceparent`, `tracestate`).
- `attempt_span()`, `verify_span()`: a row's spans. The flows are generators
  stepped by whichever task or thread performs their effects, so a span is
  started and ended explicitly (`RowSpan.end`, in the flow's `finally`), never
  made current across their yields; while the channel's send or verify runs, the
  row's span is the current span (`RowSpan.current`), in the caller's thread, on
  the loop, or in a pool thread.
- `claim_span()`, `settle_span()`: the worker's own batches, roots of their own.
- `inject(headers)`, `traced(headers)`: the current span's context for a provider.
- `TraceIds`, `TraceIdsFormatter`: log records carry `trace_id` and `span_id`.
- `use(provider)`: the tracer provider denpyo's spans come from (None: the global
  one, even when the application sets it after denpyo's first span).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from collections.abc import Callable, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from types import TracebackType
from typing import Any, TypeVar

from denpyo.domain.policy import AttemptDecision, DoubtDecision, Next
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered, Verdict

SWITCH = "DENPYO_TRACING"
"""`DENPYO_TRACING=off` (or 0, false, no): behave exactly as if OpenTelemetry were
not installed."""


def _switched_off() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() in ("off", "0", "false", "no")


try:
    if _switched_off():
        raise ImportError(f"{SWITCH}=off")
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:
    ENABLED = False
else:
    ENABLED = True
    # W3C always, whatever global propagator the application set: what a row keeps
    # and what a provider receives must be readable by any W3C system.
    _W3C = TraceContextTextMapPropagator()
    _ROOT = otel_context.Context()  # no parent: a span started in it is a root

T = TypeVar("T")

NO_CONTEXT: tuple[None, None] = (None, None)
LOGGERS = ("denpyo", "denpyo.engine", "denpyo.worker", "denpyo.alerts", "denpyo.store")
"""The loggers whose records carry the ids of the current span (a logger's filter
sees only its own records, not its children's)."""

_NOT_CURRENT: AbstractContextManager[None] = nullcontext()


# -- which tracer ------------------------------------------------------------------------

_chosen: Any = None  # the provider `use()` set, or None: the global one
_cached: Any = None  # denpyo's tracer from it, made at the first span
_tracer_lock = threading.Lock()


def use(provider: trace.TracerProvider | None) -> None:
    """Make denpyo's spans with `provider` (an SDK `TracerProvider`, say) rather than
    the global one; None: the global one again. The global provider can be set only
    once per process: a test, or an application that keeps several, passes its own."""
    global _chosen, _cached
    _chosen, _cached = provider, None


def _tracer() -> trace.Tracer:
    """denpyo's tracer, made once. From the global provider before one is set, it is
    the API's proxy, which uses the provider set later from then on."""
    global _cached
    tracer: trace.Tracer | None = _cached
    if tracer is None:
        with _tracer_lock:  # one tracer, whichever thread's span comes first
            tracer = _cached
            if tracer is None:
                provider = _chosen if _chosen is not None else trace.get_tracer_provider()
                tracer = _cached = provider.get_tracer("denpyo")
    return tracer


# -- capture: the context a row keeps --------------------------------------------------------


def row_context() -> tuple[str | None, str | None]:
    """The W3C `traceparent` and `tracestate` of the span current now, which a row
    written now keeps; (None, None) when there is none."""
    if not ENABLED:
        return NO_CONTEXT
    if not trace.get_current_span().get_span_context().is_valid:
        return NO_CONTEXT
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent"), carrier.get("tracestate")


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, to be run in another thread (an executor does not copy the context)
    with the context current here, so that the row it writes keeps this trace."""
    if not ENABLED:
        return fn
    context = otel_context.get_current()

    def in_context(*args: Any, **kwargs: Any) -> T:
        token = otel_context.attach(context)
        try:
            return fn(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return in_context


def _stored(sub: Submission) -> tuple[otel_context.Context, trace.SpanContext] | None:
    """The context a row kept, and its span context; None when it kept none (or not a
    valid W3C one)."""
    if sub.traceparent is None:
        return None
    carrier = {"traceparent": sub.traceparent}
    if sub.tracestate:
        carrier["tracestate"] = sub.tracestate
    context = _W3C.extract(carrier, context=_ROOT)
    span_context = trace.get_current_span(context).get_span_context()
    return (context, span_context) if span_context.is_valid else None


# -- a row's spans ---------------------------------------------------------------------------


class RowSpan:
    """A row's attempt or verify span, as the flows and runners handle it. This class
    is the no-op (`NO_SPAN`, tracing off); `_LiveSpan` holds a real one."""

    __slots__ = ()

    def current(self) -> AbstractContextManager[None]:
        """The span as the current span while the channel's send or verify runs."""
        return _NOT_CURRENT

    def failed(self, exc: Exception) -> None:
        """The flow raised `exc` (a store error, a bug): the span records it."""

    def end(self) -> None:
        """The flow ended, however it ended."""

    def attempted(
        self,
        attempt: int,
        decided: AttemptDecision,
        after: Submission | None,
        error: BaseException | None,
    ) -> None:
        """The attempt's outcome: `decided`, settled as `after` (None: the lease was
        lost meanwhile); `error`: what the channel raised. Its text goes to the span
        through the span's `told` (a provider's error may quote the payload), with the
        exception's type but not its traceback."""

    def not_sent(self, why: str) -> None:
        """The call never started (its lease ran out first): the row was given back."""

    def verified(self, verdict: Verdict | None, decision: DoubtDecision) -> None:
        """The verify's verdict (None: the channel cannot verify) and what it decided."""


NO_SPAN = RowSpan()


Told = Callable[[str], str]
"""What a text derived from an error goes through before a span keeps it: the flow's
`Flows.told` (the row's encrypted values unquoted, its hidden values redacted), as
the stored error does."""


def _as_is(text: str) -> str:
    return text


def attempt_span(channel: str, sub: Submission, *, inline: bool, told: Told = _as_is) -> RowSpan:
    """`denpyo.attempt <channel>`, kind CLIENT, for a row about to be sent (see
    `_start`)."""
    if not ENABLED:
        return NO_SPAN
    return _start(f"denpyo.attempt {channel}", trace.SpanKind.CLIENT, sub, inline, told)


def verify_span(
    channel: str, sub: Submission, *, inline: bool, asks: bool, told: Told = _as_is
) -> RowSpan:
    """`denpyo.verify <channel>` for a row in doubt: kind CLIENT when it asks the
    provider (`asks`: the channel has a verify), INTERNAL when it decides alone."""
    if not ENABLED:
        return NO_SPAN
    kind = trace.SpanKind.CLIENT if asks else trace.SpanKind.INTERNAL
    return _start(f"denpyo.verify {channel}", kind, sub, inline, told)


def _start(name: str, kind: trace.SpanKind, sub: Submission, inline: bool, told: Told) -> RowSpan:
    """A row's span. Its parent: for a call made in the caller's request (`inline`,
    `submit`), the caller's current span; for a worker's, the context the row kept
    (so the request that wrote the row and the call are one trace), else none. A
    link to the kept context either way."""
    stored = _stored(sub)
    parent: otel_context.Context | None = _ROOT
    links = None
    if stored is not None:
        parent, links = stored[0], [trace.Link(stored[1])]
    if inline and trace.get_current_span().get_span_context().is_valid:
        parent = None  # the current context
    span = _tracer().start_span(name, context=parent, kind=kind, links=links)
    if span.is_recording():
        span.set_attributes(
            {
                "denpyo.channel": sub.channel,
                "denpyo.submission_id": sub.id,
                "denpyo.key": sub.key,
            }
        )
    return _LiveSpan(span, told)


class _LiveSpan(RowSpan):
    __slots__ = ("span", "told")

    def __init__(self, span: trace.Span, told: Told) -> None:
        self.span = span
        self.told = told

    def current(self) -> AbstractContextManager[None]:
        return _Current(self.span)

    def failed(self, exc: Exception) -> None:
        if self.span.is_recording():
            # As `record_exception`, but every text through `told`: its message and the
            # traceback's last line may quote the payload.
            stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.span.add_event(
                "exception",
                {
                    "exception.type": type(exc).__qualname__,
                    "exception.message": self.told(str(exc)),
                    "exception.stacktrace": self.told(stack),
                    "exception.escaped": "False",
                },
            )
            self.span.set_status(trace.StatusCode.ERROR, self.told(f"{type(exc).__name__}: {exc}"))

    def end(self) -> None:
        self.span.end()

    def attempted(
        self,
        attempt: int,
        decided: AttemptDecision,
        after: Submission | None,
        error: BaseException | None,
    ) -> None:
        span = self.span
        if not span.is_recording():
            return
        in_doubt = (
            after.in_doubt if after is not None else decided.error_kind is ErrorKind.AMBIGUOUS
        )
        span.set_attributes(
            {
                "denpyo.attempt": attempt,
                "denpyo.outcome": decided.status.value,
                "denpyo.in_doubt": in_doubt,
            }
        )
        if decided.error_kind is not None:
            span.set_attribute("denpyo.error_kind", decided.error_kind.value)
        if decided.remote_id is not None:
            span.set_attribute("denpyo.remote_id", decided.remote_id)
        if after is None:
            span.set_attribute("denpyo.lease_lost", True)
        if error is not None:
            span.add_event(
                "exception",
                {
                    "exception.type": type(error).__qualname__,
                    "exception.message": self.told(str(error)),
                },
            )
        if decided.status is not Status.SYNCED:
            said = decided.last_error
            span.set_status(trace.StatusCode.ERROR, None if said is None else self.told(said))

    def not_sent(self, why: str) -> None:
        if self.span.is_recording():
            self.span.set_attributes(
                {"denpyo.outcome": "not_sent", "denpyo.not_sent": self.told(why)}
            )

    def verified(self, verdict: Verdict | None, decision: DoubtDecision) -> None:
        span = self.span
        if not span.is_recording():
            return
        span.set_attributes(
            {
                "denpyo.verdict": _verdict_name(verdict),
                "denpyo.decision": decision.next.value,
                "denpyo.in_doubt": decision.next in _STAYS_IN_DOUBT,
            }
        )
        if decision.remote_id is not None:
            span.set_attribute("denpyo.remote_id", decision.remote_id)


_STAYS_IN_DOUBT = frozenset({Next.RECHECK, Next.ASK_PERSON})


def _verdict_name(verdict: Verdict | None) -> str:
    if verdict is None:
        return "none"  # the channel has no verify: decided by its idempotency alone
    if isinstance(verdict, Delivered):
        return "delivered"
    return "not_delivered" if isinstance(verdict, NotDelivered) else "unknown"


class _Current:
    """A span as the current one, attached and detached in the same thread or task."""

    __slots__ = ("span", "token")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.token: Token[otel_context.Context] | None = None

    def __enter__(self) -> None:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.token is not None:
            otel_context.detach(self.token)


# -- the worker's batches ------------------------------------------------------------------


class BatchSpan:
    """A claim or a settle batch of the worker, used as `with`; this class is the
    no-op (`NO_BATCH`), `_LiveBatch` holds a real span."""

    __slots__ = ()

    def __enter__(self) -> BatchSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def rows(self, count: int) -> None:
        """How many rows the batch took or changed."""


NO_BATCH = BatchSpan()


def claim_span(channel: str, *, limit: int, in_doubt: bool) -> BatchSpan:
    """`denpyo.claim <channel>`: one claim of up to `limit` rows (in doubt: to verify
    them). A claim that took no row (an idle worker's poll) makes no span."""
    if not ENABLED:
        return NO_BATCH
    attributes = {"denpyo.channel": channel, "denpyo.limit": limit, "denpyo.in_doubt": in_doubt}
    return _LiveBatch(f"denpyo.claim {channel}", attributes, keep_empty=False)


def settle_span(changes: int) -> BatchSpan:
    """`denpyo.settle`: one commit of the changes (settles, mostly) of many flows."""
    if not ENABLED:
        return NO_BATCH
    batch = _LiveBatch("denpyo.settle", {}, keep_empty=True)
    batch.rows(changes)
    return batch


class _LiveBatch(BatchSpan):
    """The span is made as the batch ends, from the time it began: one that took no
    row and failed in nothing is not worth one (`keep_empty`)."""

    __slots__ = ("attributes", "keep_empty", "name", "started")

    def __init__(self, name: str, attributes: dict[str, Any], *, keep_empty: bool) -> None:
        self.name, self.attributes, self.keep_empty = name, attributes, keep_empty
        self.started = time.time_ns()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        failed = isinstance(exc, Exception)
        if not (failed or self.keep_empty or self.attributes.get("denpyo.rows")):
            return
        span = _tracer().start_span(
            self.name,
            context=_ROOT,
            kind=trace.SpanKind.INTERNAL,
            attributes=self.attributes,
            start_time=self.started,
        )
        if isinstance(exc, Exception) and span.is_recording():
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        span.end()

    def rows(self, count: int) -> None:
        self.attributes["denpyo.rows"] = count


# -- propagation to the provider --------------------------------------------------------------


def inject(headers: MutableMapping[str, Any]) -> None:
    """Add the current span's `traceparent` (and `tracestate`) to a message's headers:
    nothing when no valid span is current."""
    if not ENABLED:
        return
    if trace.get_current_span().get_span_context().is_valid:
        _W3C.inject(headers)


def traced(headers: dict[str, Any]) -> dict[str, Any]:
    """`headers`, with the current span's context added when there is one (a new
    dict then; the same one, untouched, otherwise)."""
    if not ENABLED or not trace.get_current_span().get_span_context().is_valid:
        return headers
    with_trace = dict(headers)
    _W3C.inject(with_trace)
    return with_trace


# -- logs ------------------------------------------------------------------------------------


class TraceIds(logging.Filter):
    """Adds `trace_id` and `span_id` (hex, as trace viewers show them) to a record
    logged while a valid span is current; leaves other records alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.__dict__.update(
                trace_id=format(context.trace_id, "032x"), span_id=format(context.span_id, "016x")
            )
        return True


class TraceIdsFormatter(logging.Formatter):
    """A record as its format says, then `trace=… span=…` when it carries them."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace_id = getattr(record, "trace_id", None)
        if trace_id is None:
            return text
        return f"{text} trace={trace_id} span={getattr(record, 'span_id', '')}"


def _install_log_filter() -> None:
    """The filter on denpyo's loggers, once (importing this module twice adds none)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(each, TraceIds) for each in logger.filters):
            logger.addFilter(TraceIds())


if ENABLED:
    _install_log_filter()
