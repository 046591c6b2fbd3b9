"""Every operation of the store over named SQL queries, for any SQL database.

A database supplies its connections (`transaction`, and `reading` and
`one_statement` where it has a cheaper way: store/connections.py), its query
file, and the four writes inside a transaction (`record_in`, `record_many_in`,
`move_in`, and the claims): see store/base.py. Everything else (reads, counts,
renewals, pruning, migrations, and how a write is wrapped in its transaction) is
written once here, so that the databases cannot drift apart in behaviour, only
in SQL. The rest of a SQL store is in its own modules: the caller's connections
(store/callers.py), rows to objects (store/rows.py), statement parameters
(store/params.py).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

from denpyo.domain.actions import RowOutcome
from denpyo.domain.filters import Filter
from denpyo.domain.holders import Holding
from denpyo.domain.moves import Change, Move
from denpyo.domain.status import Status
from denpyo.domain.submission import Event, Submission
from denpyo.errors import InvalidInput, LeaseLost, SchemaError, StoreError, StoreUnavailable
from denpyo.store.actions import ActionLog, NewAction
from denpyo.store.base import NewSubmission, Page, Tx
from denpyo.store.callers import CallerConnections
from denpyo.store.conflicts import Replayed, retried
from denpyo.store.controls import ChannelControls
from denpyo.store.forgetting import Forgetting
from denpyo.store.params import filter_params, seconds
from denpyo.store.payload_keys import PayloadKeys
from denpyo.store.provider_events import ProviderEvents
from denpyo.store.queries import load_migrations
from denpyo.store.removal import Removal

log = logging.getLogger("denpyo.store")


class SqlStore(
    CallerConnections,
    Removal,
    Forgetting,
    ActionLog,
    ChannelControls,
    PayloadKeys,
    ProviderEvents,
):
    """The operations of `Store` over a database's named queries (sql/<dialect>.sql)."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "create_schema_version",
            "get_schema_version",
            "add_schema_version",
            "lock_schema",
            "read_clock",
            "get_database_identity",
            "get_submission",
            "get_submission_by_key",
            "get_submission_existing",
            "find_submission_superseding",
            "check_submission_ordering_waits",
            "list_events",
            "list_submissions",
            "count_submissions_by_status",
            "count_submissions_needs_person",
            "count_submissions_in_doubt_due",
            "list_submission_holdings",
            "lock_submission_renew",
            "renew_submissions",
            "get_submissions_by_idempotency_keys",
            "list_submissions_synced",
            "get_submission_last_id",
            "list_submission_page",
            "search_submissions",
            "list_submission_needs_person_page",
            "lock_outcome_fold",
            "find_outcome_fold_upto",
            "add_outcome_fold",
            "advance_outcome_fold",
            "trim_outcome_fold",
            "count_outcomes_per_minute",
            "find_submission_next_channel",
        }
    )
    """The named queries this class runs; each layer below lists its own, and a
    database's query file defines exactly the union (tests/unit/test_queries.py)."""

    # -- what a SQL database supplies ---------------------------------------------------

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
        `settle_submission` statement, any other move by its move statement."""

    # -- schema ---------------------------------------------------------------------------

    def latest_version(self) -> int:
        migrations = load_migrations(self.dialect_record.name)
        return migrations[-1][0] if migrations else 0

    def migrate(self) -> list[int]:
        with self.transaction() as tx:
            tx.execute("lock_schema")
            tx.execute("create_schema_version")
            current = self._version(tx)
            if current > self.latest_version():
                raise SchemaError(
                    f"the database is at schema {current}; this denpyo knows "
                    f"{self.latest_version()}: upgrade denpyo"
                )
            return self.apply_migrations(tx, current)

    def apply_migrations(self, tx: Tx, current: int) -> list[int]:
        """Run the numbered migrations above `current`, recording each."""
        applied = []
        for version, script in load_migrations(self.dialect_record.name):
            if version > current:
                tx.script(script)
                tx.execute("add_schema_version", {"version": version})
                applied.append(version)
        return applied

    @retried
    def schema_version(self) -> int:
        with self.transaction() as tx:
            tx.execute("create_schema_version")
            return self._version(tx)

    def _version(self, tx: Tx) -> int:
        row = tx.fetch_one("get_schema_version")
        return int(row["version"]) if row else 0

    def now(self) -> datetime:
        with self.reading() as tx:
            row = tx.fetch_one("read_clock")
        assert row is not None
        now = self.parse_time(row["now"])
        assert now is not None
        return now

    # -- writes -----------------------------------------------------------------------------

    @retried
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

    @retried
    def adopt(
        self, new: NewSubmission, *, remote_id: str | None, actor: str, note: str
    ) -> Submission | None:
        """Record a call the provider accepted and the ledger lost (`audit(adopt=True)`):
        inserted and moved to `synced` in one transaction, so no worker ever sees it
        due. None when the channel and key have a row, or a remembered key, already."""
        with self.transaction() as tx:
            sub = self.record_in(tx, new, actor=actor, lease=None, detail=note)
            if sub is None:
                return None
            (moved,) = self.move_in(tx, [Move.adopted(sub, actor, remote_id, note)])
            return moved

    def record_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any = None,
    ) -> int:
        """In the store's own transaction, the items are read as they are written
        (a COPY streams them), and read again if a conflict runs it again."""
        items = news if conn is not None else Replayed(news)
        return self._record_many(items, actor=actor, check=check, conn=conn)

    @retried
    def _record_many(
        self,
        news: Iterable[NewSubmission],
        *,
        actor: str,
        check: Callable[[NewSubmission, Submission], None],
        conn: Any,
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
        """The row an insert found in its way, read in the same transaction: the live
        row, or the remembered outcome of a removed one."""
        row = tx.fetch_one("get_submission_existing", {"channel": new.channel, "key": new.key})
        return self.to_submission(row) if row else self.kept(tx, new.channel, new.key)

    @retried
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
        with self.transaction() as tx:
            created = self.record_in(tx, new, actor=actor, lease=None, detail=detail)
            if created is None:
                raise InvalidInput(f"{new.channel}:{new.key} exists already; nothing was written")
            params = {
                "id": old_id,
                "new_id": created.id,
                "resolution": resolution(created.id),
            }
            old = self.kept_by_id(tx, old_id)
            if old is None or not tx.execute("mark_key_resent", params):  # rolls the new row back
                raise LeaseLost(
                    f"submission {old_id} was resent or forgotten meanwhile; nothing was "
                    "written: look again"
                )
            if log is not None:
                outcome = (old_id, RowOutcome.DONE, f"resent as #{created.id}")
                self.log_done_in(tx, log, [outcome])
            return created, self.kept_by_id(tx, old_id) or old

    @retried
    def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        distinct = len({change.submission_id for change in changes}) == len(changes)
        with self.one_statement() if distinct else self.transaction() as tx:
            return self.move_in(tx, changes)

    @retried
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
                        "lock_submission_renew", {"ids": self.id_list(ids), "locked_by": holder}
                    )
                ]
                if found:
                    params = {"ids": self.id_list(found), "lease": seconds(lease)}
                    tx.execute("renew_submissions", params)
                    renewed.update(found)
        return renewed

    # -- reads -------------------------------------------------------------------------------

    @retried
    def get(self, submission_id: int, *, conn: Any = None) -> Submission | None:
        with self.reading() if conn is None else self._in(conn) as tx:
            row = tx.fetch_one("get_submission", {"id": submission_id})
            return self.to_submission(row) if row else self.kept_by_id(tx, submission_id)

    def get_by_key(self, channel: str, key: str) -> Submission | None:
        with self.reading() as tx:
            row = tx.fetch_one("get_submission_by_key", {"channel": channel, "key": key})
            return self.to_submission(row) if row else self.kept(tx, channel, key)

    def events(self, submission_id: int) -> list[Event]:
        with self.reading() as tx:
            rows = tx.fetch_all("list_events", {"submission_id": submission_id})
        return [self.to_event(row) for row in rows]

    def list_submissions(self, flt: Filter) -> list[Submission]:
        """Rows matching `flt`, newest first. Every value is a bound parameter."""
        with self.reading() as tx:
            rows = tx.fetch_all("list_submissions", filter_params(flt))
        return [self.to_submission(row) for row in rows]

    def list_page(self, flt: Filter, *, before: int | None = None, window: int = 10_000) -> Page:
        """The id range is always bounded (never "IS NULL OR"), so that every plan,
        generic or custom, reads it as an index range."""
        with self.reading() as tx:
            if before is None:
                row = tx.fetch_one("get_submission_last_id")
                before = int(row["id"]) + 1 if row else 1
            floor = self.window_floor(tx, before, window)
            params = {**filter_params(flt), "before": before, "floor": floor}
            params["limit"] = flt.limit + 1
            rows = tx.fetch_all("list_submission_page", params)
        subs = [self.to_submission(row) for row in rows[: flt.limit]]
        if len(rows) > flt.limit:
            return Page(subs, subs[-1].id)
        return Page(subs, floor if floor > 1 else None)

    def window_floor(self, tx: Tx, before: int, window: int) -> int:
        """The lowest id of a page's window: `window` ids below `before` (ids are
        numbered one by one)."""
        return max(before - window, 0)

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
            rows = tx.fetch_all("search_submissions", params)
        subs = [self.to_submission(row) for row in rows[:limit]]
        return Page(subs, subs[-1].key if len(rows) > limit else None)

    def channels(self) -> list[str]:
        found: list[str] = []
        with self.reading() as tx:
            while len(found) < 1000:  # a channel is a kind of call: never that many
                row = tx.fetch_one(
                    "find_submission_next_channel", {"after": found[-1] if found else ""}
                )
                if row is None:
                    break
                found.append(str(row["channel"]))
        return found

    def attention_page(self, *, before: int | None = None, limit: int = 50) -> Page:
        params = {"before": before if before is not None else 2**62, "limit": limit + 1}
        with self.reading() as tx:
            rows = tx.fetch_all("list_submission_needs_person_page", params)
        subs = [self.to_submission(row) for row in rows[:limit]]
        return Page(subs, subs[-1].id if len(rows) > limit else None)

    @retried
    def fold_outcomes(self, limit: int = 20_000, lag: float = 10.0) -> int:
        """One transaction holds the cursor's row lock: two folds never count an event
        twice, and a crash leaves the batch folded with its cursor, or neither."""
        with self.transaction() as tx:
            cursor = tx.fetch_one("lock_outcome_fold")
            if cursor is None:  # another fold holds it
                return 0
            after = int(cursor["last_event_id"])
            found = tx.fetch_one(
                "find_outcome_fold_upto", {"after": after, "limit": limit, "lag": seconds(lag)}
            )
            upto = found["upto"] if found else None
            if upto is not None:
                params = {"after": after, "upto": int(upto)}
                tx.execute("add_outcome_fold", params)
                tx.execute("advance_outcome_fold", params)
            tx.execute("trim_outcome_fold")
        return 0 if upto is None else int(upto) - after

    def outcomes_per_minute(
        self, hours: int = 24, channel: str | None = None
    ) -> list[tuple[datetime, str, int]]:
        with self.reading() as tx:
            rows = tx.fetch_all("count_outcomes_per_minute", {"hours": hours, "channel": channel})
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
        except StoreUnavailable:
            raise  # the read would only wait for the server once more
        except StoreError as exc:
            log.info("running counts not folded before reading them: %s", exc)
        with self.reading() as tx:
            rows = tx.fetch_all("count_submissions_by_status", {"channel": channel})
        return [(row["channel"], Status(row["status"]), int(row["n"])) for row in rows]

    def fold_counts(self) -> None:
        """Fold the running counts, on a database that appends them (PostgreSQL, MariaDB);
        SQLite adds to them in place."""
        return

    def count_attention(self, channel: str | None = None) -> dict[str, Any]:
        with self.reading() as tx:
            row = tx.fetch_one("count_submissions_needs_person", self.attention_params(tx, channel))
        assert row is not None
        counts: dict[str, Any] = {
            name: int(row[name] or 0)
            for name in (
                "in_doubt",
                "exhausted",
                "rejected_open",
                "needs_person",
                "pending",
                "resolved",
            )
        }
        counts["oldest_pending"] = self.parse_time(row["oldest_pending"])
        counts["now"] = self.parse_time(row["now"])
        return counts

    def attention_params(self, tx: Tx, channel: str | None) -> dict[str, Any]:
        """`count_submissions_needs_person`'s parameters (MariaDB adds the channels)."""
        return {"channel": channel}

    def count_in_doubt_due(self, channel: str) -> int:
        with self.reading() as tx:
            row = tx.fetch_one("count_submissions_in_doubt_due", {"channel": channel})
        return int(row["n"]) if row else 0

    def holdings(self, channel: str | None = None) -> list[Holding]:
        with self.reading() as tx:
            rows = tx.fetch_all("list_submission_holdings", self.attention_params(tx, channel))
        found = []
        for row in rows:
            times = [self.parse_time(row[name]) for name in ("first_end", "last_end", "now")]
            first, last, now = times
            assert first is not None and last is not None and now is not None
            found.append(Holding(row["channel"], row["locked_by"], int(row["n"]), first, last, now))
        return found

    def get_by_idempotency_keys(self, keys: Sequence[str]) -> list[Submission]:
        if not keys:
            return []
        with self.reading() as tx:
            rows = tx.fetch_all(
                "get_submissions_by_idempotency_keys", {"keys": self.text_list(keys)}
            )
            found = [self.to_submission(row) for row in rows]
            if len(found) < len(set(keys)):
                live = {sub.idempotency_key for sub in found}
                gone = [key for key in keys if key not in live]
                found += self.kept_by_idempotency_keys(tx, gone)
        return found

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
            rows = tx.fetch_all("list_submissions_synced", params)
        return [self.to_submission(row) for row in rows]

    def history(self, submission_id: int) -> tuple[list[Event], datetime]:
        with self.reading() as tx:
            rows = tx.fetch_all("list_events", {"submission_id": submission_id})
            clock = tx.fetch_one("read_clock")
        assert clock is not None
        now = self.parse_time(clock["now"])
        assert now is not None
        return [self.to_event(row) for row in rows], now

    def find_superseding(self, submission_id: int) -> Submission | None:
        with self.reading() as tx:
            row = tx.fetch_one("find_submission_superseding", {"id": submission_id})
            return self.to_submission(row) if row else self.kept_superseding(tx, submission_id)

    def ordering_waits(self, sub: Submission) -> bool:
        if sub.ordering_key is None:
            return False
        params = {"channel": sub.channel, "ordering_key": sub.ordering_key, "id": sub.id}
        with self.reading() as tx:
            row = tx.fetch_one("check_submission_ordering_waits", params)
        return bool(row and row["waits"])
