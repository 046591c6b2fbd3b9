"""What a database must implement to hold denpyo's ledger: every operation, in one place.

`Store` lists the operations that the engine, the CLI and the operator use. A
database implements all of them. A SQL database gets almost all of them from
`SqlStore` (store/sql_store.py) by supplying:

- its record in `DIALECTS` (store/dialects.py): its URL schemes, its store
  class, the extra that brings its driver, and the rest that is not SQL;
- `sql/<dialect>.sql`, the named queries that its classes list in `QUERIES`,
  and `migrations/<dialect>/`, the numbered schema scripts;
- `transaction()`, `reading()` and `one_statement()`: contexts that yield a `Tx`,
  the executor below, which runs one named statement at a time and knows no
  query names (store/connections.py), and how its driver's errors read
  (`DriverErrors`, there too);
- the four writes inside a transaction (record one, record many, claim, move):
  from `PortableSqlStore` (store/portable.py: several portable statements each;
  SQLite and MariaDB), or its own (PostgreSQL: one statement each);
- where its driver differs, its conversions of times, JSON and lists: rows to
  objects in store/rows.py, values to parameters in store/params.py.

The caller's own connections, checked and bridged from asyncio, are
store/callers.py (the asyncio drivers: store/async_conn.py).

The worker's hot path, claims and settles, also has an async form, `AsyncStore`:
`InThreads` runs the sync operations in the worker's database threads, and a
driver with an asyncio API gives its own (PostgreSQL).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from denpyo.domain.actions import ActionKind, ActionRecord, ActionRow, ActionState, RowOutcome
from denpyo.domain.channel_state import ChannelEvent, ChannelState
from denpyo.domain.durability import Durability
from denpyo.domain.filters import Filter
from denpyo.domain.forgetting import Scrubber, Where
from denpyo.domain.holders import Holding
from denpyo.domain.moves import Change
from denpyo.domain.provider_events import ProviderEvent, Received
from denpyo.domain.retention import Retention
from denpyo.domain.status import Status
from denpyo.domain.submission import Event, Submission
from denpyo.errors import ConfigurationError

if TYPE_CHECKING:
    from denpyo.store.actions import NewAction, Planned
    from denpyo.store.dialects import Capabilities, Dialect
    from denpyo.store.payload_keys import Reseal, StoredPayload
    from denpyo.store.sealing import Sealing

Row = Mapping[str, Any]

CLOSED = "this ledger is closed: close() released its connections; open a new Ledger"


@dataclass(frozen=True, slots=True)
class NewSubmission:
    """What submit and enqueue ask the store to record."""

    channel: str
    key: str
    idempotency_key: str
    payload_json: str
    ordering_key: str | None = None
    supersedes: int | None = None
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of rows, and where the next one starts (None: there is none).

    `older` is a keyset cursor: for a list ordered by id, the next page holds the
    ids below it; for a search in key order, the keys after it."""

    rows: list[Submission]
    older: int | str | None


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of the submissions: the rows whose ids are in [from_id, to_id),
    created in [from_at, to_at)."""

    from_id: int
    to_id: int
    from_at: datetime
    to_at: datetime


class Store(ABC):
    """Every operation on the ledger's tables. Each database implements all of them."""

    dialect: ClassVar[str]  # its record's name in store/dialects.py

    @property
    @abstractmethod
    def dialect_record(self) -> Dialect:
        """Its database's record (store/dialects.py); a store whose tables turn out to
        be a variant's layout (PostgreSQL's partitioned one) answers that variant's."""

    @property
    def capabilities(self) -> Capabilities:
        """What its database can do that not every one can: the engine asks these,
        never the database's name."""
        return self.dialect_record.capabilities

    @classmethod
    @abstractmethod
    def from_url(cls, url: str) -> Store:
        """The store a URL names (a scheme of its database's, checked already by
        `open_store`); it connects at first use."""

    # -- schema ------------------------------------------------------------------------

    @abstractmethod
    def migrate(self) -> list[int]:
        """Apply the migrations this database lacks, under a lock; returns their numbers."""

    def migrate_partitioned(self, every: str) -> list[int]:
        """`migrate` to the partitioned layout, `every` "daily" or "monthly"
        (PostgreSQL's only: store/postgresql_partitions.py)."""
        raise ConfigurationError(
            f"partitions are PostgreSQL's (kept by pg_partman); {self.dialect} keeps one table"
        )

    def partitions(self) -> list[Partition]:
        """The partitions of the submissions, oldest first (none: one table)."""
        return []

    def maintain_partitions(self) -> None:
        """Make the partitions of the coming intervals (none: one table)."""
        return

    def partition_rows(self, part: Partition, after: int, limit: int) -> list[Submission]:
        """The rows of a partition after id `after`, in id order, up to `limit`."""
        return []

    def drop_partition(
        self,
        part: Partition,
        retention: Retention,
        *,
        before_drop: Callable[[], None] | None = None,
        archived_to: str | None = None,
    ) -> int:
        """Drop a partition whose rows `retention` lets go, all of them, with their
        history, after remembering their keys and counts (`before_drop()` runs once
        they can no longer change: the archive writes them); how many rows went (0: a
        row stays, or the partition could not be locked now: it waits)."""
        return 0

    @abstractmethod
    def schema_version(self) -> int:
        """The newest migration applied (0: none)."""

    @abstractmethod
    def latest_version(self) -> int:
        """The newest migration this denpyo knows."""

    @abstractmethod
    def now(self) -> datetime:
        """The database clock, which every lease and due time is measured against."""

    def replica_lag(self) -> float | None:
        """Seconds this database's data is behind its primary, when it is a standby
        (`Ledger(read_url=...)`); None: it is no standby, or cannot say."""
        return None

    def durability(self) -> Durability | None:
        """What the server says about its commits surviving its loss (PostgreSQL's:
        its standbys and synchronous settings); None: nothing denpyo can read."""
        return None

    # -- writes --------------------------------------------------------------------------

    @abstractmethod
    def record(
        self, new: NewSubmission, *, actor: str, lease: float | None = None, conn: Any = None
    ) -> tuple[Submission, bool]:
        """Record a submission with its `created` event, or return the row already
        recorded for its channel and key: (row, created). With `lease`, the row is
        created held by `actor` with its first attempt started (inline submit);
        without, it waits for a worker (enqueue). With `conn`, inside the caller's
        open transaction on that connection, never committed here."""

    @abstractmethod
    def record_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any = None,
    ) -> int:
        """Record many submissions for the workers in one transaction; returns how many
        were new. `news` may be produced while the rows are written: if it raises,
        nothing is written. `check(new, existing)` sees each key already recorded
        with another idempotency key, and may raise likewise."""

    @abstractmethod
    async def arecord(
        self, new: NewSubmission, *, actor: str, conn: Any
    ) -> tuple[Submission, bool]:
        """`record` for the workers, inside an application's open asyncio transaction
        on `conn` (store/async_conn.py lists the drivers), never committed here."""

    @abstractmethod
    async def arecord_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any,
    ) -> int:
        """`record_many` inside an application's open asyncio transaction on `conn`."""

    @abstractmethod
    def adopt(
        self, new: NewSubmission, *, remote_id: str | None, actor: str, note: str
    ) -> Submission | None:
        """Record a call the provider accepted that the ledger has no row of, as a
        synced row with an `adopted` event, in one transaction (None: the channel and
        key have a row, or a remembered key, already; nothing written)."""

    @abstractmethod
    def record_resend_of_removed(
        self,
        new: NewSubmission,
        *,
        actor: str,
        detail: str,
        old_id: int,
        resolution: Callable[[int], str],
        log: NewAction | None = None,
    ) -> tuple[Submission, Submission]:
        """A person's resend of a removed row (`get` finds its memory): record `new`
        and write `resolution(new id)` and the new row to the memory of `old_id`, and
        the action's entry (`log`), in one transaction. `new.supersedes` is None: the row it
        replaces is gone. Raises `LeaseLost` (nothing written) when the memory was
        resent or forgotten meanwhile. Returns (new, old as remembered now)."""

    @abstractmethod
    def claim_ready(
        self, channel: str, *, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        """Hold up to `limit` due rows of a channel (never attempted, or a transient
        failure due for retry) for `holder`, and start their next attempt, with its
        event, in the same transaction. Rows others hold are skipped, never waited for."""

    @abstractmethod
    def claim_in_doubt(
        self, channel: str, *, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        """Hold up to `limit` due in-doubt rows of a channel for `holder`, so that one
        reconciler at a time verifies each; their status does not change."""

    def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        """`claim_in_doubt` or `claim_ready`."""
        claim = self.claim_in_doubt if in_doubt else self.claim_ready
        return claim(channel, holder=holder, limit=limit, lease=lease)

    @abstractmethod
    def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        """Apply compare-and-set changes (domain/moves.py: moves, and settles, which
        each database writes by a statement of their own), each with its event, in
        one transaction, in order (a row may be named twice); None where a change lost
        because the row was no longer where it expected it."""

    @abstractmethod
    def renew(self, holds: Sequence[tuple[int, str, float]]) -> set[int]:
        """Extend the leases of rows still held by their holders: [(id, holder, lease)].
        Returns the ids renewed. A row taken by someone else is not renewed, nor one a
        settle has locked at this instant (never waited for: no deadlock with it)."""

    # -- removal: rows leave, their keys and counts stay (store/removal.py) ---------------

    @abstractmethod
    def removable(self, retention: Retention, limit: int = 1000) -> list[Submission]:
        """One batch of the rows `retention` lets go (settled, older than their state's
        age), oldest first, as read now."""

    @abstractmethod
    def count_removable(self, retention: Retention) -> list[tuple[str, str, int]]:
        """How many rows `retention` lets go now, per channel and status:
        [(channel, status, n)] (a dry run of `prune` or `archive`)."""

    @abstractmethod
    def remove(
        self, ids: Sequence[int], retention: Retention, *, archived_to: str | None = None
    ) -> int:
        """Remove these rows, those of them `retention` still lets go (one that moved
        since it was read stays): remember each key and outcome (`archived_to`: where
        the row was archived), add them to the removed counts, delete their history and
        them. Returns how many went. From then on `get`, `get_by_key` and an insert of
        the same key find the remembered outcome."""

    @abstractmethod
    def events_of(self, ids: Sequence[int]) -> list[Event]:
        """The histories of many rows (a batch the archive writes), oldest first."""

    @abstractmethod
    def expire_keys(self, older_than: float, limit: int = 1000) -> int:
        """Let go of one batch of remembered keys whose rows were created more than
        `older_than` seconds ago (`keys_kept_for`); returns how many."""

    @abstractmethod
    def report_counts(
        self, since: date, until: date, channel: str | None = None
    ) -> list[tuple[date, str, str, str, int]]:
        """(day, channel, status, error kind or "", rows) for the rows created in
        [since, until): the live ones where they stand now, and the removed ones as
        they were when they went."""

    # -- reads ---------------------------------------------------------------------------

    @abstractmethod
    def get(self, submission_id: int, *, conn: Any = None) -> Submission | None:
        """One row by id; with `conn`, read in the caller's open transaction (which
        sees what it wrote and has not committed)."""

    @abstractmethod
    def get_by_key(self, channel: str, key: str) -> Submission | None: ...

    @abstractmethod
    def find_superseding(self, submission_id: int) -> Submission | None:
        """The submission that resends `submission_id`, if there is one."""

    @abstractmethod
    def ordering_waits(self, sub: Submission) -> bool:
        """Whether an earlier row of `sub`'s channel and ordering key is still open:
        then `sub` waits its turn (False for a row without an ordering key)."""

    @abstractmethod
    def events(self, submission_id: int) -> list[Event]:
        """A submission's history, oldest first."""

    @abstractmethod
    def get_by_idempotency_keys(self, keys: Sequence[str]) -> list[Submission]:
        """The rows of these idempotency keys, in any order (keys no row has are left
        out): how the audit finds the ledger's side of a batch of the provider's records."""

    @abstractmethod
    def list_synced(
        self,
        channel: str,
        since: datetime,
        until: datetime,
        *,
        after: tuple[datetime, int] | None = None,
        limit: int = 500,
    ) -> list[Submission]:
        """One page of a channel's synced rows whose `synced_at` is in [since, until),
        ordered by (synced_at, id): the audit reads a window of any size page by page.
        `after` is the (synced_at, id) of the last row of the previous page."""

    @abstractmethod
    def history(self, submission_id: int) -> tuple[list[Event], datetime]:
        """The row's events, oldest first, and the database clock, read together: what
        a reconciler reads of a row in doubt (`domain.doubt.DoubtHistory`)."""

    @abstractmethod
    def list_submissions(self, flt: Filter) -> list[Submission]:
        """Rows matching an operator's filter, newest first."""

    @abstractmethod
    def list_page(self, flt: Filter, *, before: int | None = None, window: int = 10_000) -> Page:
        """Rows matching `flt`, newest first, at most `flt.limit`, among the `window`
        ids below `before` (None: from the newest). A page reads at most `window` rows
        by primary key however rare the matches, so every page costs the same on any
        table; `older` says where the next one starts (a page may be short, even empty,
        when matches are rare)."""

    @abstractmethod
    def search_keys(
        self, channel: str, prefix: str, *, after: str | None = None, limit: int = 50
    ) -> Page:
        """Rows of `channel` whose business key starts with `prefix`, in key order,
        after the key `after`: "was the invoice for order 42 sent?" in one index read."""

    @abstractmethod
    def channels(self) -> list[str]:
        """The channels that have rows, in order: one index probe per channel, however
        many rows each has."""

    @abstractmethod
    def attention_page(self, *, before: int | None = None, limit: int = 50) -> Page:
        """The needs-a-person queue, newest first, below id `before`: unresolved rows
        that are rejected, exhausted or in doubt. Read from indexes that hold only such
        rows (and the rows held by senders), never from the settled history."""

    @abstractmethod
    def fold_outcomes(self, limit: int = 20_000, lag: float = 10.0) -> int:
        """Add up to `limit` new events to the outcomes per minute that the chart reads
        (attempts as `sent`, settles by status), and forget minutes older than 25 hours;
        returns the span of event ids folded. A fold running elsewhere is not waited for.
        Events younger than `lag` seconds wait for the next fold: one written by a
        transaction that stays open longer than that may be missed by the chart (it is
        a chart, not the ledger)."""

    @abstractmethod
    def outcomes_per_minute(
        self, hours: int = 24, channel: str | None = None
    ) -> list[tuple[datetime, str, int]]:
        """(minute, outcome, count) for the last `hours`, oldest first, as folded so far:
        outcome is `sent` (a call started), `synced`, `failed` or `rejected`."""

    @abstractmethod
    def count_by_status(self, channel: str | None = None) -> list[tuple[str, Status, int]]:
        """(channel, status, rows) for every pair that has rows."""

    @abstractmethod
    def count_attention(self, channel: str | None = None) -> dict[str, Any]:
        """Counts of the rows a person may need to see (in_doubt, exhausted,
        rejected_open, needs_person, pending, resolved), the oldest pending row's
        creation time (`oldest_pending`) and the database clock (`now`)."""

    @abstractmethod
    def count_in_doubt_due(self, channel: str) -> int:
        """In-doubt rows of one channel that a reconciler would take now."""

    @abstractmethod
    def holdings(self, channel: str | None = None) -> list[Holding]:
        """The rows held now under a live lease (being sent or verified, or their
        holder gone and the lease not yet ended), per channel and holder, the lease
        that ends last first (optionally one channel)."""

    # -- what the fleet shares about each channel (store/controls.py) ----------------------

    @abstractmethod
    def channel_states(self) -> list[ChannelState]:
        """Every channel that has a state (a channel without one is running)."""

    @abstractmethod
    def channel_history(self, channel: str, limit: int = 50) -> list[ChannelEvent]:
        """The channel's pauses, resumes, downs and ups, newest first."""

    @abstractmethod
    def pause_channel(
        self, channel: str, *, actor: str, note: str, log: NewAction | None = None
    ) -> bool:
        """Pause the channel, with a line of history; False (nothing written) if it is."""

    @abstractmethod
    def resume_channel(
        self, channel: str, *, actor: str, note: str, log: NewAction | None = None
    ) -> bool:
        """Resume the channel, with a line of history; False (nothing written) if it
        was not paused."""

    @abstractmethod
    def throttle_channel(self, channel: str, *, throttle_for: float, note: str) -> bool:
        """No call of the channel starts for `throttle_for` seconds (a longer wait already
        asked stands: False)."""

    @abstractmethod
    def channel_down(self, channel: str, *, actor: str, note: str, probe_in: float) -> bool:
        """The provider is down: one probe in `probe_in` seconds; True only for the
        caller that made it so (the others find it down already)."""

    @abstractmethod
    def take_probe(self, channel: str, *, next_in: float) -> bool:
        """Take the due probe call of a down channel, the next one `next_in` seconds on;
        True for one caller only."""

    @abstractmethod
    def channel_up(self, channel: str, *, actor: str, note: str) -> bool:
        """The provider answers again; True only for the caller that made it so."""

    @abstractmethod
    def reserve_starts(self, channel: str, count: int, rate: float) -> float:
        """Reserve the fleet's next `count` call starts of a channel limited to `rate`
        a second; the seconds from now until the first (the others follow 1/rate apart)."""

    @abstractmethod
    def claim_within(
        self, channel: str, *, holder: str, limit: int, lease: float, fleet_concurrency: int
    ) -> list[Submission]:
        """`claim_ready`, leaving at most `fleet_concurrency` rows of the channel held by
        the whole fleet."""

    # -- the providers' webhooks (store/provider_events.py) -------------------------------

    @abstractmethod
    def record_provider_event(
        self, event: ProviderEvent, *, actor: str, scrub: Callable[[str, Submission], str | None]
    ) -> Received:
        """Record a provider's event once (a second delivery writes nothing) and apply it
        to the row it names, in one transaction: a row in doubt or failed becomes
        `synced`, any other gets a history line; no row: kept for the audit."""

    @abstractmethod
    def unknown_provider_events(
        self, since: datetime, until: datetime, limit: int = 1000
    ) -> list[ProviderEvent]:
        """The events received in [since, until) that named no row, oldest first."""

    @abstractmethod
    def provider_events_of(self, submission_id: int) -> list[ProviderEvent]:
        """The events that named a row, oldest first."""

    # -- forgetting payloads (store/forgetting.py) --------------------------------------

    @abstractmethod
    def forget_matches(
        self, where: Where, *, channel: str | None, after: int, limit: int
    ) -> list[Submission]:
        """One page, in id order after `after`, of the live rows whose clear payload has
        `where`'s string at its path (of `channel`, or every channel)."""

    @abstractmethod
    def forget_sealed(self, *, channel: str | None, after: int, limit: int) -> list[Submission]:
        """One page, in id order after `after`, of the live rows whose payload is
        encrypted, read as every row is (for `forget` to match them one by one)."""

    @abstractmethod
    def forget_archives(self, channel: str | None = None) -> list[str]:
        """Where removed rows (of `channel`) were archived."""

    @abstractmethod
    def forget_pruned(self, channel: str | None = None) -> bool:
        """Whether a row (of `channel`) was pruned and is not forgotten (a search by a
        payload's field cannot find it)."""

    @abstractmethod
    def forget_rows(
        self,
        ids: Sequence[int],
        *,
        scrub: Scrubber,
        actor: str,
        note: str,
        action_id: int,
        holder: str,
        lease: float,
    ) -> list[tuple[int, RowOutcome, str | None]] | None:
        """Forget a batch of live rows, closed ones only, in one transaction: payload
        null, last error gone, texts quoting the payload scrubbed, a `forgotten` event
        each, counted by the forget's entry `action_id` under `holder`'s lease (None:
        nothing written, the holder lost it)."""

    @abstractmethod
    def forget_kept(
        self, ids: Sequence[int], *, scrub: Scrubber, action_id: int, holder: str, lease: float
    ) -> list[tuple[int, RowOutcome, str | None]] | None:
        """Mark a batch of removed rows' memories forgotten (texts scrubbed), as
        `forget_rows`."""

    @abstractmethod
    def forget_action_of(self, submission_id: int) -> ActionRecord | None:
        """The latest forget that erased the row's payload."""

    # -- the action log (store/actions.py) ----------------------------------------------

    @abstractmethod
    def add_action(
        self,
        entry: NewAction,
        *,
        ids: Sequence[int] = (),
        flt: Filter | None = None,
        holder: str | None = None,
        lease: float = 60.0,
    ) -> ActionRecord:
        """Write an entry of the action log and freeze its rows (`ids`, or every row
        `flt` finds now), in one transaction; with `holder`, that holder holds it."""

    @abstractmethod
    def action(self, action_id: int) -> ActionRecord | None: ...

    @abstractmethod
    def actions(
        self,
        *,
        actor: str | None = None,
        kind: ActionKind | None = None,
        state: ActionState | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[ActionRecord]:
        """The action log, newest first."""

    @abstractmethod
    def action_rows(
        self, action_id: int, *, after: int = 0, outcome: str | None = None, limit: int = 100
    ) -> list[ActionRow]:
        """The rows behind an action and what happened to each, in id order."""

    @abstractmethod
    def take_action(self, action_id: int, *, holder: str, lease: float) -> bool:
        """Become the holder of a running action nobody else carries out."""

    @abstractmethod
    def let_go_action(self, action_id: int, *, holder: str) -> None: ...

    @abstractmethod
    def pending_batch(
        self, action_id: int, *, after: int, limit: int
    ) -> tuple[list[int], dict[int, Submission]]:
        """The action's next ids not yet done nor skipped, and their rows now."""

    @abstractmethod
    def carry_out(
        self, action_id: int, *, holder: str, lease: float, plan: Sequence[Planned]
    ) -> list[tuple[int, RowOutcome, str | None]] | None:
        """One batch of an action in one transaction, under the holder's lease; None
        (nothing written) when the holder lost the action."""

    @abstractmethod
    def set_plan(
        self,
        action_id: int,
        plan: dict[str, Any],
        *,
        to: ActionState,
        from_: ActionState,
        lapses_in: float | None = None,
    ) -> bool:
        """Keep a bulk action's dry run and move it on from `from_`."""

    @abstractmethod
    def move_action(self, action_id: int, to: ActionState, *, from_: Sequence[ActionState]) -> bool:
        """Pause, resume or cancel an action; False when it is in none of `from_`."""

    @abstractmethod
    def counted(self, action_id: int, done: int) -> ActionRecord:
        """An action on no listed rows (a prune, an archive) done: `done` rows."""

    @abstractmethod
    def decide_action(self, action_id: int, *, approver: str, approve: bool, note: str) -> bool:
        """A second person approves or declines a request (never the one who asked)."""

    @abstractmethod
    def lapse_actions(self) -> int:
        """Requests nobody decided in time become expired; how many."""

    # -- payload keys (store/sealing.py, store/payload_keys.py) ---------------------------

    sealing: Sealing
    """How payloads are kept: in clear, or sealed with the ledger's keys (the ledger sets
    it; a store opened alone keeps them in clear, and reads a sealed one as a
    `SealedPayload`)."""

    @abstractmethod
    def payload_batch(
        self, after: int, limit: int, channel: str | None = None
    ) -> list[StoredPayload]:
        """Up to `limit` rows after id `after` (of `channel`, or all), in id order, whose
        payload is kept (not forgotten), each with its payload as stored."""

    @abstractmethod
    def reseal(self, changes: Sequence[Reseal]) -> tuple[list[int], list[int]]:
        """Write each row's new payload where its payload is still the one read
        (compare-and-set), in one transaction; nothing else of the row changes. A row
        another transaction holds locked at this instant is skipped, never waited for.
        Returns (the ids written, the ids skipped as locked or gone)."""

    @abstractmethod
    def due_for_keys(self, channel: str, prefixes: Sequence[str]) -> int:
        """Make due now the rows of `channel` given back unsent, not yet due, whose last
        error begins with one of `prefixes` (`waiting_for_key`): rows that waited for
        a payload key this process has. Returns how many."""

    # -- connections ---------------------------------------------------------------------

    closed: bool = False
    """Set by `close()`: a closed store opens no connection again, so a ledger used
    after `close()` is refused instead of quietly reconnecting (and leaking what it
    opens)."""

    def check_open(self) -> None:
        """Refuse work on a closed store; called only where a connection is opened,
        never on the path that reuses one."""
        if self.closed:
            raise ConfigurationError(CLOSED)

    @abstractmethod
    def close(self) -> None:
        """Release every connection and set `closed`."""

    def upkeep(self) -> None:
        """Housekeeping a worker runs now and then: fold the events into the outcomes per
        minute, and the running counts where the database appends them (PostgreSQL, MariaDB)."""
        return

    async def listen(self, wake: Callable[[str], None]) -> None:
        """Call `wake(channel)` whenever a row is enqueued, until cancelled. A database
        without notifications returns at once, and workers poll."""
        return

    def async_ops(self, db: Executor) -> AsyncStore:
        """The worker's claims and settles for its event loop: by default the sync
        operations, run on `db` (the threads that hold the store's connections)."""
        return InThreads(self, db)


class AsyncStore(ABC):
    """The worker's hot path on its event loop. Opened and closed by the worker."""

    async def open(self) -> None:
        return

    async def close(self) -> None:
        return

    @abstractmethod
    async def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        """As `Store.claim`."""

    @abstractmethod
    async def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        """As `Store.move`."""


class InThreads(AsyncStore):
    """The sync operations, each run on the store's database threads."""

    def __init__(self, store: Store, db: Executor) -> None:
        self.store = store
        self.db = db

    async def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.db,
            lambda: self.store.claim(
                channel, holder=holder, limit=limit, lease=lease, in_doubt=in_doubt
            ),
        )

    async def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.db, self.store.move, changes)


class Tx(ABC):
    """The executor of a SQL database: one open transaction that runs named
    statements and returns rows as mappings. It knows no query names; what a
    statement means is the store's business."""

    @abstractmethod
    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    @abstractmethod
    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    @abstractmethod
    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement; returns the rows it matched (for an UPDATE: whether a
        compare-and-set won, even when it changed no value)."""

    @abstractmethod
    def execute_many(self, query: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run one statement for each of `rows` (an INSERT: in one round trip where
        the driver can)."""

    def insert(self, query: str, params: Mapping[str, Any]) -> Row | None:
        """Run an INSERT ... RETURNING of a submission; None when its channel and key
        are recorded already (the statement says ON CONFLICT DO NOTHING where the
        database has it; MariaDB's executor reads the duplicate-key error so)."""
        return self.fetch_one(query, params)

    @abstractmethod
    def script(self, sql: str) -> None:
        """Run a migration script (several statements, no parameters)."""
