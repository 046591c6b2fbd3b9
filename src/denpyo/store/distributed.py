"""The distributed SQL profile: PostgreSQL's store, run the way YugabyteDB and
CockroachDB run it.

Chosen by the URL: `yugabytedb://…` and `cockroachdb://…` (psycopg underneath,
the scheme read as `postgresql://`), or `postgresql://…?denpyo_profile=distributed`
on PostgreSQL itself (the option is stripped before connecting). What changes,
and why (docs/how-to/distributed-sql.md says it for users):

- workers poll: no LISTEN/NOTIFY (CockroachDB has none, YugabyteDB's is early);
- no triggers: the counts by status are computed from the rows when read
  (overlay migrations 0003 and 0004 make no trigger);
- no pg_partman and no partitions: retention by batched removal;
- no advisory locks, no SAVEPOINT (a bulk enqueue goes by statements, not COPY);
  these are its record's `Capabilities` (store/dialects.py), which the shared code
  asks;
- SERIALIZABLE sessions, every transaction denpyo owns run again on 40001/40P01
  (store/conflicts.py), and a commit whose outcome is unknown (40003, or the
  connection lost) re-read by the row's key or id before anything is decided:
  never assumed lost, never assumed done (`again_or_done`);
- a claim by one atomic `UPDATE … FROM (SELECT … LIMIT n) … RETURNING` that checks
  each row is still due, where CockroachDB's SKIP LOCKED may skip rows nobody
  locked (sql/postgresql-distributed.sql).

The application's own transaction that enqueues is the application's to run again:
`run_again_on_conflict` (denpyo.retrying) is the helper.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from enum import Enum
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode

import psycopg

from denpyo.domain.moves import Change, Move
from denpyo.domain.submission import Submission
from denpyo.errors import ConfigurationError, StoreError, StoreUnavailable
from denpyo.store import PROFILE_OPTION
from denpyo.store.base import AsyncStore, NewSubmission
from denpyo.store.conflicts import CONFLICT_TRIES, retried
from denpyo.store.dialects import POSTGRESQL_DISTRIBUTED as DISTRIBUTED
from denpyo.store.postgresql import PostgresStore
from denpyo.store.postgresql_async import PostgresAsync

log = logging.getLogger("denpyo.store")

UNKNOWN_STATE = "40003"
"""SQLSTATE statement_completion_unknown: CockroachDB's "result is ambiguous"."""

MIGRATION_COLLISIONS = ("23505", "42P07", "42710", "40001", "40P01")
"""What a migration that raced another ends in: a unique violation (a version row, or
the catalog's), a table or object that exists already, a conflict."""


class Outcome(Enum):
    """What a re-read row says of a change whose commit was not confirmed."""

    DONE = "done"  # the change is in the row: it committed
    AGAIN = "again"  # the row is as the change expects it: it did not commit
    LOST = "lost"  # the row moved on otherwise: the compare-and-set lost


def unknown_outcome(exc: BaseException) -> bool:
    """Whether a store error leaves a write's commit unknown: the connection lost (at
    COMMIT, or under a statement that was its own transaction), or 40003."""
    if isinstance(exc, StoreUnavailable):
        return True
    return isinstance(exc, StoreError) and getattr(exc.__cause__, "sqlstate", None) == UNKNOWN_STATE


def again_or_done(change: Change, row: Submission | None) -> Outcome:
    """Whether a change whose commit is unknown is in the row as re-read. A settle
    counts its attempt: only its holder's settle takes the row's attempts past the
    held row's, so attempts above it mean it committed. A general move is in the row
    when the row has its target status and holder."""
    if row is None:
        return Outcome.LOST
    if isinstance(change, Move):
        expected = (change.from_status, change.holder)
        target = (change.to_status, change.new_holder)
        if (row.status, row.locked_by) == target and target != expected:
            return Outcome.DONE
        return Outcome.AGAIN if (row.status, row.locked_by) == expected else Outcome.LOST
    if row.attempts > change.row.attempts:
        return Outcome.DONE
    held = (row.status, row.locked_by) == (change.from_status, change.holder)
    return Outcome.AGAIN if held else Outcome.LOST


def conninfo_of(url: str) -> str:
    """The libpq URL of a profile's URL: its scheme read as `postgresql://`, the
    profile's option taken off (libpq refuses options it does not know)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() in DISTRIBUTED.schemes:
        scheme = "postgresql"
    base, mark, query = rest.partition("?")
    options = [(name, value) for name, value in parse_qsl(query) if name != PROFILE_OPTION]
    if mark and options:
        return f"{scheme}://{base}?{urlencode(options)}"
    return f"{scheme}://{base}"


class DistributedStore(PostgresStore):
    """PostgreSQL's store under the distributed SQL profile (the module says what changes)."""

    dialect = DISTRIBUTED.name
    QUERIES: ClassVar[frozenset[str]] = PostgresStore.QUERIES | {
        "list_submissions_held_by",
        "get_submissions_many",
    }

    @classmethod
    def from_url(cls, url: str) -> DistributedStore:
        store = super().from_url(conninfo_of(url))
        assert isinstance(store, DistributedStore)
        return store

    def _durable_session(self, conn: psycopg.Connection[Any]) -> None:
        conn.denpyo_profile = DISTRIBUTED.name  # type: ignore[attr-defined]
        super()._durable_session(conn)

    def _use_layout(self, partitioned: bool) -> None:
        if partitioned:
            raise ConfigurationError(
                "these denpyo tables are in the partitioned layout, which the distributed SQL "
                "profile does not use (no pg_partman): open them without denpyo_profile"
            )
        super()._use_layout(False)

    def migrate_partitioned(self, every: str) -> list[int]:
        raise ConfigurationError(
            "the distributed SQL profile keeps one table (no pg_partman): retention removes "
            "rows in batches (`denpyo prune`); CockroachDB's row-level TTL is not for "
            "denpyo's rows, whose keys must outlive them"
        )

    def migrate(self) -> list[int]:
        """As PostgreSQL's, without its advisory lock: of two migrations at once, the
        one whose DDL or version row collides with the other's (or that loses under
        SERIALIZABLE) runs again, and finds the migrations applied."""
        for tries in range(1, CONFLICT_TRIES + 1):
            try:
                return super().migrate()
            except StoreError as exc:
                state = getattr(exc.__cause__, "sqlstate", None)
                if state not in MIGRATION_COLLISIONS or tries == CONFLICT_TRIES:
                    raise
                log.info("migration collided with another (%s); running it again", exc)
                time.sleep(random.uniform(0, 0.1 * tries))
        raise AssertionError("unreachable")

    @retried
    def remove_in(self, params: dict[str, Any]) -> int:
        """Remember the keys and delete the rows in one SERIALIZABLE transaction: an
        insert of a removed key either sees the key or meets the row, or one of the
        two transactions loses (40001) and runs again. No wait on other sessions'
        snapshots (PostgreSQL's pg_stat_activity, which the engines lack)."""
        with self.transaction() as tx:
            remembered = tx.fetch_one("remember_keys", params)
            if remembered is None or not int(remembered["kept"]):
                return 0
            row = tx.fetch_one("remove_submissions", params)
        return int(row["removed"]) if row else 0

    # -- commits whose outcome is unknown ---------------------------------------------------

    def record(
        self, new: NewSubmission, *, actor: str, lease: float | None = None, conn: Any = None
    ) -> tuple[Submission, bool]:
        """As PostgreSQL's; a commit of the store's own whose outcome is unknown is
        re-read by the row's key: the row with this idempotency key is the one
        written; no row, and it is written again. The caller's transaction (`conn`)
        is the caller's to decide."""
        if conn is not None:
            return super().record(new, actor=actor, lease=lease, conn=conn)
        for tries in range(1, CONFLICT_TRIES + 1):
            try:
                return super().record(new, actor=actor, lease=lease)
            except StoreError as exc:
                if not unknown_outcome(exc) or tries == CONFLICT_TRIES:
                    raise
                log.info(
                    "enqueue of %s:%s: commit unknown (%s); reading it again",
                    new.channel,
                    new.key,
                    exc,
                )
                found = self.get_by_key(new.channel, new.key)  # raises while out of reach
                if found is not None:
                    return found, found.idempotency_key == new.idempotency_key
        raise AssertionError("unreachable")

    def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        """As PostgreSQL's; a commit whose outcome is unknown is re-read by the rows'
        ids (`again_or_done`), and only the changes not in them run again."""
        return settle_unknown(changes, super().move, lambda ids: [self.get(one) for one in ids])

    def async_ops(self, db: Executor) -> AsyncStore:
        self.check_open()
        return DistributedAsync(self)


class DistributedAsync(PostgresAsync):
    """The worker's claims and settles, their unknown commits re-read."""

    async def _durable_session(self, conn: psycopg.AsyncConnection[Any]) -> None:
        conn.denpyo_profile = DISTRIBUTED.name  # type: ignore[attr-defined]
        await super()._durable_session(conn)

    async def claim(
        self, channel: str, *, holder: str, limit: int, lease: float, in_doubt: bool = False
    ) -> list[Submission]:
        """A claim whose commit is unknown is re-read by its holder (each claim has its
        own): the rows it holds are the ones it claimed."""
        try:
            return await super().claim(
                channel, holder=holder, limit=limit, lease=lease, in_doubt=in_doubt
            )
        except StoreError as exc:
            if not unknown_outcome(exc):
                raise
            log.info("claim by %s: commit unknown (%s); reading its rows", holder, exc)
            rows = await self._run(
                [("list_submissions_held_by", {"channel": channel, "holder": holder})]
            )
            return [self.store.to_submission(row) for row in rows[0]]

    async def move(self, changes: Sequence[Change]) -> list[Submission | None]:
        store = self.store

        async def reread(ids: Sequence[int]) -> list[Submission | None]:
            rows = await self._run([("get_submissions_many", {"ids": list(ids)})])
            by_id = {int(row["id"]): store.to_submission(row) for row in rows[0]}
            return [by_id.get(one) for one in ids]

        return await asettle_unknown(changes, super().move, reread)


def _decide(
    changes: Sequence[Change],
    pending: Sequence[int],
    found: Sequence[Submission | None],
    moved: list[Submission | None],
) -> list[int]:
    """For the changes at places `pending`, whose rows were re-read (`found`): those
    in their rows go into `moved`; back the places of those to run again."""
    again = []
    for place, row in zip(pending, found, strict=True):
        outcome = again_or_done(changes[place], row)
        if outcome is Outcome.DONE:
            moved[place] = row
        elif outcome is Outcome.AGAIN:
            again.append(place)
    return again


def settle_unknown(
    changes: Sequence[Change],
    run: Callable[[Sequence[Change]], list[Submission | None]],
    reread: Callable[[Sequence[int]], list[Submission | None]],
) -> list[Submission | None]:
    """`run(changes)`; after a commit whose outcome is unknown, the rows re-read and
    only the changes not in them run again (CONFLICT_TRIES runs at most)."""
    moved: list[Submission | None] = [None] * len(changes)
    pending = list(range(len(changes)))
    for tries in range(1, CONFLICT_TRIES + 1):
        batch = [changes[place] for place in pending]
        try:
            for place, result in zip(pending, run(batch), strict=True):
                moved[place] = result
            return moved
        except StoreError as exc:
            if not unknown_outcome(exc) or tries == CONFLICT_TRIES:
                raise
            _log_unknown(len(batch), exc)
            found = reread([change.submission_id for change in batch])
            pending = _decide(changes, pending, found, moved)
            if not pending:
                return moved
    raise AssertionError("unreachable")


async def asettle_unknown(
    changes: Sequence[Change],
    run: Callable[[Sequence[Change]], Awaitable[list[Submission | None]]],
    reread: Callable[[Sequence[int]], Awaitable[list[Submission | None]]],
) -> list[Submission | None]:
    """`settle_unknown` on the worker's event loop."""
    moved: list[Submission | None] = [None] * len(changes)
    pending = list(range(len(changes)))
    for tries in range(1, CONFLICT_TRIES + 1):
        batch = [changes[place] for place in pending]
        try:
            for place, result in zip(pending, await run(batch), strict=True):
                moved[place] = result
            return moved
        except StoreError as exc:
            if not unknown_outcome(exc) or tries == CONFLICT_TRIES:
                raise
            _log_unknown(len(batch), exc)
            found = await reread([change.submission_id for change in batch])
            pending = _decide(changes, pending, found, moved)
            if not pending:
                return moved
    raise AssertionError("unreachable")


def _log_unknown(rows: int, exc: BaseException) -> None:
    log.info("a move of %d rows: commit unknown (%s); reading them again", rows, exc)
