"""`PortableSqlStore`: the four writes in portable SQL, several statements each
(SQLite and MariaDB).

MariaDB has neither `UPDATE ... RETURNING` nor `ON CONFLICT`, so a write is
built from what both have: an INSERT that sends back what it computed, the row's
id and times (or nothing when the channel and key exist, see `Tx.insert`), a
compare-and-set UPDATE per move whose matched-row count says whether it won, one
read-back of the rows that moved, and one multi-row INSERT of their events. On
SQLite the UPDATE returns the moved row itself (`MOVE_RETURNS_ROW`), and a
settle only what it changed: no read-back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from denpyo.domain.moves import Change, Move, Settle
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.store.base import NewSubmission, Tx
from denpyo.store.conflicts import retried
from denpyo.store.params import (
    distinct_groups,
    event_params,
    event_row,
    insert_params,
    move_params,
    settle_params,
)
from denpyo.store.sql_store import SqlStore


class PortableSqlStore(SqlStore):
    # Whether `move_submission` returns the row it moved (UPDATE ... RETURNING).
    MOVE_RETURNS_ROW: ClassVar[bool] = False
    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "insert_submission",
            "insert_event",
            "insert_events_sent_inline",
            "find_submissions_ready",
            "find_submissions_in_doubt",
            "move_submission",
            "settle_submission",
            "get_submissions_many",
        }
    )

    def record_in(
        self, tx: Tx, new: NewSubmission, *, actor: str, lease: float | None, detail: str | None
    ) -> Submission | None:
        params = insert_params(new, actor, lease, self.sealing)
        row = tx.insert("insert_submission", params)
        if row is None:
            return None
        row_id = int(row["id"])
        if lease:
            tx.execute("insert_events_sent_inline", {"submission_id": row_id, "actor": actor})
        else:
            created = event_row(row_id, "created", None, Status.REQUESTING, 0, actor, detail)
            tx.execute("insert_event", created)
        return self.recorded(row, new, params)

    def record_many_in(self, tx: Tx, news: Iterable[NewSubmission], actor: str) -> int:
        return sum(
            self.record_in(tx, new, actor=actor, lease=None, detail=None) is not None
            for new in news
        )

    def claim_ready(
        self, channel: str, *, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim("find_submissions_ready", channel, holder, limit, lease, verify=False)

    def claim_in_doubt(
        self, channel: str, *, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim("find_submissions_in_doubt", channel, holder, limit, lease, verify=True)

    @retried
    def _claim(
        self, query: str, channel: str, holder: str, limit: int, lease: float, *, verify: bool
    ) -> list[Submission]:
        """Find and lock the due rows, then move each to held, in one transaction."""
        with self.transaction() as tx:
            return self._claim_in(tx, query, channel, holder, limit, lease, verify=verify)

    def claim_ready_in(
        self, tx: Tx, channel: str, holder: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim_in(
            tx, "find_submissions_ready", channel, holder, limit, lease, verify=False
        )

    def _claim_in(
        self,
        tx: Tx,
        query: str,
        channel: str,
        holder: str,
        limit: int,
        lease: float,
        *,
        verify: bool,
    ) -> list[Submission]:
        found = tx.fetch_all(query, {"channel": channel, "limit": limit})
        moves = [
            Move.claim(int(row["id"]), Status(row["status"]), holder, lease, verify=verify)
            for row in found
        ]
        return [sub for sub in self.move_in(tx, moves) if sub is not None]

    def move_in(self, tx: Tx, changes: Sequence[Change]) -> list[Submission | None]:
        """Per group of distinct rows: each change's UPDATE (a move's `move_submission`,
        a settle's `settle_submission`; a winner holds its row's lock until commit, so
        the read-back sees exactly what it wrote), one read-back of the winners, one
        INSERT of their events: n + 2 statements, not 3n. Where the UPDATE returns its
        row (SQLite), there is no read-back: n + 1."""
        results: list[Submission | None] = [None] * len(changes)
        for group in distinct_groups(changes):
            moved: dict[int, Submission] = {}
            if self.MOVE_RETURNS_ROW:
                for _, change in group:
                    sub = self._move_returning(tx, change)
                    if sub is not None:
                        moved[change.submission_id] = sub
            else:
                won = [change for _, change in group if tx.execute(*_statement(change))]
                if won:
                    ids = self.id_list([change.submission_id for change in won])
                    rows = {
                        int(row["id"]): row
                        for row in tx.fetch_all("get_submissions_many", {"ids": ids})
                    }
                    moved = {
                        change.submission_id: self.to_submission(
                            rows[change.submission_id], change.row
                        )
                        for change in won
                    }
            events = []
            for ordinal, change in group:
                sub = moved.get(change.submission_id)
                if sub is not None:
                    results[ordinal] = sub
                    if change.event:
                        events.append(event_params(change, sub.attempts))
            if events:
                tx.execute_many("insert_event", events)
        return results

    def _move_returning(self, tx: Tx, change: Change) -> Submission | None:
        """One UPDATE ... RETURNING; a settle's lean one sends back only what its
        holder cannot know. None: the change lost its compare-and-set."""
        if isinstance(change, Settle):
            row = tx.fetch_one("settle_submission", settle_params(change))
            return None if row is None else self.settled(row, change)
        row = tx.fetch_one("move_submission", move_params(change))
        return None if row is None else self.to_submission(row, change.row)


def _statement(change: Change) -> tuple[str, dict[str, Any]]:
    """The compare-and-set UPDATE of a change and its parameters."""
    if isinstance(change, Settle):
        return "settle_submission", settle_params(change)
    return "move_submission", move_params(change)
