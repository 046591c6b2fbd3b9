"""The action log (`denpyo_actions`, `denpyo_action_rows`): what people did, the
requests a two-person rule keeps for a second person, and bulk actions carried
out in batches (domain/actions.py).

An action's rows are frozen when it is made (the ids a filter found at that
instant, or the ids a person named). Its holder carries them out a batch at a
time; each batch is one transaction that moves the rows (compare-and-set, as
every move), records what happened to each, and counts them under the holder's
lease: a batch of a holder that lost its action (paused, cancelled, or taken over
after its lease ran out) rolls back whole, so two holders never both act on a row.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from denpyo.domain.actions import (
    ActionKind,
    ActionRecord,
    ActionRow,
    ActionState,
    RowOutcome,
    Scope,
)
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Change, Move
from denpyo.domain.submission import Submission
from denpyo.store.base import NewSubmission, Row, Tx
from denpyo.store.conflicts import retried
from denpyo.store.connections import ConnectionModes
from denpyo.store.params import Params, filter_params, seconds
from denpyo.store.rows import Rows

NO_ROW = "no longer in the ledger"
MOVED = "moved meanwhile: look again"


@dataclass(frozen=True, slots=True)
class NewAction:
    """An entry of the action log, as a person's action writes it."""

    kind: ActionKind
    scope: Scope
    target: str
    actor: str
    note: str
    state: ActionState = ActionState.IN_PROGRESS
    params: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    lapses_in: float | None = None


@dataclass(frozen=True, slots=True)
class Resend:
    """A step that replaces a row by a new one: the new row, the created event's
    detail, and the old row's move once the new id is known."""

    new: NewSubmission
    actor: str
    detail: str
    replace: Callable[[Submission], Move]


Step = Change | Resend
Planned = tuple[int, Step | None, str | None]
"""One row of a batch: its id, what to do (None: skip it), and why it is skipped."""


class _LostAction(Exception):
    """The holder no longer holds the action: the batch rolls back."""


class ActionLog(ConnectionModes, Rows, Params):
    """The action log, its requests and its bulk actions."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "add_action",
            "add_action_row",
            "freeze_action_rows",
            "total_action",
            "get_action",
            "list_actions",
            "count_action_rows_pending",
            "get_action_rows_of_batch",
            "list_action_rows",
            "set_action_row_outcome",
            "progress_action",
            "take_action",
            "let_go_action",
            "move_action",
            "decide_action",
            "lapse_actions",
            "set_action_plan",
            "analyze_action_rows",
            "add_action_row_done",
            "count_action_done",
        }
    )

    @abstractmethod
    def move_in(self, tx: Tx, changes: Sequence[Change]) -> list[Submission | None]: ...

    @abstractmethod
    def record_in(
        self, tx: Tx, new: NewSubmission, *, actor: str, lease: float | None, detail: str | None
    ) -> Submission | None: ...

    @abstractmethod
    def forgotten_in(self, tx: Tx, ids: Sequence[int]) -> set[int]: ...

    # -- making an action ---------------------------------------------------------------

    def add_action(
        self,
        entry: NewAction,
        *,
        ids: Sequence[int] = (),
        flt: Filter | None = None,
        holder: str | None = None,
        lease: float = 60.0,
    ) -> ActionRecord:
        """Write the entry and freeze its rows (`ids`, or every row `flt` finds now),
        in one transaction; with `holder`, that holder holds it."""
        row = self._add_action(entry, ids=ids, flt=flt, holder=holder, lease=lease)
        if flt is not None:
            self._analyze_action_rows()
        return self._action(row)

    @retried
    def _add_action(
        self,
        entry: NewAction,
        *,
        ids: Sequence[int],
        flt: Filter | None,
        holder: str | None,
        lease: float,
    ) -> Row:
        """`add_action`'s transaction: the entry and its rows; the entry as written."""
        with self.transaction() as tx:
            action_id = self.add_action_in(tx, entry, holder=holder, lease=lease)
            if ids:
                rows = [{"action_id": action_id, "submission_id": i} for i in dict.fromkeys(ids)]
                tx.execute_many("add_action_row", rows)
            if flt is not None:
                tx.execute("freeze_action_rows", {**filter_params(flt), "action_id": action_id})
            if ids or flt is not None:
                tx.execute("total_action", {"id": action_id})
            row = tx.fetch_one("get_action", {"id": action_id})
        assert row is not None
        return row

    @retried
    def _analyze_action_rows(self) -> None:
        """Fresh statistics of the action rows, after a bulk action froze many."""
        with self.transaction() as tx:
            tx.execute("analyze_action_rows")

    def add_action_in(
        self, tx: Tx, entry: NewAction, *, holder: str | None = None, lease: float = 60.0
    ) -> int:
        """The entry alone, inside the caller's transaction (a pause's, a resume's)."""
        row = tx.fetch_one(
            "add_action",
            {
                "kind": entry.kind.value,
                "scope": entry.scope.value,
                "target": entry.target,
                "params": json.dumps(entry.params or {}, separators=(",", ":")),
                "plan": None if entry.plan is None else json.dumps(entry.plan),
                "state": entry.state.value,
                "actor": entry.actor,
                "note": entry.note,
                "lapses_in": seconds(entry.lapses_in),
                "total": 0,
                "holder": holder,
                "lease": seconds(lease),
            },
        )
        assert row is not None
        return int(row["id"])

    def log_done_in(
        self, tx: Tx, entry: NewAction, results: Sequence[tuple[int, RowOutcome, str | None]]
    ) -> int:
        """An action carried out inside the caller's transaction, logged with it: the
        entry, its rows and what happened to each, and its counts."""
        action_id = self.add_action_in(tx, entry)
        tx.execute_many(
            "add_action_row_done",
            [
                {"action_id": action_id, "submission_id": sid, "outcome": o.value, "reason": reason}
                for sid, o, reason in results
            ],
        )
        done = sum(1 for _, o, _ in results if o is RowOutcome.DONE)
        counts = {"id": action_id, "total": len(results), "done": done}
        tx.execute("count_action_done", {**counts, "skipped": len(results) - done})
        return action_id

    @retried
    def counted(self, action_id: int, done: int) -> ActionRecord:
        """A prune's or an archive's entry with how many rows it took (all done)."""
        with self.transaction() as tx:
            counts = {"id": action_id, "total": done, "done": done, "skipped": 0}
            tx.execute("count_action_done", counts)
            row = tx.fetch_one("get_action", {"id": action_id})
        assert row is not None
        return self._action(row)

    # -- reading ------------------------------------------------------------------------

    def action(self, action_id: int) -> ActionRecord | None:
        with self.reading() as tx:
            row = tx.fetch_one("get_action", {"id": action_id})
        return self._action(row) if row else None

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
        params = {
            "actor": actor,
            "kind": kind.value if kind else None,
            "state": state.value if state else None,
            "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None,
            "before": before if before is not None else 2**62,
            "limit": limit,
        }
        with self.reading() as tx:
            rows = tx.fetch_all("list_actions", params)
        return [self._action(row) for row in rows]

    def action_rows(
        self, action_id: int, *, after: int = 0, outcome: str | None = None, limit: int = 100
    ) -> list[ActionRow]:
        """The rows behind an action in id order from `after`; `outcome` 'done',
        'skipped' or 'pending' (not yet) selects by what happened to them."""
        params = {"id": action_id, "after": after, "outcome": outcome, "limit": limit}
        with self.reading() as tx:
            rows = tx.fetch_all("list_action_rows", params)
        return [
            ActionRow(
                int(row["action_id"]),
                int(row["submission_id"]),
                RowOutcome(row["outcome"]) if row["outcome"] else None,
                row["reason"],
            )
            for row in rows
        ]

    # -- carrying it out ----------------------------------------------------------------

    @retried
    def take_action(self, action_id: int, *, holder: str, lease: float) -> bool:
        """Become the action's holder: it is in progress and nobody else carries it out."""
        with self.transaction() as tx:
            params = {"id": action_id, "holder": holder, "lease": seconds(lease)}
            return tx.execute("take_action", params) > 0

    @retried
    def let_go_action(self, action_id: int, *, holder: str) -> None:
        with self.transaction() as tx:
            tx.execute("let_go_action", {"id": action_id, "holder": holder})

    def pending_batch(
        self, action_id: int, *, after: int, limit: int
    ) -> tuple[list[int], dict[int, Submission]]:
        """The next `limit` ids of the action not yet done nor skipped (from `after`),
        and their rows as they are now (an id without one: the row is gone)."""
        with self.reading() as tx:
            params = {"id": action_id, "after": after, "limit": limit}
            ids = [
                int(row["submission_id"])
                for row in tx.fetch_all("count_action_rows_pending", params)
            ]
            if not ids:
                return [], {}
            span = {"id": action_id, "first": ids[0], "last": ids[-1]}
            rows = tx.fetch_all("get_action_rows_of_batch", span)
        found = {sub.id: sub for sub in (self.to_submission(row) for row in rows)}
        return ids, found

    @retried
    def carry_out(
        self, action_id: int, *, holder: str, lease: float, plan: Sequence[Planned]
    ) -> list[tuple[int, RowOutcome, str | None]] | None:
        """One batch, in one transaction: each row's step (a move, or a resend), what
        happened to each, and the action's counts, under the holder's lease. None
        (nothing written) when the holder no longer holds the action."""
        rows = list(plan)
        while True:
            try:
                with self.transaction() as tx:
                    results = self._steps(tx, rows)
                    if not self.batch_done_in(tx, action_id, holder, lease, results):
                        raise _LostAction
                    return results
            except _LostAction:
                return None
            except _Moved as moved:  # again, that row skipped: its new row rolled back
                rows = [
                    (sid, None, MOVED) if sid == moved.submission_id else (sid, step, why)
                    for sid, step, why in rows
                ]

    def batch_done_in(
        self,
        tx: Tx,
        action_id: int,
        holder: str,
        lease: float,
        results: Sequence[tuple[int, RowOutcome, str | None]],
    ) -> bool:
        """What happened to each row of a batch, and the action's counts, in the caller's
        transaction, under its holder's lease: False when the holder no longer holds the
        action (the caller rolls the batch back)."""
        tx.execute_many(
            "set_action_row_outcome",
            [
                {"action_id": action_id, "submission_id": sid, "outcome": o.value, "reason": reason}
                for sid, o, reason in results
            ],
        )
        done = sum(1 for _, o, _ in results if o is RowOutcome.DONE)
        progress = {
            "id": action_id,
            "holder": holder,
            "lease": seconds(lease),
            "done": done,
            "skipped": len(results) - done,
        }
        return bool(tx.execute("progress_action", progress))

    def _steps(self, tx: Tx, plan: Iterable[Planned]) -> list[tuple[int, RowOutcome, str | None]]:
        """Apply a batch's steps in the caller's transaction: the moves together, each
        resend with its move; a row that moved meanwhile is skipped."""
        results: dict[int, tuple[RowOutcome, str | None]] = {}
        moves: list[tuple[int, Change]] = []
        order: list[int] = []
        abandons: set[int] = set()
        for sid, step, reason in plan:
            order.append(sid)
            if step is not None and _abandons(step):
                abandons.add(sid)
            if step is None:
                results[sid] = (RowOutcome.SKIPPED, reason or NO_ROW)
            elif isinstance(step, Resend):
                created = self.record_in(
                    tx, step.new, actor=step.actor, lease=None, detail=step.detail
                )
                if created is None:
                    results[sid] = (RowOutcome.SKIPPED, f"{step.new.key} exists already")
                    continue
                [old] = self.move_in(tx, [step.replace(created)])
                if old is None:
                    raise _Moved(sid)  # its new row must not stay: carry_out retries
                results[sid] = (RowOutcome.DONE, f"resent as #{created.id}")
            else:
                moves.append((sid, step))
        if moves:
            after = self.move_in(tx, [change for _, change in moves])
            for (sid, _), moved in zip(moves, after, strict=True):
                results[sid] = (RowOutcome.DONE, None) if moved else (RowOutcome.SKIPPED, MOVED)
        # A row whose payload a person forgot while this batch was decided takes no
        # retry, resend nor mark synced (domain/rules.py): the batch rolls back.
        done = [sid for sid in order if results[sid][0] is RowOutcome.DONE]
        if forgotten := self.forgotten_in(tx, [sid for sid in done if sid not in abandons]):
            raise _Moved(min(forgotten))
        return [(sid, *results[sid]) for sid in order]

    # -- people deciding ----------------------------------------------------------------

    @retried
    def set_plan(
        self,
        action_id: int,
        plan: dict[str, Any],
        *,
        to: ActionState,
        from_: ActionState,
        lapses_in: float | None = None,
    ) -> bool:
        """Keep a dry run's counts and samples, and move the action on from `from_`
        (a planned bulk action: planned again, awaiting approval or in progress); False when it
        is no longer in `from_`."""
        params = {
            "id": action_id,
            "plan": json.dumps(plan),
            "state": to.value,
            "from_state": from_.value,
            "lapses_in": seconds(lapses_in),
        }
        with self.transaction() as tx:
            return tx.execute("set_action_plan", params) > 0

    @retried
    def move_action(self, action_id: int, to: ActionState, *, from_: Sequence[ActionState]) -> bool:
        """A person pauses, resumes or cancels an action (or a request starts): False
        when it is not in one of `from_` (any longer)."""
        states = [s.value for s in from_] * 4
        params = {"id": action_id, "state": to.value}
        params.update({f"from{n}": states[n - 1] for n in range(1, 5)})
        with self.transaction() as tx:
            return tx.execute("move_action", params) > 0

    @retried
    def decide_action(self, action_id: int, *, approver: str, approve: bool, note: str) -> bool:
        """A second person approves (it is in progress) or declines a request; False when
        it is no longer waiting, lapsed, or `approver` is the person who asked."""
        state = ActionState.IN_PROGRESS if approve else ActionState.DECLINED
        params = {"id": action_id, "state": state.value, "approver": approver, "note": note}
        with self.transaction() as tx:
            return tx.execute("decide_action", params) > 0

    @retried
    def lapse_actions(self) -> int:
        """Requests nobody decided in time become `lapsed`; how many."""
        with self.transaction() as tx:
            return tx.execute("lapse_actions")

    # -- rows to objects ----------------------------------------------------------------

    def _action(self, row: Row) -> ActionRecord:
        def when(name: str) -> datetime | None:
            return self.parse_time(row[name])

        created = when("created_at")
        updated = when("updated_at")
        assert created is not None and updated is not None
        return ActionRecord(
            id=int(row["id"]),
            kind=ActionKind(row["kind"]),
            scope=Scope(row["scope"]),
            target=row["target"],
            params=json.loads(row["params"] or "{}"),
            plan=json.loads(row["plan"]) if row["plan"] else None,
            state=ActionState(row["state"]),
            actor=row["actor"],
            note=row["note"],
            approver=row["approver"],
            decision_note=row["decision_note"],
            decided_at=when("decided_at"),
            lapses_at=when("lapses_at"),
            total=int(row["total"]),
            done=int(row["done"]),
            skipped=int(row["skipped"]),
            locked_by=row["locked_by"],
            locked_until=when("locked_until"),
            created_at=created,
            updated_at=updated,
            finished_at=when("finished_at"),
        )


def _abandons(step: Step) -> bool:
    """An abandon, the one action a forgotten row still takes."""
    return isinstance(step, Move) and step.event == "abandon"


class _Moved(Exception):
    """A resend's old row moved meanwhile: the whole batch rolls back (its new row with
    it), and the batch is tried again without that row."""

    def __init__(self, submission_id: int) -> None:
        super().__init__(submission_id)
        self.submission_id = submission_id
