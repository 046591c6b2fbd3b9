"""`Ledger`: the public face of denpyo. Thin wrappers over flows, store and worker."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from denpyo.domain.actions import ActionKind, ActionState, Approval, Scope
from denpyo.domain.audit import AuditReport
from denpyo.domain.backoff import Backoff
from denpyo.domain.channel_state import DEFAULT_DOWN_AFTER
from denpyo.domain.limits import (
    MAX_PAYLOAD_BYTES,
    check_channel_name,
    check_id,
    check_key,
    check_same_call,
    encode_payload,
)
from denpyo.domain.provider_events import ProviderEvent, Received
from denpyo.domain.redaction import ENV_VARIABLE as REDACT_VARIABLE
from denpyo.domain.redaction import Redaction
from denpyo.domain.report import ReportRow, check_period, fold
from denpyo.domain.retention import Retention
from denpyo.domain.settings import (
    DEFAULT_BACKOFF,
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_POLL_INTERVAL,
)
from denpyo.domain.status import Status
from denpyo.domain.submission import Event, Submission
from denpyo.engine import archiving, forgetting, provider_events, tracing
from denpyo.engine.acting import check_note, operator_actor
from denpyo.engine.alerts import AlertHandler, Alerts
from denpyo.engine.archiving import ArchiveReport
from denpyo.engine.audit import Auditor, Progress
from denpyo.engine.bridge import LoopThread
from denpyo.engine.channel import ChannelSpec, Classifier, ListRemoteFn, SendFn, VerifyFn
from denpyo.engine.flows import Flows
from denpyo.engine.forgetting import ForgetResult
from denpyo.engine.gates import Gates
from denpyo.engine.keys import new_idempotency_key
from denpyo.engine.observers import CallHandler, CallObservers
from denpyo.engine.payload_keys import KeyRotation, rotate_payloads
from denpyo.engine.payload_keys import Progress as RotationProgress
from denpyo.engine.runners import AsyncRunner, SyncRunner
from denpyo.engine.worker import Worker, WorkReport
from denpyo.errors import (
    ConfigurationError,
    InvalidDatabaseURL,
    InvalidInput,
    SubmissionFailed,
    SubmissionInDoubt,
    SubmissionNotFound,
    SubmissionRejected,
    SubmissionResolved,
    Transient,
    UnknownChannel,
)
from denpyo.store import NewSubmission, Store, open_store, shown_url
from denpyo.store.actions import NewAction
from denpyo.store.base import AsyncStore
from denpyo.store.sealing import PayloadKeys, Sealing, payload_codec

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_URL = "sqlite:///denpyo.db"


class _CallThreads(ThreadPoolExecutor):
    """The threads that sync channels (and verifies) run in. A call that cannot be
    handed to one (the ledger is closing: "cannot schedule new futures after
    shutdown") never started, so it is `Transient`, not an ambiguous failure."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        try:
            return super().submit(fn, *args, **kwargs)
        except RuntimeError as exc:
            raise Transient(f"not sent: {exc}") from exc


class Ledger:
    """The record of every call to the outside, in the application's own database.

    `url` defaults to `DENPYO_DATABASE_URL`, then `sqlite:///denpyo.db`; an empty
    one is refused (`InvalidDatabaseURL`), never taken for the default.
    `keys_kept_for`: seconds from a row's creation for which its key stays known
    after its row is removed (`prune`, `archive`), so that submitting it again calls
    nothing; None (the default): for ever. `max_payload_bytes`: the largest encoded
    payload accepted, a whole number of bytes >= 1. `approval`: a two-person rule
    (`Approval()`: marking synced, forced actions on rows in doubt, and bulk actions
    over 100 rows wait for a second person); None (the default): none.
    `redact`: payload fields hidden wherever a row is shown (the command line, the
    dashboard, alerts, logs), added to `DEFAULT_REDACT`; a `Redaction`
    (`Redaction.only("card_number")`) replaces the defaults. The names of
    `DENPYO_REDACT` (comma-separated) are added either way. The channel always gets
    the whole payload.
    `payload_key`: payloads encrypted at rest (AES-256-GCM, bound to the row's channel
    and key; docs/guide/personal-data.md): a key (32 random bytes, as `bytes` or as
    URL-safe base64 text, `new_payload_key()`), a list of keys (the first encrypts,
    all decrypt: put a new key first, keep the old ones until `rotate_payload_key`
    has re-encrypted their rows), a function of no arguments returning the key or
    keys (a key service: called once, here), or a `PayloadCodec` of one's own. None
    (the default): the keys of `DENPYO_PAYLOAD_KEYS` (comma-separated, newest
    first) if it is set, else payloads in clear. A key that is not one is a
    `ConfigurationError` that never shows it.

    `read_url`: a standby (a streaming replica) for the reads of the people on call,
    which leave the primary to the workers: `status`, `list`, `show`, `report`, an
    audit that does not adopt, and the dashboard's pages (`reader`; `read_from`).
    Every write, and every read a write depends on, goes to `url`.

    After `close()` the ledger is done: any use that needs the database or its
    threads raises `ConfigurationError` instead of quietly reopening them.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        on_alert: AlertHandler | None = None,
        name: str | None = None,
        keys_kept_for: float | None = None,
        approval: Approval | None = None,
        redact: Redaction | Iterable[str] = (),
        payload_key: PayloadKeys | None = None,
        read_url: str | None = None,
    ) -> None:
        self.redaction = Redaction.of(redact, env=os.environ.get(REDACT_VARIABLE))
        if approval is not None and not isinstance(approval, Approval):
            raise InvalidInput(f"approval must be an Approval or None, not {approval!r}")
        self.approval = approval
        if keys_kept_for is not None and not (
            isinstance(keys_kept_for, int | float) and keys_kept_for >= 0
        ):
            raise InvalidInput(f"keys_kept_for must be seconds >= 0 or None, not {keys_kept_for!r}")
        if type(max_payload_bytes) is not int or max_payload_bytes < 1:
            raise InvalidInput(
                f"max_payload_bytes must be a whole number of bytes >= 1, not {max_payload_bytes!r}"
            )
        self.keys_kept_for = keys_kept_for
        self.url = database_url(url)
        sealing = Sealing(payload_codec(payload_key))
        self.store: Store = open_store(self.url)
        self.store.sealing = sealing
        self.reader: Store = self.store
        """Where the people on call read (`read_url`), else the store itself."""
        self.reader_url = self.url
        if read_url is not None:
            self.read_from(read_url)
        self.max_payload_bytes = max_payload_bytes
        self.channels: dict[str, ChannelSpec] = {}
        self.alerts = Alerts(self.redaction)
        if on_alert is not None:
            self.alerts.add(on_alert)
        self.calls = CallObservers()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.bridge = LoopThread()
        actor = self.new_actor("app")
        self.gates = Gates(self.store, self.alerts, actor)
        self.flows = Flows(self.store, self.alerts, actor, self.calls, self.gates)
        self._sync = SyncRunner(self.store, self.bridge)
        self._db: ThreadPoolExecutor | None = None
        self._calls: ThreadPoolExecutor | None = None
        self._threads_lock = threading.Lock()

    # -- setup ----------------------------------------------------------------------

    def channel(
        self,
        name: str,
        *,
        verify: VerifyFn | None = None,
        idempotent: bool = False,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: Backoff | None = None,
        lease: float = DEFAULT_LEASE,
        concurrency: int | None = None,
        rate_limit: float | None = None,
        fleet_rate_limit: float | None = None,
        fleet_concurrency: int | None = None,
        down_after: int | None = DEFAULT_DOWN_AFTER,
        classify: Classifier | None = None,
        idempotency_window: float | None = None,
        list_remote: ListRemoteFn | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function (plain or `async def`) as a channel: it
        makes one call and returns the provider's id (or None), or raises (see
        `Rejected`, `Transient`). Every setting is checked here, once
        (`ConfigurationError`).

        :param name: the channel's name, kept on each row: 1-100 letters, digits,
            `_`, `.`, `:` or `-`, starting with a letter or digit.
        :param verify: `verify(sub)` (plain or async) asks the provider whether the
            call with `sub.idempotency_key` arrived: `Delivered(remote_id)`,
            `NotDelivered()` or `Unknown(why)`. Without it (and not `idempotent`), a
            row in doubt waits for a person.
        :param idempotent: the provider honours the idempotency key (a second call
            with it has no second effect): a row in doubt may then be resent without
            a verify, within `idempotency_window`.
        :param max_attempts: attempts before a failing row is exhausted (an alert,
            a person's turn).
        :param backoff: the wait between attempts (default: 1 s, doubling up to an
            hour, half of it drawn at random); a provider's Retry-After is a floor.
        :param lease: seconds a holder keeps a row before it counts as abandoned, by
            the database clock; make it longer than the call's worst case. A worker
            renews it while the call runs.
        :param concurrency: the most calls of this channel in flight at once in one
            worker process (None: the worker's own `concurrency`).
        :param rate_limit: the most calls one worker process starts on this
            channel in any one second, evenly spaced (None: no limit); each of N
            workers starts that many.
        :param fleet_rate_limit: the most calls all workers of all hosts sharing the
            ledger start on this channel in any one second, evenly spaced: the
            provider's own limit (None: none). `submit` then leaves the call to the
            workers, which pace it.
        :param fleet_concurrency: the most calls of this channel in flight across the
            fleet (None: no limit); a worker that dies gives its share back when its
            leases run out. `submit` leaves the call to the workers.
        :param down_after: failed calls in a row (transient, or no answer) after which
            the provider is taken as down for the whole fleet: one probe call at a
            time, and no row spends an attempt, until a call succeeds (None: never).
        :param classify: `classify(exc)` maps an exception to an `Outcome` (None
            falls back to the default: `Rejected`, `Transient`, else ambiguous).
        :param idempotency_window: the seconds the provider remembers an idempotency
            key (Stripe: 86400). Past it, an in-doubt row of an `idempotent` channel
            is verified if the channel can verify, and otherwise waits for a person.
        :param list_remote: `list_remote(since, until)` (plain or async) yields
            `RemoteRecord`s of the calls the provider accepted in that window, for
            `audit`."""
        check_channel_name(name)
        if name in self.channels:
            raise ConfigurationError(f"channel {name!r} is already registered")

        def register(send: F) -> F:
            self.channels[name] = ChannelSpec(
                name=name,
                send=send,
                verify=verify,
                idempotent=idempotent,
                max_attempts=max_attempts,
                backoff=DEFAULT_BACKOFF if backoff is None else backoff,
                lease=lease,
                concurrency=concurrency,
                rate_limit=rate_limit,
                fleet_rate_limit=fleet_rate_limit,
                fleet_concurrency=fleet_concurrency,
                down_after=down_after,
                classify=classify,
                idempotency_window=idempotency_window,
                list_remote=list_remote,
            )
            return send

        return register

    def add_channel(self, name: str, send: SendFn, **options: Any) -> None:
        """`channel()` without the decorator, for functions and bound methods."""
        self.channel(name, **options)(send)

    def on_alert(self, handler: AlertHandler) -> AlertHandler:
        """Register a callback for alerts (usable as a decorator)."""
        return self.alerts.add(handler)

    def on_call(self, handler: CallHandler) -> CallHandler:
        """Register a callback told of every call this process makes: `handler(record)`
        with `record.channel`, `record.outcome` (synced, failed, ambiguous, rejected)
        and `record.seconds` (usable as a decorator; `denpyo.metrics` uses it)."""
        return self.calls.add(handler)

    def migrate(self, *, partitions: str | None = None) -> list[int]:
        """Create or upgrade the denpyo tables; safe to run twice, or at once from two
        processes. `partitions="daily"` or `"monthly"` (PostgreSQL, with pg_partman),
        on a database without the tables, makes the partitioned layout: retention
        drops a day or a month whole instead of deleting its rows."""
        if partitions is not None:
            return self.store.migrate_partitioned(partitions)
        return self.store.migrate()

    def schema_version(self) -> int:
        """The latest migration applied to the database (0: none)."""
        return self.store.schema_version()

    def now(self) -> datetime:
        """The database's clock: what "2h ago" and a row's age count from."""
        return self.store.now()

    def pause(self, channel: str, *, note: str, by: str | None = None) -> bool:
        """Stop the calls of `channel`: every worker stops starting them within one
        poll interval (calls on the wire finish and settle); `enqueue` and `submit`
        still record rows, which wait. `note` (required) says why, `by` who (default:
        the login name); both are kept in the channel's history. False when it was
        paused already (nothing written)."""
        return self._switch(ActionKind.PAUSE, channel, note, by)

    def resume(self, channel: str, *, note: str, by: str | None = None) -> bool:
        """Let the workers start `channel`'s calls again (within one poll interval),
        kept in its history with `note` and `by`. False when it was not paused."""
        return self._switch(ActionKind.RESUME, channel, note, by)

    def _switch(self, kind: ActionKind, channel: str, note: str | None, by: str | None) -> bool:
        """A pause or a resume, with who and why in the channel's history and its
        entry in the action log, written with it."""
        check_channel_name(channel)
        pausing = kind is ActionKind.PAUSE
        text = check_note(note, "a pause" if pausing else "a resume")
        actor = operator_actor(by)
        log = NewAction(kind, Scope.CHANNEL, f"channel {channel}", actor, text, ActionState.DONE)
        switch = self.store.pause_channel if pausing else self.store.resume_channel
        return switch(channel, actor=actor, note=text, log=log)

    def new_actor(self, role: str) -> str:
        """A name for the events this process writes in a role (`worker`, `app`,
        `reconciler`): the role, the ledger's `name` (host:pid) and a short random
        part, so that a row's history says which process did what."""
        return f"{role}:{self.name}:{uuid.uuid4().hex[:6]}"

    # -- submit ---------------------------------------------------------------------

    def submit(
        self, channel: str, key: str, payload: Any, *, ordering_key: str | None = None
    ) -> Submission:
        """Record the call, make it, record the outcome.

        Returns the submission when it is `synced`, or still in flight in another
        process (status `requesting`), or `requesting` and not attempted for a worker
        to send (its ordering key has an earlier row open, its call could not
        start within its lease, or its channel is paused, throttled by the
        provider, down, or limited fleet-wide: the workers pace those calls); for a
        key a person resolved by resending it,
        the resend. Raises `SubmissionRejected`, `SubmissionFailed`,
        `SubmissionInDoubt` or `SubmissionResolved`, each with `.submission`.
        """
        spec, new = self._prepare(channel, key, payload, ordering_key)
        sub = self._sync.run(self.flows.submit(spec, new))
        return self._checked(new, sub)

    async def asubmit(
        self, channel: str, key: str, payload: Any, *, ordering_key: str | None = None
    ) -> Submission:
        """`submit` for asyncio applications."""
        spec, new = self._prepare(channel, key, payload, ordering_key)
        sub = await self.async_runner().run(self.flows.submit(spec, new))
        return self._checked(new, sub)

    def enqueue(
        self,
        channel: str,
        key: str,
        payload: Any,
        *,
        conn: Any = None,
        ordering_key: str | None = None,
        supersedes: int | None = None,
    ) -> Submission:
        """Record the call for a worker to make. With `conn` (sqlite3, psycopg, PyMySQL,
        a SQLAlchemy Connection or Session, or Django's connection) the row joins the
        caller's open transaction: rolled back, no row; committed, a worker sends it.
        A connection to another database is refused, nothing written. `supersedes`
        links the row to the one it replaces (an id of the same channel)."""
        _, new = self._prepare(channel, key, payload, ordering_key, supersedes)
        conn = _dbapi_connection(conn)
        if supersedes is not None:
            self._check_supersedes(channel, supersedes, conn)
        sub, created = self.store.record(new, actor=self.flows.actor, conn=conn)
        if not created:
            check_same_call(sub, new.payload_json)
        return sub

    def enqueue_many(
        self,
        channel: str,
        items: Iterable[tuple[str, Any] | tuple[str, Any, str | None]],
        *,
        conn: Any = None,
    ) -> int:
        """Record many calls for the workers in one transaction: `items` are
        `(key, payload)` or `(key, payload, ordering_key)`, each a tuple or a list (any
        other item is `InvalidInput`, naming its position). Keys already recorded with
        the same payload are skipped. Rows are checked as they are written; any bad
        item (or a key recorded with another payload: `KeyReused`) raises and nothing
        is kept: the ledger's own transaction rolls back, and in yours (`conn`) you
        roll back, as after any error inside a transaction.
        Returns how many rows were new."""
        return self.store.record_many(
            self._prepared_many(channel, items, tracing.row_context()),
            actor=self.flows.actor,
            check=_same_call,
            conn=_dbapi_connection(conn),
        )

    def _prepared_many(
        self,
        channel: str,
        items: Iterable[tuple[str, Any] | tuple[str, Any, str | None]],
        trace: tuple[str | None, str | None],
    ) -> Iterator[NewSubmission]:
        """Each item checked as it is written (as `_prepare` checks one); a key twice
        in one call is refused. What every item shares is worked out once: the
        channel, and the trace context (`trace`, taken by the caller: this generator
        may run in another thread)."""
        self._spec(channel)
        limit = self.max_payload_bytes
        seen: set[str] = set()
        for n, item in enumerate(items):
            key, payload, ordering_key = _item(n, item)
            check_key(key)
            if ordering_key is not None:
                check_key(ordering_key, "ordering_key")
            payload_json = encode_payload(payload, limit)
            if key in seen:
                raise InvalidInput(f"{channel}:{key} appears twice in one enqueue_many")
            seen.add(key)
            yield NewSubmission(
                channel, key, new_idempotency_key(), payload_json, ordering_key, None, *trace
            )

    async def aenqueue(
        self,
        channel: str,
        key: str,
        payload: Any,
        *,
        conn: Any = None,
        ordering_key: str | None = None,
    ) -> Submission:
        """`enqueue` for asyncio applications. With `conn` (psycopg's AsyncConnection,
        asyncpg, aiosqlite, aiomysql, or SQLAlchemy's AsyncConnection or AsyncSession)
        the row joins the caller's open transaction: rolled back, no row; committed,
        a worker sends it. Without, in the ledger's own transaction."""
        if conn is None:
            return await self.async_runner().in_db(
                tracing.carried(self.enqueue), channel, key, payload, ordering_key=ordering_key
            )
        _, new = self._prepare(channel, key, payload, ordering_key)
        sub, created = await self.store.arecord(new, actor=self.flows.actor, conn=conn)
        if not created:
            check_same_call(sub, new.payload_json)
        return sub

    async def aenqueue_many(
        self,
        channel: str,
        items: Iterable[tuple[str, Any] | tuple[str, Any, str | None]],
        *,
        conn: Any = None,
    ) -> int:
        """`enqueue_many` for asyncio applications; `conn` as in `aenqueue`."""
        if conn is None:
            enqueue_many = tracing.carried(self.enqueue_many)  # the row keeps this trace
            return await self.async_runner().in_db(enqueue_many, channel, items)
        return await self.store.arecord_many(
            self._prepared_many(channel, items, tracing.row_context()),
            actor=self.flows.actor,
            check=_same_call,
            conn=conn,
        )

    # -- read -----------------------------------------------------------------------

    def get(self, channel: str, key: str) -> Submission | None:
        """The submission for a channel and business key, or None. A key no row can
        have is `InvalidKey`, as in `submit` (a driver would raise on a lone surrogate)."""
        return self.store.get_by_key(channel, check_key(key))

    async def aget(self, channel: str, key: str) -> Submission | None:
        """`get` without blocking the event loop: the read runs on the ledger's
        database threads, for an asyncio application (FastAPI, aiohttp)."""
        return await self.async_runner().in_db(self.store.get_by_key, channel, check_key(key))

    def get_by_id(self, submission_id: int) -> Submission | None:
        """The submission with this id, or None: also for a whole number no row can
        have (0, negative, past 64 bits). An id that is not a whole number is
        `InvalidInput`."""
        return self.store.get(submission_id) if check_id(submission_id) else None

    async def aget_by_id(self, submission_id: int) -> Submission | None:
        """`get_by_id` without blocking the event loop (the ledger's database threads)."""
        if not check_id(submission_id):
            return None
        return await self.async_runner().in_db(self.store.get, submission_id)

    def events(self, submission_id: int) -> list[Event]:
        """A submission's history, oldest first (none for an id no row can have, as
        `get_by_id`)."""
        return self.store.events(submission_id) if check_id(submission_id) else []

    async def aevents(self, submission_id: int) -> list[Event]:
        """`events` without blocking the event loop (the ledger's database threads)."""
        if not check_id(submission_id):
            return []
        return await self.async_runner().in_db(self.store.events, submission_id)

    # -- work -------------------------------------------------------------------------

    def work(
        self,
        *,
        until_idle: bool = False,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> WorkReport:
        """Send enqueued rows, retry due failures, reconcile in-doubt rows.
        With `until_idle`, return once nothing is due; otherwise run until stopped
        (Ctrl-C stops claiming and lets the calls in flight settle)."""
        worker = Worker(self, concurrency=concurrency, poll_interval=poll_interval)
        return self._run_worker(worker, worker.run(until_idle=until_idle))

    async def awork(
        self,
        *,
        until_idle: bool = False,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> WorkReport:
        """`work` on the running event loop."""
        worker = Worker(self, concurrency=concurrency, poll_interval=poll_interval)
        return await worker.run(until_idle=until_idle)

    def reconcile(
        self,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        progress: Callable[[WorkReport], None] | None = None,
    ) -> WorkReport:
        """One pass over the in-doubt rows that are due: verify, sync, resend or alert,
        with up to `concurrency` verifies in flight; `progress(report so far)` in this
        thread as it goes."""
        worker = Worker(self, concurrency=concurrency, actor=self.new_actor("reconciler"))
        tick = None if progress is None else (lambda: progress(worker.report))
        return self._run_worker(worker, worker.reconcile_pass(), tick)

    async def areconcile(self, *, concurrency: int = DEFAULT_CONCURRENCY) -> WorkReport:
        """`reconcile` on the running event loop."""
        worker = Worker(self, concurrency=concurrency, actor=self.new_actor("reconciler"))
        return await worker.reconcile_pass()

    def _run_worker(
        self,
        worker: Worker,
        run: Coroutine[Any, Any, WorkReport],
        tick: Callable[[], None] | None = None,
    ) -> WorkReport:
        """Run on the private loop, where async channels keep their sessions."""
        return self.bridge.wait(run, worker.stop, tick)

    def audit(
        self,
        channel: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        step: float = 3600.0,
        slack: float = 3600.0,
        progress: Progress | None = None,
        adopt: bool = False,
    ) -> AuditReport:
        """Compare the ledger with the provider's own records (the channel's
        `list_remote`) over [since, until) (timezone-aware; default: the last 24 hours
        by the database clock), `step` seconds at a time. A synced row the provider did
        not list in its step is looked for `slack` seconds either side, then verified,
        before it is called missing (engine/audit.py). Writes nothing, except with
        `adopt`: a call the provider accepted that the ledger has no row of (lost in a
        database failover) is recorded as a synced row of the key `list_remote` gives
        (`RemoteRecord.key`), so that a later submit of that key sends nothing."""
        spec = self._spec(channel)
        if until is None:
            until = self.store.now()
        if since is None:
            since = until - timedelta(days=1)
        auditor = Auditor(self.store if adopt else self.reader, self.bridge, self._sync)
        report = auditor.run(
            spec, since, until, step=step, slack=slack, progress=progress, adopt=adopt
        )
        report.unknown_events = self.reader.unknown_provider_events(since, until)
        return report

    def receive_provider_event(
        self,
        provider: str,
        event_id: str,
        kind: str,
        *,
        idempotency_key: str | None = None,
        remote_id: str | None = None,
        detail: str | None = None,
    ) -> Received:
        """What a provider told by webhook (denpyo.webhooks calls this once it checked the
        signature): the row of `idempotency_key`, else of `remote_id`, in doubt or
        failed becomes `synced` with `remote_id` (as a verify answering Delivered
        would), its history saying "confirmed by the provider's webhook"; a synced or
        rejected row gets the event in its history, and a bounce, a complaint, a
        dispute or a failed delivery raises an alert; an event that names no row is
        kept, and `audit` lists it. The same `event_id` of a `provider` twice is
        recorded once."""
        event = ProviderEvent(provider, event_id, kind, idempotency_key, remote_id, detail)
        return provider_events.receive(self, event)

    def prune(
        self,
        *,
        older_than: float | None = None,
        synced: float | None = None,
        rejected: float | None = None,
        abandoned: float | None = None,
        batch_size: int = 1000,
    ) -> int:
        """Remove settled rows, each state after its own age in seconds since the row was
        created: `synced`, `rejected` (resolved by a person), `abandoned` (failed rows a
        person resolved); `older_than` for every state not given. Rows still open, in
        doubt, or waiting for a person are never removed. Their keys stay known (a key
        submitted again calls nothing and returns its outcome) and their counts stay in
        `report`; keys older than `keys_kept_for` expire (are let go). In batches of
        `batch_size`, so that no transaction holds locks for long. Returns how many
        rows went."""
        retention = Retention.of(
            older_than=older_than, synced=synced, rejected=rejected, abandoned=abandoned
        )
        _check_batch_size(batch_size)
        total = sum(archiving.remove(self.store, retention, batch_size))
        if self.keys_kept_for is not None:
            while self.store.expire_keys(self.keys_kept_for, batch_size) >= batch_size:
                pass
        return total

    def archive(
        self,
        to: str | os.PathLike[str],
        *,
        older_than: float | None = None,
        synced: float | None = None,
        rejected: float | None = None,
        abandoned: float | None = None,
        batch_size: int = 1000,
        progress: Callable[[int], None] | None = None,
    ) -> ArchiveReport:
        """`prune`, with each batch written first to Parquet under `to` (a folder, or
        `s3://bucket/prefix`), read back, and only then removed: the rows under
        `submissions/`, their events under `events/`, by channel and month. A target
        that cannot be written fails first (`ArchiveError`), nothing removed. Needs
        the `archive` extra."""
        from denpyo.archive import Archive

        retention = Retention.of(
            older_than=older_than, synced=synced, rejected=rejected, abandoned=abandoned
        )
        _check_batch_size(batch_size)
        target = Archive(to)
        return archiving.archive(
            self.store, target, retention, batch_size=batch_size, progress=progress
        )

    def rotate_payload_key(
        self,
        *,
        batch_size: int = 500,
        channel: str | None = None,
        progress: RotationProgress | None = None,
    ) -> KeyRotation:
        """Re-encrypt with the first configured key every live payload sealed with
        another key, and every payload still in clear (so turning encryption on and
        running this encrypts the rows written before); forgotten rows are skipped, and
        rows no configured key opens are listed, never touched. In batches of
        `batch_size` rows (of `channel`, or all), one transaction each, compare-and-set:
        a run stopped half-way is run again and goes on. Workers may run meanwhile.
        `progress(report)` after each batch. Archived Parquet files are not rewritten:
        keep the old keys configured to read them. `ConfigurationError` when no key is
        configured."""
        _check_batch_size(batch_size)
        if channel is not None:
            check_channel_name(channel)
        return rotate_payloads(
            self.store, batch_size=batch_size, channel=channel, progress=progress
        )

    def forget(
        self,
        ref: str | None = None,
        *,
        where: str | None = None,
        channel: str | None = None,
        note: str,
        by: str | None = None,
        dry_run: bool = False,
    ) -> ForgetResult:
        """Erase personal data and keep the slip: the payloads of a call's rows (`ref`,
        `"CHANNEL:KEY"`, with the rows it replaced and its resends), or of every row
        whose payload has the string `VALUE` at `FIELD` (`where="FIELD=VALUE"`, a
        dotted path for a nested field; in `channel`, else every channel), live and
        archived. Each payload becomes JSON null, its last error goes, and the texts
        about its row that quote it (resolution, history, action log) have those
        values replaced by `[forgotten]`; status, attempts, times, ids and remote id
        stay, so the key is never sent again and the counts do not change. `note`
        (required) and `by` go into each row's history and the action log (never
        the value searched for). A row still open refuses the whole forget
        (`InvalidInput`, nothing written): abandon it first. `dry_run`: what would
        be forgotten, nothing written. Archived rows need the `archive` extra."""
        return forgetting.forget(
            self, ref, where=where, channel=channel, note=note, by=by, dry_run=dry_run
        )

    def report(
        self,
        *,
        by: str = "month",
        channel: str | None = None,
        since: date | None = None,
        until: date | None = None,
    ) -> list[ReportRow]:
        """How many rows were created per period (`day` or `month`, UTC), channel and
        status, in [since, until) (days; default: all of them): the live rows where
        they stand now, the removed ones where they stood when they went. The same
        before and after a prune."""
        check_period(by)
        first = since or date(1970, 1, 1)
        if until is None:
            last = max(self.store.now().date(), first) + timedelta(days=1)
        elif (last := until) <= first:
            raise InvalidInput(f"the report's since ({first}) must come before until ({last})")
        return fold(self.reader.report_counts(first, last, channel), by)

    # -- plumbing ---------------------------------------------------------------------

    def async_runner(self, ops: AsyncStore | None = None) -> AsyncRunner:
        """A runner on the ledger's threads; `ops`: the claims and changes of a
        running worker (`Store.async_ops`), by default run in those threads."""
        with self._threads_lock:  # made once, whichever thread's loop comes first
            if self._db is None:
                self.store.check_open()  # closed: not the threads again either
                threads = self.store.dialect_record.db_threads
                self._db = ThreadPoolExecutor(threads, thread_name_prefix="denpyo-db")
                self._calls = _CallThreads(32, thread_name_prefix="denpyo-call")
            return AsyncRunner(self.store, self._db, self._calls, ops)

    def read_from(self, read_url: str) -> None:
        """Read for the people on call from `read_url`, a standby of the database
        (`Ledger(read_url=...)`; the command line's `--read-db`)."""
        reader = open_store(database_url(read_url))
        if reader.dialect != self.store.dialect:
            reader.close()
            raise InvalidDatabaseURL(
                f"read_url {shown_url(read_url)!r} is not a {self.store.dialect} database, "
                f"as the ledger's is"
            )
        reader.sealing = self.store.sealing
        if self.reader is not self.store:
            self.reader.close()
        self.reader, self.reader_url = reader, read_url

    @property
    def reads_standby(self) -> bool:
        """Whether reads go to a standby (`read_from`) rather than the primary."""
        return self.reader is not self.store

    def replica_lag(self) -> float | None:
        """Seconds the reads of `read_url` are behind the primary (None: no read_url,
        or it cannot say)."""
        return None if self.reader is self.store else self.reader.replica_lag()

    def close(self) -> None:
        """Release connections, threads and channel resources, for good: a closed
        ledger refuses further use (`ConfigurationError`). Closing twice is harmless."""
        for resource in self._channel_resources():
            closer = getattr(resource, "close", None)
            if callable(closer):
                closer()
        self.bridge.close()
        with self._threads_lock:
            pools = (self._db, self._calls)
            self._db = self._calls = None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)
        if self.reader is not self.store:
            self.reader.close()
        self.store.close()

    async def aclose_channels(self) -> None:
        """Close what async channels opened on the running loop (e.g. HTTP sessions);
        call it before an event loop of yours that ran `awork`/`asubmit` ends."""
        for resource in self._channel_resources():
            closer = getattr(resource, "aclose", None)
            if callable(closer):
                await closer()

    def _channel_resources(self) -> list[object]:
        """Objects whose bound methods are channels or verifies (an HttpChannel, say)."""
        found: list[object] = []
        for spec in self.channels.values():
            for fn in (spec.send, spec.verify, spec.list_remote):
                owner = getattr(fn, "__self__", None)
                if owner is not None and all(owner is not seen for seen in found):
                    found.append(owner)
        return found

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spec(self, channel: str) -> ChannelSpec:
        try:
            return self.channels[channel]
        except KeyError:
            known = ", ".join(sorted(self.channels)) or "none"
            raise UnknownChannel(
                f"no channel named {channel!r} is registered (registered: {known})"
            ) from None

    def _prepare(
        self,
        channel: str,
        key: str,
        payload: Any,
        ordering_key: str | None,
        supersedes: int | None = None,
    ) -> tuple[ChannelSpec, NewSubmission]:
        """Check everything before anything is written: bad input writes nothing."""
        spec = self._spec(channel)
        check_key(key)
        if ordering_key is not None:
            check_key(ordering_key, "ordering_key")
        traceparent, tracestate = tracing.row_context()  # the row keeps the caller's trace
        return spec, NewSubmission(
            channel=channel,
            key=key,
            idempotency_key=new_idempotency_key(),
            payload_json=encode_payload(payload, self.max_payload_bytes),
            ordering_key=ordering_key,
            supersedes=supersedes,
            traceparent=traceparent,
            tracestate=tracestate,
        )

    def _check_supersedes(self, channel: str, supersedes: int, conn: Any) -> None:
        """The row a new one replaces must exist, in the same channel: checked before
        the insert (in the caller's transaction, which may have written it), since a
        caller's connection may not enforce foreign keys (sqlite3) and a violation
        would abort the caller's whole transaction (PostgreSQL)."""
        known = type(supersedes) is int and check_id(supersedes)
        old = self.store.get(supersedes, conn=conn) if known else None
        if old is None:
            raise SubmissionNotFound(f"supersedes={supersedes!r}: no submission has that id")
        if old.channel != channel:
            raise InvalidInput(
                f"supersedes={supersedes}: submission {supersedes} is of channel "
                f"{old.channel!r}, not {channel!r}"
            )

    def _checked(self, new: NewSubmission, sub: Submission) -> Submission:
        """Turn the row a submit ended with into a return or the matching error. The
        error's text, which ends up in logs, has the row's hidden values scrubbed
        (`redact`); its `.submission` is the row as it is."""
        if sub.status is Status.SYNCED or sub.in_flight or sub.key != new.key:
            return sub  # (another key: the resend a person made of this one)
        shown = self.redaction.submission(sub)
        if sub.resolution is not None:
            raise SubmissionResolved(
                f"{sub.channel}:{sub.key} was resolved by a person ({shown.resolution}); "
                "it is never sent again: submit a new key to send anew",
                sub,
            )
        if sub.status is Status.REJECTED:
            raise SubmissionRejected(f"{sub.channel}:{sub.key} rejected: {shown.last_error}", sub)
        if sub.in_doubt:
            raise SubmissionInDoubt(
                f"{sub.channel}:{sub.key} is in doubt (the call may have arrived): "
                f"{shown.last_error or 'lease expired'}",
                sub,
            )
        if sub.status is Status.FAILED:
            raise SubmissionFailed(f"{sub.channel}:{sub.key} failed: {shown.last_error}", sub)
        return sub  # `requesting`, not yet attempted: a worker will send it


def _check_batch_size(batch_size: int) -> None:
    if type(batch_size) is not int or batch_size < 1:
        raise InvalidInput(f"batch_size must be a whole number >= 1, not {batch_size!r}")


def database_url(url: str | None) -> str:
    """The URL given, else `DENPYO_DATABASE_URL`, else the default file. An empty URL
    given on purpose is refused: an unset variable in a script (`--db "$DB"`) must not
    quietly open, or migrate, ./denpyo.db."""
    if url is None:
        return os.environ.get("DENPYO_DATABASE_URL") or DEFAULT_URL
    if not url.strip():
        raise InvalidDatabaseURL(
            "the database URL is empty: give one (sqlite:///app.db, postgresql://...), "
            "or none at all for $DENPYO_DATABASE_URL"
        )
    return url


_ITEM_SHAPES = "(key, payload) or (key, payload, ordering_key)"


def _item(n: int, item: object) -> tuple[Any, Any, Any]:
    """The parts of `enqueue_many`'s item `n`: only a tuple or list of 2 or 3 is one.
    A string would unpack into its letters, and a longer tuple lose its extra parts."""
    if isinstance(item, tuple | list):
        if len(item) == 2:
            return item[0], item[1], None
        if len(item) == 3:
            return item[0], item[1], item[2]
        shape = f"a {type(item).__name__} of {len(item)}"
    else:
        shape = f"a {type(item).__name__}"
    raise InvalidInput(f"enqueue_many: items[{n}] must be {_ITEM_SHAPES}, not {shape}")


def _same_call(new: NewSubmission, sub: Submission) -> None:
    check_same_call(sub, new.payload_json)


def _dbapi_connection(conn: Any) -> Any:
    """Unwrap a SQLAlchemy Session or Connection, or a Django connection, to its
    driver connection, in its current transaction; driver connections pass through."""
    if conn is None:
        return None
    module = type(conn).__module__
    if module.startswith("sqlalchemy"):
        if hasattr(conn, "get_bind") and hasattr(conn, "connection"):  # Session
            conn = conn.connection()
        return conn.connection.dbapi_connection
    if hasattr(conn, "ensure_connection") and hasattr(conn, "settings_dict"):
        # Django's `connection` (or `connections[alias]`, any backend's wrapper):
        # Django opens its driver connection lazily; inside `atomic()` that
        # connection is in the block's transaction, so the row commits with it.
        conn.ensure_connection()
        return conn.connection
    return conn
