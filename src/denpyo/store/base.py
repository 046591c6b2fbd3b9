"""The store: the only part of denpyo that speaks SQL.

A dialect module supplies connections, a transaction and the three ways of
running a named query; everything else (what to insert, how a claim or a
move is written with its event) is written once here, so that the databases
cannot drift apart in behaviour, only in SQL.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Event, Submission
from denpyo.errors import InvalidInput, LeaseLost, SchemaError
from denpyo.store.queries import load_migrations, load_queries

Row = Mapping[str, Any]


class Tx(ABC):
    """One open transaction: runs named queries and returns rows as mappings."""

    @abstractmethod
    def fetch_one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    @abstractmethod
    def fetch_all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    @abstractmethod
    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> None: ...

    @abstractmethod
    def script(self, sql: str) -> None:
        """Run a migration script (several statements, no parameters)."""


@dataclass(frozen=True, slots=True)
class NewSubmission:
    """What submit and enqueue ask the store to record."""

    channel: str
    key: str
    idempotency_key: str
    payload_json: str
    ordering_key: str | None = None
    supersedes: int | None = None


class NativeAsync(ABC):
    """The worker's hot path (claims and settles) run on the event loop itself, for
    a driver with an asyncio API: no hop to a database thread per operation, and no
    contention for the GIL between the loop and threads waiting on the database.
    Opened and closed by the worker, on the worker's loop."""

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def claim(
        self, channel: str, *, worker: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        """As `Store.claim`."""

    @abstractmethod
    async def move(self, moves: Sequence[Move]) -> list[Submission | None]:
        """As `Store.move`."""

    @abstractmethod
    async def close(self) -> None: ...


class Store(ABC):
    """Named operations on the denpyo tables, the same for every database."""

    dialect: ClassVar[str]
    notifies: ClassVar[bool] = False  # the database can wake workers on commit

    def __init__(self) -> None:
        self.queries = load_queries(self.dialect)

    # -- what a dialect supplies -------------------------------------------------

    @abstractmethod
    def transaction(self, conn: Any = None) -> AbstractContextManager[Tx]:
        """A transaction on the store's own connection (committed at the end), or
        inside the caller's open transaction on `conn` (never committed here)."""

    def one_statement(self, conn: Any = None) -> AbstractContextManager[Tx]:
        """The context of an operation a dialect may complete in one atomic statement
        (PostgreSQL's fast paths), sparing the BEGIN and COMMIT round trips."""
        return self.transaction(conn)

    def reading(self) -> AbstractContextManager[Tx]:
        """A transaction that only reads (SQLite: without taking the write lock)."""
        return self.transaction()

    @abstractmethod
    def close(self) -> None: ...

    def upkeep(self) -> None:
        """Housekeeping a worker runs now and then (PostgreSQL: fold the running counts)."""
        return

    def native_async(self) -> NativeAsync | None:
        """The worker's claims and settles on its event loop, where the driver allows
        (PostgreSQL); None: the worker runs them in database threads."""
        return None

    def parse_time(self, value: Any) -> datetime | None:
        """Turn a driver's timestamp into an aware UTC datetime."""
        if value is None or isinstance(value, datetime):
            return value
        return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)

    def parse_payload(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str | bytes) else value

    # -- schema -------------------------------------------------------------------

    def latest_version(self) -> int:
        migrations = load_migrations(self.dialect)
        return migrations[-1][0] if migrations else 0

    def migrate(self) -> list[int]:
        """Apply the migrations this database lacks, under a lock; returns their numbers."""
        with self.transaction() as tx:
            tx.execute("schema_lock")
            tx.execute("schema_version_create")
            current = self._version(tx)
            if current > self.latest_version():
                raise SchemaError(
                    f"the database is at schema {current}; this denpyo knows "
                    f"{self.latest_version()}: upgrade denpyo"
                )
            applied = []
            for version, script in load_migrations(self.dialect):
                if version > current:
                    tx.script(script)
                    tx.execute("schema_version_add", {"version": version})
                    applied.append(version)
            return applied

    def schema_version(self) -> int:
        with self.transaction() as tx:
            tx.execute("schema_version_create")
            return self._version(tx)

    def _version(self, tx: Tx) -> int:
        row = tx.fetch_one("schema_version_get")
        return int(row["version"]) if row else 0

    def now(self) -> datetime:
        with self.reading() as tx:
            row = tx.fetch_one("clock_now")
        assert row is not None
        now = self.parse_time(row["now"])
        assert now is not None
        return now

    # -- submissions ----------------------------------------------------------------

    def insert(
        self,
        new: NewSubmission,
        *,
        actor: str,
        lease: float | None = None,
        conn: Any = None,
    ) -> tuple[Submission, bool]:
        """Record a submission, or return the existing one for its channel and key.

        With `lease`, the row is created held by `actor` with its first attempt
        started (inline submit); without, it waits for a worker (enqueue).
        Returns (row, created).
        """
        with self.one_statement(conn) as tx:
            row = self._record(tx, _insert_params(new, actor, lease), actor)
            if row is None:
                existing = tx.fetch_one(
                    "submission_get_by_key", {"channel": new.channel, "key": new.key}
                )
                assert existing is not None, "a conflicting row must exist"
                return self.to_submission(existing), False
            return self.to_submission(row), True

    def insert_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any = None,
    ) -> int:
        """Record many submissions for the workers in one transaction; returns how
        many were new. `news` may be produced while the rows are written: if it
        raises, the transaction rolls back and nothing is written. `check(new,
        existing)` sees each key that was already recorded, and may raise likewise."""
        recorded: list[NewSubmission] = []

        def tracked() -> Iterator[NewSubmission]:
            for new in news:
                recorded.append(new)
                yield new

        with self.transaction(conn) as tx:
            created = self._record_many(tx, tracked(), actor)
            if created < len(recorded):
                for new in recorded:
                    row = tx.fetch_one(
                        "submission_get_by_key", {"channel": new.channel, "key": new.key}
                    )
                    if row is not None and row["idempotency_key"] != new.idempotency_key:
                        check(new, self.to_submission(row))
            return created

    def _record_many(self, tx: Tx, news: Iterable[NewSubmission], actor: str) -> int:
        """Insert each of `news`; returns how many were new."""
        return sum(
            self._record(tx, _insert_params(new, actor, None), actor) is not None for new in news
        )

    def _record(self, tx: Tx, params: Mapping[str, Any], actor: str) -> Row | None:
        """Insert the row and its `created` (and first `attempt`) events; wake the
        workers for a row they must send. None when the channel and key exist."""
        row = tx.fetch_one("submission_insert", params)
        if row is None:
            return None
        row_id = int(row["id"])
        if params["lease"]:
            tx.execute("event_insert_sent_inline", {"submission_id": row_id, "actor": actor})
            return row
        tx.execute("event_insert", event_row(row_id, "created", None, Status.REQUESTING, 0, actor))
        if self.notifies:
            tx.execute("submission_notify", {"channel": params["channel"]})
        return row

    def get(self, submission_id: int) -> Submission | None:
        with self.reading() as tx:
            row = tx.fetch_one("submission_get", {"id": submission_id})
        return self.to_submission(row) if row else None

    def get_by_key(self, channel: str, key: str) -> Submission | None:
        with self.reading() as tx:
            row = tx.fetch_one("submission_get_by_key", {"channel": channel, "key": key})
        return self.to_submission(row) if row else None

    def claim(
        self, channel: str, *, worker: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        """Lock up to `limit` due rows of a channel for `worker`.

        Ready rows (never attempted, or a transient failure due for retry) start
        their next attempt in the same transaction. In-doubt rows are only held,
        so that one reconciler at a time verifies them; their status does not change.
        """
        query = "submission_find_in_doubt" if in_doubt else "submission_find_ready"
        with self.transaction() as tx:
            found = tx.fetch_all(query, {"channel": channel, "limit": limit})
            moves = [
                Move.claim(int(row["id"]), Status(row["status"]), worker, lease, verify=in_doubt)
                for row in found
            ]
            return [sub for sub in self._apply(tx, moves) if sub is not None]

    def move(self, moves: Sequence[Move]) -> list[Submission | None]:
        """Apply compare-and-set moves in one transaction; None where a move lost."""
        distinct = len({move.submission_id for move in moves}) == len(moves)
        with self.one_statement() if distinct else self.transaction() as tx:
            return self._apply(tx, moves)

    def events(self, submission_id: int) -> list[Event]:
        with self.reading() as tx:
            rows = tx.fetch_all("event_list", {"submission_id": submission_id})
        return [self.to_event(row) for row in rows]

    def renew(self, holds: Sequence[tuple[int, str, float]]) -> set[int]:
        """Extend the leases of rows still held by their holders: [(id, holder, lease)].
        Returns the ids renewed: a row taken by someone else is not, nor one that a
        settle has locked at this instant (it is renewed at the next beat, or settled).

        One transaction, two statements per holder. The rows are locked with SKIP
        LOCKED, so a renewal never waits for a lock and cannot deadlock with a batch
        of settles that locks the same rows in another order.
        """
        by_holder: dict[tuple[str, float], list[int]] = defaultdict(list)
        for row_id, holder, lease in holds:
            by_holder[(holder, lease)].append(row_id)
        renewed: set[int] = set()
        with self.transaction() as tx:
            for (holder, lease), ids in sorted(by_holder.items()):
                found = [
                    int(row["id"])
                    for row in tx.fetch_all(
                        "submission_renew_lock", {"ids": self.id_list(ids), "locked_by": holder}
                    )
                ]
                if found:
                    params = {"ids": self.id_list(found), "lease": _seconds(lease)}
                    tx.execute("submission_renew", params)
                    renewed.update(found)
        return renewed

    def id_list(self, ids: Sequence[int]) -> Any:
        """A list of row ids as one query parameter (SQLite: a JSON array)."""
        return sorted(ids)

    def prune(self, older_than: float, batch_size: int = 1000) -> int:
        """Delete one batch of settled rows (and their events) created more than
        `older_than` seconds ago: `synced`, and `rejected` or exhausted `failed` rows
        a person has resolved. Small batches keep each transaction short."""
        with self.transaction() as tx:
            rows = tx.fetch_all(
                "submission_prune", {"older_than": _seconds(older_than), "limit": batch_size}
            )
        return len(rows)

    async def listen(self, wake: Callable[[str], None]) -> None:
        """Call `wake(channel)` whenever a row is enqueued, until cancelled.
        Stores without notifications return at once, and workers poll."""
        return

    # -- shared pieces ------------------------------------------------------------------

    def _apply(self, tx: Tx, moves: Sequence[Move]) -> list[Submission | None]:
        results: list[Submission | None] = []
        for move in moves:
            row = tx.fetch_one("submission_move", move_params(move))
            if row is None:
                results.append(None)
                continue
            sub = self.to_submission(row, move.row)
            if move.event:
                tx.execute("event_insert", event_params(move, sub.attempts))
            results.append(sub)
        return results

    def to_submission(self, row: Row, known: Submission | None = None) -> Submission:
        """A row as read; with `known` (the same row as read before a move, which
        never changes the payload), its payload is taken from there, not parsed again."""
        error_kind = row["error_kind"]
        return Submission(
            id=int(row["id"]),
            channel=row["channel"],
            key=row["key"],
            idempotency_key=row["idempotency_key"],
            payload=known.payload if known is not None else self.parse_payload(row["payload"]),
            status=Status(row["status"]),
            attempts=int(row["attempts"]),
            next_attempt_at=self.parse_time(row["next_attempt_at"]),
            locked_by=row["locked_by"],
            locked_until=self.parse_time(row["locked_until"]),
            remote_id=row["remote_id"],
            last_error=row["last_error"],
            error_kind=ErrorKind(error_kind) if error_kind else None,
            ordering_key=row["ordering_key"],
            created_at=self.parse_time(row["created_at"]),
            updated_at=self.parse_time(row["updated_at"]),
            synced_at=self.parse_time(row["synced_at"]),
            resolution=row["resolution"],
            supersedes=row["supersedes"],
            in_doubt=bool(row["in_doubt"]),
        )

    def to_event(self, row: Row) -> Event:
        at = self.parse_time(row["at"])
        assert at is not None
        return Event(
            id=int(row["id"]),
            submission_id=int(row["submission_id"]),
            at=at,
            kind=row["kind"],
            from_status=Status(row["from_status"]) if row["from_status"] else None,
            to_status=Status(row["to_status"]) if row["to_status"] else None,
            attempt=int(row["attempt"]),
            actor=row["actor"],
            detail=row["detail"],
            duration_ms=row["duration_ms"],
        )

    # -- operator queries (CLI, dashboard; see engine/operator.py) ------------------------

    def list_submissions(self, flt: Filter) -> list[Submission]:
        """Rows matching `flt`, newest first. Every value is a bound parameter."""
        statuses = [status.value for status in flt.statuses]
        padded = (statuses * 4)[:4] if statuses else [None] * 4
        params: dict[str, Any] = {
            "all_statuses": not statuses,
            **{f"status{i}": value for i, value in enumerate(padded)},
            "channel": flt.channel,
            "since": flt.since.isoformat() if flt.since else None,
            "until": flt.until.isoformat() if flt.until else None,
            "key_prefix": flt.key_prefix,
            "in_doubt": _flag(flt.in_doubt),
            "needs_attention": _flag(flt.needs_attention),
            "resolved": _flag(flt.resolved),
            "limit": flt.limit,
        }
        with self.reading() as tx:
            rows = tx.fetch_all("submission_list", params)
        return [self.to_submission(row) for row in rows]

    def count_by_status(self, channel: str | None = None) -> list[tuple[str, Status, int]]:
        """(channel, status, rows) for every pair that has rows."""
        with self.reading() as tx:
            rows = tx.fetch_all("submission_count_by_status", {"channel": channel})
        return [(row["channel"], Status(row["status"]), int(row["n"])) for row in rows]

    def count_attention(self, channel: str | None = None) -> dict[str, Any]:
        """Counts of rows a person may need to see, the oldest pending row's creation
        time and the database clock (keys as in `submission_count_attention`)."""
        with self.reading() as tx:
            row = tx.fetch_one("submission_count_attention", {"channel": channel})
        assert row is not None
        counts: dict[str, Any] = {
            name: int(row[name] or 0)
            for name in (
                "in_doubt",
                "exhausted",
                "rejected_open",
                "needs_attention",
                "pending",
                "resolved",
            )
        }
        counts["oldest_pending"] = self.parse_time(row["oldest_pending"])
        counts["now"] = self.parse_time(row["now"])
        return counts

    def count_in_doubt_due(self, channel: str) -> int:
        with self.reading() as tx:
            row = tx.fetch_one("submission_count_in_doubt_due", {"channel": channel})
        return int(row["n"]) if row else 0

    def find_superseding(self, submission_id: int) -> Submission | None:
        """The submission that resends `submission_id`, if there is one."""
        with self.reading() as tx:
            row = tx.fetch_one("submission_find_superseding", {"id": submission_id})
        return self.to_submission(row) if row else None

    def insert_resend(
        self,
        new: NewSubmission,
        *,
        actor: str,
        detail: str,
        replace: Callable[[Submission], Move],
    ) -> tuple[Submission, Submission]:
        """Record `new` (a resend, waiting for a worker) and apply `replace(new_row)` to
        the row it replaces, in one transaction: a crash leaves both or neither.

        Raises `LeaseLost` (nothing written) when the old row moved meanwhile, and
        `InvalidInput` when the new channel and key exist already. Returns (new, old).
        """
        with self.transaction() as tx:
            row = tx.fetch_one("submission_insert", _insert_params(new, actor, None))
            if row is None:
                raise InvalidInput(f"{new.channel}:{new.key} exists already; nothing was written")
            created = self.to_submission(row)
            tx.execute(
                "event_insert",
                event_row(created.id, "created", None, Status.REQUESTING, 0, actor, detail),
            )
            move = replace(created)
            [old] = self._apply(tx, [move])
            if old is None:  # raising here rolls the new row back as well
                raise LeaseLost(
                    f"submission {move.submission_id} moved while the resend was being "
                    "recorded; nothing was written: look again"
                )
            if self.notifies:
                tx.execute("submission_notify", {"channel": new.channel})
            return created, old


def _insert_params(new: NewSubmission, actor: str, lease: float | None) -> dict[str, Any]:
    return {
        "channel": new.channel,
        "key": new.key,
        "idempotency_key": new.idempotency_key,
        "payload": new.payload_json,
        "ordering_key": new.ordering_key,
        "supersedes": new.supersedes,
        "attempts": 1 if lease else 0,
        "locked_by": actor if lease else None,
        "lease": _seconds(lease),
    }


def _seconds(value: float | None) -> float | None:
    """Durations go to SQL rounded to milliseconds (SQLite reads them as text)."""
    return None if value is None else round(max(float(value), 0.0), 3)


def _flag(value: bool | None) -> int | None:
    """An optional yes/no filter as SQL sees it: 1, 0, or NULL for "either"."""
    return None if value is None else int(value)


def event_row(
    submission_id: int,
    kind: str,
    from_status: Status | None,
    to_status: Status | None,
    attempt: int,
    actor: str,
    detail: str | None = None,
    duration_ms: int | None = None,
) -> dict[str, Any]:
    """`event_insert`'s parameters: one line of a submission's history."""
    return {
        "submission_id": submission_id,
        "kind": kind,
        "from_status": from_status,
        "to_status": to_status,
        "attempt": attempt,
        "actor": actor,
        "detail": detail,
        "duration_ms": duration_ms,
    }


def event_params(move: Move, attempt: int) -> dict[str, Any]:
    """`event_insert`'s parameters for the event a move records (`move.event`)."""
    assert move.event is not None
    return event_row(
        move.submission_id, move.event, move.from_status, move.to_status, attempt,
        move.actor, move.detail, move.duration_ms,
    )  # fmt: skip


def move_params(move: Move) -> dict[str, Any]:
    return {
        "id": move.submission_id,
        "from_status": move.from_status.value,
        "to_status": move.to_status.value,
        "expect_locked_by": move.expect_locked_by,
        "locked_by": move.locked_by,
        "lease": _seconds(move.lease),
        "attempt_delta": move.attempt_delta,
        "retry_in": _seconds(move.retry_in),
        "remote_id": move.remote_id,
        "keep_error": move.keep_error,
        "error_kind": move.error_kind.value if move.error_kind else None,
        "last_error": move.last_error,
        "resolution": move.resolution,
    }
