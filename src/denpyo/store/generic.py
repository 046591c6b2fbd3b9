"""The four writes in portable SQL, several statements each: SQLite and MariaDB.

MariaDB has neither `UPDATE ... RETURNING` nor `ON CONFLICT`, so a write is
built from what both have: an INSERT that sends back what it computed, the row's
id and times (or nothing when the channel and key exist, see `Tx.insert`), a
compare-and-set UPDATE per move whose matched-row count says whether it won, one
read-back of the rows that moved, and one multi-row INSERT of their events. On
SQLite the UPDATE returns the moved row itself (`MOVE_RETURNS_ROW`), and an
ended attempt only what it changed: no read-back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from denpyo.domain.moves import Move
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.store.driver import NewSubmission, Tx
from denpyo.store.sql_store import (
    SqlStore,
    distinct_runs,
    event_params,
    event_row,
    insert_params,
    move_params,
    settle_params,
)


class GenericSqlStore(SqlStore):
    # Whether `submission_move` returns the row it moved (UPDATE ... RETURNING).
    MOVE_RETURNS_ROW: ClassVar[bool] = False
    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "submission_insert", "event_insert", "event_insert_sent_inline",
            "submission_find_ready", "submission_find_in_doubt", "submission_move",
            "submission_get_many",
        }
    )  # fmt: skip

    def record_in(
        self, tx: Tx, new: NewSubmission, *, actor: str, lease: float | None, detail: str | None
    ) -> Submission | None:
        params = insert_params(new, actor, lease)
        row = tx.insert("submission_insert", params)
        if row is None:
            return None
        row_id = int(row["id"])
        if lease:
            tx.execute("event_insert_sent_inline", {"submission_id": row_id, "actor": actor})
        else:
            created = event_row(row_id, "created", None, Status.REQUESTING, 0, actor, detail)
            tx.execute("event_insert", created)
        return self.recorded(row, new, params)

    def record_many_in(self, tx: Tx, news: Iterable[NewSubmission], actor: str) -> int:
        return sum(
            self.record_in(tx, new, actor=actor, lease=None, detail=None) is not None
            for new in news
        )

    def claim_ready(
        self, channel: str, *, worker: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim("submission_find_ready", channel, worker, limit, lease, verify=False)

    def claim_in_doubt(
        self, channel: str, *, worker: str, limit: int, lease: float
    ) -> list[Submission]:
        return self._claim("submission_find_in_doubt", channel, worker, limit, lease, verify=True)

    def _claim(
        self, query: str, channel: str, worker: str, limit: int, lease: float, *, verify: bool
    ) -> list[Submission]:
        """Find and lock the due rows, then move each to held, in one transaction."""
        with self.transaction() as tx:
            found = tx.fetch_all(query, {"channel": channel, "limit": limit})
            moves = [
                Move.claim(int(row["id"]), Status(row["status"]), worker, lease, verify=verify)
                for row in found
            ]
            return [sub for sub in self.move_in(tx, moves) if sub is not None]

    def move_in(self, tx: Tx, moves: Sequence[Move]) -> list[Submission | None]:
        """Per run of distinct rows: each move's UPDATE (a winner holds its row's lock
        until commit, so the read-back sees exactly what it wrote), one read-back of
        the winners, one INSERT of their events: n + 2 statements, not 3n. Where the
        UPDATE returns its row (SQLite), there is no read-back: n + 1."""
        results: list[Submission | None] = [None] * len(moves)
        for run in distinct_runs(moves):
            moved: dict[int, Submission] = {}
            if self.MOVE_RETURNS_ROW:
                for _, move in run:
                    sub = self._move_returning(tx, move)
                    if sub is not None:
                        moved[move.submission_id] = sub
            else:
                won = [move for _, move in run if tx.execute("submission_move", move_params(move))]
                if won:
                    ids = self.id_list([move.submission_id for move in won])
                    rows = {
                        int(row["id"]): row
                        for row in tx.fetch_all("submission_get_many", {"ids": ids})
                    }
                    moved = {
                        move.submission_id: self.to_submission(rows[move.submission_id], move.row)
                        for move in won
                    }
            events = []
            for ordinal, move in run:
                sub = moved.get(move.submission_id)
                if sub is not None:
                    results[ordinal] = sub
                    if move.event:
                        events.append(event_params(move, sub.attempts))
            if events:
                tx.execute_many("event_insert", events)
        return results

    def _move_returning(self, tx: Tx, move: Move) -> Submission | None:
        """One UPDATE ... RETURNING; an ended attempt by the lean `submission_settle`,
        which sends back only what its mover cannot know. None: the move lost."""
        if move.ends_attempt:
            row = tx.fetch_one("submission_settle", settle_params(move))
            return None if row is None else self.settled(row, move)
        row = tx.fetch_one("submission_move", move_params(move))
        return None if row is None else self.to_submission(row, move.row)
