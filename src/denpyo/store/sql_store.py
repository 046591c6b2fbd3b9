"""Every operation of the store over named SQL queries, for any SQL database.

A database supplies its connections (`transaction`, and `reading` and
`one_statement` where it has a cheaper way), its query file, and the four writes
inside a transaction (`record_in`, `record_many_in`, `move_in`, and the claims):
see store/base.py. Everything else (reads, counts, renewals, pruning,
migrations, and how a write is wrapped in its transaction) is written once here,
so that the databases cannot drift apart in behaviour, only in SQL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any, ClassVar

from denpyo.domain.filters import Filter
from denpyo.domain.moves import Change, Move, Settle
from denpyo.domain.status import ERROR_KINDS, STATUSES, Status
from denpyo.domain.submission import Event, Submission
from denpyo.errors import ConfigurationError, InvalidInput, LeaseLost, SchemaError, StoreError
from denpyo.store.async_conn import BridgedConnection, BridgedTx, executor_for
from denpyo.store.base import NewSubmission, Page, Row, Store, Tx
from denpyo.store.queries import load_migrations, load_queries

log = logging.getLogger("denpyo.store")


class SqlStore(Store):
    """The operations of `Store` over a database's named queries (sql/<dialect>.sql)."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "schema_version_create", "schema_version_get", "schema_version_add",
            "schema_lock", "clock_now", "database_identity", "submission_get",
            "submission_get_by_key", "submission_get_existing", "submission_find_superseding",
            "submission_ordering_waits",
            "event_list",
            "submission_list", "submission_count_by_status", "submission_count_attention",
            "submission_count_in_doubt_due", "submission_renew_lock", "submission_renew",
            "submission_prune", "submission_get_by_idempotency_keys",
            "submission_list_synced", "event_first_attempt",
            "submission_last_id", "submission_page", "submission_search",
            "submission_attention_page", "outcome_fold_lock", "outcome_fold_upto",
            "outcome_fold_add", "outcome_fold_advance", "outcome_fold_trim",
            "outcome_per_minute", "submission_next_channel",
        }
    )  # fmt: skip
    """The named queries this class runs; each layer below lists its own, and a
    database's query file defines exactly the union (tests/unit/test_queries.py)."""

    def __init__(self) -> None:
        self.queries = load_queries(self.dialect)
        self._own_identity: Row | None = None
        self._same: weakref.WeakSet[Any] = weakref.WeakSet()  # callers' connections checked

    # -- what a SQL database supplies ---------------------------------------------------

    @abstractmethod
    def transaction(self, conn: Any = None) -> AbstractContextManager[Tx]:
        """A transaction on the store's own connection (committed at the end), or
        inside the caller's open transaction on `conn` (never committed here)."""

    def one_statement(self, conn: Any = None) -> AbstractContextManager[Tx]:
        """The context of an operation a database may complete in one atomic statement
        (PostgreSQL's), sparing the BEGIN and COMMIT round trips."""
        return self.transaction(conn)

    def reading(self) -> AbstractContextManager[Tx]:
        """A transaction that only reads (SQLite: without taking the write lock)."""
        return self.transaction()

    @abstractmethod
    def record_in(
        self, tx: Tx, new: NewSubmission, *, actor: str, lease: float | None, detail: str | None
    ) -> Submission | None:
        """Insert the row with its `created` event (`detail` in it), and with `lease`
        its first `attempt` event; wake the workers for a row they must send. None
        when the channel and key exist already (nothing written)."""

    @abstractmethod
    def record_many_in(self, tx: Tx, news: Iterable[NewSubmission], actor: str) -> int:
        """`record_in` for each of `news`, for the workers; returns how many were new."""

    @abstractmethod
    def move_in(self, tx: Tx, changes: Sequence[Change]) -> list[Submission | None]:
        """`Store.move` inside a transaction: a settle by the database's
        `submission_settle` statement, any other move by its move statement."""

    def check_same_database(self, tx: Tx, conn: Any) -> None:
        """Refuse a caller's connection to another database: a row written there lands
        where no worker looks. Each server says which database the connection works in
        (`database_identity`), once per connection where the driver lets it be
        remembered (sqlite3's cannot: there the question is a local call)."""
        remembered = _weakly_referable(conn)
        if remembered and conn in self._same:
            return
        if self._own_identity is None:
            self._own_identity = self.own_identity()
        theirs = tx.fetch_one("database_identity")
        if theirs is None or not self.same_database(self._own_identity or {}, theirs):
            raise ConfigurationError(
                f"conn works in {_described(theirs)}, but this ledger stores in "
                f"{_described(self._own_identity)}: nothing was written"
            )
        if remembered:
            self._same.add(conn)

    def own_identity(self) -> Row | None:
        """Which database the store's own connections work in (`database_identity`)."""
        with self.reading() as own:
            return own.fetch_one("database_identity")

    def same_database(self, ours: Row, theirs: Row) -> bool:
        return dict(ours) == dict(theirs)

    def errors(self) -> AbstractContextManager[None]:
        """Where the driver's errors become StoreError (and missing tables SchemaError)."""
        return nullcontext()

    def duplicate(self, exc: BaseException) -> bool:
        """Whether an INSERT's error means its channel and key exist (where the
        database has no ON CONFLICT and says so by an error)."""
        return False

    def _in(self, conn: Any, *, one_statement: bool = False) -> AbstractContextManager[Tx]:
        """The store's transaction, or the caller's (`conn`: a driver connection, or
        an asyncio one reached from a thread)."""
        if isinstance(conn, BridgedConnection):
            return self._bridged(conn)
        return self.one_statement(conn) if one_statement else self.transaction(conn)

    @contextmanager
    def _bridged(self, conn: BridgedConnection) -> Iterator[Tx]:
        with self.errors():
            tx = BridgedTx(conn, self.queries, self.duplicate)
            self.check_same_database(tx, conn.executor.conn)
            yield tx

    async def arecord(
        self, new: NewSubmission, *, actor: str, conn: Any
    ) -> tuple[Submission, bool]:
        bridged = await self._bridge(conn)
        return await asyncio.to_thread(self.record, new, actor=actor, conn=bridged)

    async def arecord_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any,
    ) -> int:
        bridged = await self._bridge(conn)
        return await asyncio.to_thread(
            self.record_many, news, actor=actor, check=check, conn=bridged
        )

    async def _bridge(self, conn: Any) -> BridgedConnection:
        executor = await executor_for(conn)
        if executor.dialect != self.dialect:
            raise ConfigurationError(
                f"this ledger stores in {self.dialect}; conn is a {executor.dialect} "
                "connection: nothing was written"
            )
        return BridgedConnection(executor, asyncio.get_running_loop())

    def parse_time(self, value: Any) -> datetime | None:
        """Turn a driver's timestamp into an aware UTC datetime."""
        if value is None or isinstance(value, datetime):
            return value
        parsed = datetime.fromisoformat(str(value))
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

    def parse_payload(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str | bytes) else value

    def id_list(self, ids: Sequence[int]) -> Any:
        """A list of row ids as one query parameter (SQLite: a JSON array)."""
        return sorted(ids)

    def text_list(self, values: Sequence[str]) -> Any:
        """A list of strings as one query parameter (SQLite: a JSON array)."""
        return list(values)

    def time_param(self, value: datetime) -> Any:
        """An aware datetime as a query parameter that compares with the stored times
        (and so can use their indexes)."""
        return value.astimezone(UTC)

    # -- schema ---------------------------------------------------------------------------

    def latest_version(self) -> int:
        migrations = load_migrations(self.dialect)
        return migrations[-1][0] if migrations else 0

    def migrate(self) -> list[int]:
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

    # -- writes -----------------------------------------------------------------------------

    def record(
        self, new: NewSubmission, *, actor: str, lease: float | None = None, conn: Any = None
    ) -> tuple[Submission, bool]:
        with self._in(conn, one_statement=True) as tx:
            sub = self.record_in(tx, new, actor=actor, lease=lease, detail=None)
            if sub is None:
                existing = self._existing(tx, new)
                assert existing is not None, "a conflicting row must exist"
                return existing, False
            return sub, True

    def record_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any = None,
    ) -> int:
        recorded: list[NewSubmission] = []

        def tracked() -> Iterator[NewSubmission]:
            for new in news:
                recorded.append(new)
                yield new

        with self._in(conn) as tx:
            created = self.record_many_in(tx, tracked(), actor)
            if created < len(recorded):
                for new, existing in self.recorded_before(tx, recorded):
                    check(new, existing)
            return created

    def recorded_before(
        self, tx: Tx, news: Sequence[NewSubmission]
    ) -> Iterator[tuple[NewSubmission, Submission]]:
        """Each of `news` whose channel and key are held by another row than the one it
        wrote (recorded before, or by an earlier item of the same batch), with that
        row, in the batch's order: one read per item here."""
        for new in news:
            existing = self._existing(tx, new)
            if existing is not None and existing.idempotency_key != new.idempotency_key:
                yield new, existing

    def _existing(self, tx: Tx, new: NewSubmission) -> Submission | None:
        """The row an insert found in its way, read in the same transaction."""
        row = tx.fetch_one("submission_get_existing", {"channel": new.channel, "key": new.key})
        return self.to_submission(row) if row else None

    def record_resend(
        self,
        new: NewSubmission,
        *,
        actor: str,
        detail: str,
        replace: Callable[[Submission], Move],
    ) -> tuple[Submission, Submission]:
        with self.transaction() as tx:
            created = self.record_in(tx, new, actor=actor, lease=None, detail=detail)
            if created is None:
                raise InvalidInput(f"{new.channel}:{new.key} exists already; nothing was written")
            move = replace(created)
            [old] = self.move_in(tx, [move])
            if old is None:  # raising here rolls the new row back as well
                raise LeaseLost(
                    f"submission {move.submission_id} moved while the resend was being "
                    "recorded; nothing was written: look again"
                )
            return created, old

    def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        distinct = len({change.submission_id for change in changes}) == len(changes)
        with self.one_statement() if distinct else self.transaction() as tx:
            return self.move_in(tx, changes)

    def renew(self, holds: Sequence[tuple[int, str, float]]) -> set[int]:
        """One transaction, two statements per holder. The rows are locked with SKIP
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
                    params = {"ids": self.id_list(found), "lease": seconds(lease)}
                    tx.execute("submission_renew", params)
                    renewed.update(found)
        return renewed

    def prune(self, older_than: float, batch_size: int = 1000) -> int:
        """Small batches keep each transaction short."""
        with self.transaction() as tx:
            rows = tx.fetch_all(
                "submission_prune", {"older_than": seconds(older_than), "limit": batch_size}
            )
        return len(rows)

    # -- reads -------------------------------------------------------------------------------

    def get(self, submission_id: int, *, conn: Any = None) -> Submission | None:
        with self.reading() if conn is None else self._in(conn) as tx:
            row = tx.fetch_one("submission_get", {"id": submission_id})
        return self.to_submission(row) if row else None

    def get_by_key(self, channel: str, key: str) -> Submission | None:
        with self.reading() as tx:
            row = tx.fetch_one("submission_get_by_key", {"channel": channel, "key": key})
        return self.to_submission(row) if row else None

    def events(self, submission_id: int) -> list[Event]:
        with self.reading() as tx:
            rows = tx.fetch_all("event_list", {"submission_id": submission_id})
        return [self.to_event(row) for row in rows]

    def list_submissions(self, flt: Filter) -> list[Submission]:
        """Rows matching `flt`, newest first. Every value is a bound parameter."""
        with self.reading() as tx:
            rows = tx.fetch_all("submission_list", filter_params(flt))
        return [self.to_submission(row) for row in rows]

    def list_page(self, flt: Filter, *, before: int | None = None, window: int = 10_000) -> Page:
        """The id range is always bounded (never "IS NULL OR"), so that every plan,
        generic or custom, reads it as an index range."""
        with self.reading() as tx:
            if before is None:
                row = tx.fetch_one("submission_last_id")
                before = int(row["id"]) + 1 if row else 1
            floor = max(before - window, 0)
            params = {**filter_params(flt), "before": before, "floor": floor}
            params["limit"] = flt.limit + 1
            rows = tx.fetch_all("submission_page", params)
        subs = [self.to_submission(row) for row in rows[: flt.limit]]
        if len(rows) > flt.limit:
            return Page(subs, subs[-1].id)
        return Page(subs, floor if floor > 1 else None)

    def search_keys(
        self, channel: str, prefix: str, *, after: str | None = None, limit: int = 50
    ) -> Page:
        """Keys sharing a prefix sit side by side in the unique index on (channel, key)
        (byte order on SQLite and MariaDB; PostgreSQL's collation may interleave a few
        others, which the prefix test drops): reading `limit` + 100 entries is enough."""
        params = {
            "channel": channel,
            "prefix": prefix,
            "after": after,
            "scan": limit + 100,
            "limit": limit + 1,
        }
        with self.reading() as tx:
            rows = tx.fetch_all("submission_search", params)
        subs = [self.to_submission(row) for row in rows[:limit]]
        return Page(subs, subs[-1].key if len(rows) > limit else None)

    def channels(self) -> list[str]:
        found: list[str] = []
        with self.reading() as tx:
            while len(found) < 1000:  # a channel is a kind of call: never that many
                row = tx.fetch_one("submission_next_channel", {"after": found[-1] if found else ""})
                if row is None:
                    break
                found.append(str(row["channel"]))
        return found

    def attention_page(self, *, before: int | None = None, limit: int = 50) -> Page:
        params = {"before": before if before is not None else 2**62, "limit": limit + 1}
        with self.reading() as tx:
            rows = tx.fetch_all("submission_attention_page", params)
        subs = [self.to_submission(row) for row in rows[:limit]]
        return Page(subs, subs[-1].id if len(rows) > limit else None)

    def fold_outcomes(self, limit: int = 20_000, lag: float = 10.0) -> int:
        """One transaction holds the cursor's row lock: two folds never count an event
        twice, and a crash leaves the batch folded with its cursor, or neither."""
        with self.transaction() as tx:
            cursor = tx.fetch_one("outcome_fold_lock")
            if cursor is None:  # another fold holds it
                return 0
            after = int(cursor["last_event_id"])
            found = tx.fetch_one(
                "outcome_fold_upto", {"after": after, "limit": limit, "lag": seconds(lag)}
            )
            upto = found["upto"] if found else None
            if upto is not None:
                params = {"after": after, "upto": int(upto)}
                tx.execute("outcome_fold_add", params)
                tx.execute("outcome_fold_advance", params)
            tx.execute("outcome_fold_trim")
        return 0 if upto is None else int(upto) - after

    def outcomes_per_minute(
        self, hours: int = 24, channel: str | None = None
    ) -> list[tuple[datetime, str, int]]:
        with self.reading() as tx:
            rows = tx.fetch_all("outcome_per_minute", {"hours": hours, "channel": channel})
        found = []
        for row in rows:
            minute = self.parse_time(row["minute"])
            assert minute is not None
            found.append((minute, str(row["outcome"]), int(row["n"])))
        return found

    def upkeep(self) -> None:
        """Fold the running counts (`fold_counts`), and the events into outcomes per
        minute, a few batches at most: a busy database catches up over several
        heartbeats. A fold that fails (a full disk, say) is logged, never raised: the
        counts or the chart lag, and the worker does not take it for a lease renewal
        that failed."""
        try:
            self.fold_counts()
            for _ in range(4):
                if self.fold_outcomes() < 20_000:
                    return
        except (StoreError, SchemaError) as exc:
            log.warning("cannot fold the running counts and outcomes per minute now: %s", exc)

    def count_by_status(self, channel: str | None = None) -> list[tuple[str, Status, int]]:
        """Folds the running counts first, where the database appends them (`fold_counts`):
        only to keep them small, so a fold that cannot run now (a lock it would wait
        for, say) is passed over; the sum is the same folded or not."""
        try:
            self.fold_counts()
        except StoreError as exc:
            log.info("running counts not folded before reading them: %s", exc)
        with self.reading() as tx:
            rows = tx.fetch_all("submission_count_by_status", {"channel": channel})
        return [(row["channel"], Status(row["status"]), int(row["n"])) for row in rows]

    def fold_counts(self) -> None:
        """Fold the running counts, on a database that appends them (PostgreSQL, MariaDB);
        SQLite adds to them in place."""
        return

    def count_attention(self, channel: str | None = None) -> dict[str, Any]:
        with self.reading() as tx:
            row = tx.fetch_one("submission_count_attention", self.attention_params(tx, channel))
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

    def attention_params(self, tx: Tx, channel: str | None) -> dict[str, Any]:
        """`submission_count_attention`'s parameters (MariaDB adds the channels)."""
        return {"channel": channel}

    def count_in_doubt_due(self, channel: str) -> int:
        with self.reading() as tx:
            row = tx.fetch_one("submission_count_in_doubt_due", {"channel": channel})
        return int(row["n"]) if row else 0

    def get_by_idempotency_keys(self, keys: Sequence[str]) -> list[Submission]:
        if not keys:
            return []
        with self.reading() as tx:
            rows = tx.fetch_all(
                "submission_get_by_idempotency_keys", {"keys": self.text_list(keys)}
            )
        return [self.to_submission(row) for row in rows]

    def list_synced(
        self,
        channel: str,
        since: datetime,
        until: datetime,
        *,
        after: tuple[datetime, int] | None = None,
        limit: int = 500,
    ) -> list[Submission]:
        after_at, after_id = after if after is not None else (since, 0)
        params = {
            "channel": channel,
            "after_at": self.time_param(after_at),
            "after_id": after_id,
            "until": self.time_param(until),
            "limit": limit,
        }
        with self.reading() as tx:
            rows = tx.fetch_all("submission_list_synced", params)
        return [self.to_submission(row) for row in rows]

    def first_attempt_at(self, submission_id: int) -> tuple[datetime | None, datetime]:
        with self.reading() as tx:
            row = tx.fetch_one("event_first_attempt", {"submission_id": submission_id})
        assert row is not None
        now = self.parse_time(row["now"])
        assert now is not None
        return self.parse_time(row["first_attempt_at"]), now

    def find_superseding(self, submission_id: int) -> Submission | None:
        with self.reading() as tx:
            row = tx.fetch_one("submission_find_superseding", {"id": submission_id})
        return self.to_submission(row) if row else None

    def ordering_waits(self, sub: Submission) -> bool:
        if sub.ordering_key is None:
            return False
        params = {"channel": sub.channel, "ordering_key": sub.ordering_key, "id": sub.id}
        with self.reading() as tx:
            row = tx.fetch_one("submission_ordering_waits", params)
        return bool(row and row["waits"])

    def to_submission(self, row: Row, known: Submission | None = None) -> Submission:
        """A row as read. With `known`, the same row as read before a move: what a
        move never changes (the payload, the key, when it was created…) is taken
        from there, not sent back nor parsed again."""
        if known is None:
            sub_id, channel, key, idempotency_key = (
                int(row["id"]), row["channel"], row["key"], row["idempotency_key"]
            )  # fmt: skip
            payload, ordering_key = self.parse_payload(row["payload"]), row["ordering_key"]
            created_at, supersedes = self.parse_time(row["created_at"]), row["supersedes"]
        else:
            sub_id, channel, key, idempotency_key = (
                known.id, known.channel, known.key, known.idempotency_key
            )  # fmt: skip
            payload, ordering_key = known.payload, known.ordering_key
            created_at, supersedes = known.created_at, known.supersedes
        error_kind, parse_time = row["error_kind"], self.parse_time
        return Submission(
            sub_id, channel, key, idempotency_key, payload, STATUSES[row["status"]],
            int(row["attempts"]), parse_time(row["next_attempt_at"]), row["locked_by"],
            parse_time(row["locked_until"]), row["remote_id"], row["last_error"],
            ERROR_KINDS[error_kind] if error_kind else None, ordering_key, created_at,
            parse_time(row["updated_at"]), parse_time(row["synced_at"]), row["resolution"],
            supersedes, bool(row["in_doubt"]),
        )  # fmt: skip

    def recorded(self, row: Row, new: NewSubmission, params: Mapping[str, Any]) -> Submission:
        """The row `submission_insert` wrote from `params` (`insert_params`): what the
        statement computed (its id and times) comes back in `row`, the rest was sent."""
        return Submission(
            int(row["id"]), new.channel, new.key, new.idempotency_key,
            self.parse_payload(new.payload_json), Status.REQUESTING, params["attempts"],
            self.parse_time(row["next_attempt_at"]), params["locked_by"],
            self.parse_time(row["locked_until"]), None, None, None, new.ordering_key,
            self.parse_time(row["created_at"]), self.parse_time(row["updated_at"]), None, None,
            new.supersedes, False,
        )  # fmt: skip

    def settled(self, row: Row, settle: Settle) -> Submission:
        """The row a settle moved: what the statement could not know from the settle
        and the row as held comes back in `row`."""
        known = settle.row
        return Submission(
            known.id, known.channel, known.key, known.idempotency_key, known.payload,
            settle.to_status, known.attempts, self.parse_time(row["next_attempt_at"]), None,
            None, row["remote_id"], settle.last_error, settle.error_kind, known.ordering_key,
            known.created_at, self.parse_time(row["updated_at"]),
            self.parse_time(row["synced_at"]), row["resolution"], known.supersedes,
            bool(row["in_doubt"]),
        )  # fmt: skip

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


def insert_params(new: NewSubmission, actor: str, lease: float | None) -> dict[str, Any]:
    return {
        "channel": new.channel,
        "key": new.key,
        "idempotency_key": new.idempotency_key,
        "payload": new.payload_json,
        "ordering_key": new.ordering_key,
        "supersedes": new.supersedes,
        "attempts": 1 if lease else 0,
        "locked_by": actor if lease else None,
        "lease": seconds(lease),
    }


def seconds(value: float | None) -> float | None:
    """Durations go to SQL rounded to milliseconds (SQLite reads them as text)."""
    return None if value is None else round(max(float(value), 0.0), 3)


Group = list[tuple[int, Change]]
"""Changes that name each row once, with their places among the changes asked for."""


def distinct_groups(changes: Sequence[Change]) -> list[Group]:
    """Changes (with their position) in consecutive groups that name each row once:
    one statement applies one change per row, so a row named again begins the next
    group."""
    groups: list[Group] = []
    seen: set[int] = set()
    for ordinal, change in enumerate(changes):
        if not groups or change.submission_id in seen:
            groups.append([])
            seen = set()
        groups[-1].append((ordinal, change))
        seen.add(change.submission_id)
    return groups


def _weakly_referable(value: Any) -> bool:
    try:
        weakref.ref(value)
    except TypeError:
        return False
    return True


def _described(identity: Row | None) -> str:
    if not identity:
        return "an unknown database"
    return ", ".join(f"{name} {value}" for name, value in identity.items())


def filter_params(flt: Filter) -> dict[str, Any]:
    """An operator's filter as the parameters of `{{list_filter}}` (and its limit)."""
    statuses = [status.value for status in flt.statuses]
    padded = (statuses * 4)[:4] if statuses else [None] * 4
    return {
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


def event_params(change: Change, attempt: int) -> dict[str, Any]:
    """`event_insert`'s parameters for the event a change records (`change.event`)."""
    assert change.event is not None
    return event_row(
        change.submission_id, change.event, change.from_status, change.to_status, attempt,
        change.actor, change.detail, change.duration_ms,
    )  # fmt: skip


def move_params(move: Move) -> dict[str, Any]:
    return {
        "id": move.submission_id,
        "from_status": move.from_status.value,
        "to_status": move.to_status.value,
        "holder": move.holder,
        "locked_by": move.new_holder,
        "lease": seconds(move.lease),
        "attempt_delta": move.attempt_delta,
        "retry_in": seconds(move.retry_in),
        "remote_id": move.remote_id,
        "keep_error": move.keep_error,
        "error_kind": move.error_kind.value if move.error_kind else None,
        "last_error": move.last_error,
        "resolution": move.resolution,
    }


def settle_params(settle: Settle) -> dict[str, Any]:
    """`submission_settle`'s parameters: what a settle changes, and the holder it
    expects."""
    return {
        "id": settle.submission_id,
        "holder": settle.holder,
        "to_status": settle.to_status.value,
        "retry_in": seconds(settle.retry_in),
        "remote_id": settle.remote_id,
        "error_kind": settle.error_kind.value if settle.error_kind else None,
        "last_error": settle.last_error,
    }
