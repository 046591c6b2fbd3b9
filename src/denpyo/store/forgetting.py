"""Forgetting payloads (`denpyo forget`, domain/forgetting.py): the store's side.

A batch of rows is forgotten in one transaction: the rows are locked, each one
still closed has its payload set to JSON null, its last error cleared and its
resolution replaced by `[forgotten]` (a compare-and-set: a row open again
meanwhile is skipped); the details of their events, and the texts of the action
log about them (notes, decisions, a resend's corrected payload, skip reasons), are
replaced whole by `[forgotten]` (`replaced`: never searched for what they quoted,
which a provider may have spelled any way), the rest of the parameters and dry
runs scrubbed of the payloads' values; then each row's `forgotten` event; and the
forget's own entry counts the batch, under its holder's lease (as a bulk action's
batch: store/actions.py). Nothing here moves a status, so the running counts and
the report stay as they were.

A removed row has no payload left in the table: its memory (denpyo_keys) is marked
forgotten, its resolution replaced, and the action log with it; its archive files
are the archive's business (denpyo/archive).

The searches by a payload's field read the whole table (by primary key, a page at
a time): a forget is a person's rare errand, and no index is kept for it on the
table every call writes. The texts of the action log are found through
`denpyo_action_rows` by its index on the row (schema 14), which only people's
actions write.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from denpyo.domain.actions import ActionKind, ActionRecord, RowOutcome
from denpyo.domain.forgetting import FORGOTTEN, SEALED_PATH, Scrubber, Where, replaced
from denpyo.domain.submission import Submission
from denpyo.store.base import Row, Tx
from denpyo.store.conflicts import retried
from denpyo.store.connections import ConnectionModes
from denpyo.store.params import Params
from denpyo.store.rows import Rows

NO_ROW = "no longer in the ledger"
OPEN_AGAIN = "open again meanwhile (retried, or being sent): look again"
FORGOTTEN_ALREADY = "forgotten already"

Outcomes = list[tuple[int, RowOutcome, str | None]]


class Forgetting(ConnectionModes, Rows, Params):
    """The searches and the writes of `forget`."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "match_forget_page",
            "list_forget_sealed_page",
            "lock_forget",
            "forget_payload",
            "add_forget_event",
            "list_forget_event_details",
            "scrub_forget_events",
            "list_forget_action_texts",
            "scrub_forget_actions",
            "list_forget_action_reasons",
            "scrub_forget_action_reasons",
            "forget_key",
            "list_forget_archives",
            "find_forget_pruned",
            "find_forget_action_of",
            "find_forgotten_among",
        }
    )

    if TYPE_CHECKING:  # the store's, from store/removal.py and store/actions.py

        def kept_by_id(self, tx: Tx, submission_id: int) -> Submission | None: ...

        def forget_provider_events_in(self, tx: Tx, ids: Sequence[int]) -> None: ...

        def _action(self, row: Row) -> ActionRecord: ...

        def batch_done_in(
            self,
            tx: Tx,
            action_id: int,
            holder: str,
            lease: float,
            results: Sequence[tuple[int, RowOutcome, str | None]],
        ) -> bool: ...

    # -- finding the rows -------------------------------------------------------------------

    def forget_matches(
        self, where: Where, *, channel: str | None, after: int, limit: int
    ) -> list[Submission]:
        """One page, in id order after `after`, of the live rows whose clear payload has
        `where`'s string at its path (an encrypted payload is not looked into here)."""
        params = {
            "path": self.text_list(where.path),
            "json_path": where.json_path,
            "value": where.value,
            "channel": channel,
            "after": after,
            "limit": limit,
        }
        with self.reading() as tx:
            rows = tx.fetch_all("match_forget_page", params)
        return [self.to_submission(row) for row in rows]

    def forget_sealed(self, *, channel: str | None, after: int, limit: int) -> list[Submission]:
        """One page, in id order after `after`, of the live rows whose payload is
        encrypted, read as every row is read (their payloads decrypted, where the
        ledger has the key), for `forget` to match them one by one."""
        params = {"channel": channel, "after": after, "limit": limit, "sealed_path": SEALED_PATH}
        with self.reading() as tx:
            rows = tx.fetch_all("list_forget_sealed_page", params)
        return [self.to_submission(row) for row in rows]

    def forget_archives(self, channel: str | None = None) -> list[str]:
        """Where removed rows (of `channel`) were archived: the archives a search by a
        payload's field reads."""
        with self.reading() as tx:
            rows = tx.fetch_all("list_forget_archives", {"channel": channel})
        return [str(row["archived_to"]) for row in rows]

    def forget_pruned(self, channel: str | None = None) -> bool:
        """Whether a row (of `channel`) was pruned and is not forgotten: its payload is
        gone, so a search by a payload's field cannot find it."""
        with self.reading() as tx:
            return tx.fetch_one("find_forget_pruned", {"channel": channel}) is not None

    def forget_action_of(self, submission_id: int) -> ActionRecord | None:
        """The forget that erased a row's payload (the latest), for a removed row, whose
        history is gone: who, when and why."""
        with self.reading() as tx:
            row = tx.fetch_one("find_forget_action_of", {"id": submission_id})
        return self._action(row) if row else None

    def forgotten_in(self, tx: Tx, ids: Sequence[int]) -> set[int]:
        """Which of these rows are forgotten, read in the caller's transaction (after its
        moves: a person's action that raced a forget sees it here)."""
        if not ids:
            return set()
        rows = tx.fetch_all("find_forgotten_among", {"ids": self.id_list(ids)})
        return {int(row["id"]) for row in rows}

    # -- forgetting -------------------------------------------------------------------------

    @retried
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
    ) -> Outcomes | None:
        """Forget a batch of live rows in one transaction (module docstring), each with a
        `forgotten` event by `actor` with `note`; what happened to each. None (nothing
        written) when the forget's entry is no longer held by `holder`."""
        try:
            with self.transaction() as tx:
                # MariaDB's driver writes an empty list as `IN ()`, an error
                rows = tx.fetch_all("lock_forget", {"ids": self.id_list(ids)}) if ids else []
                found = {sub.id: sub for sub in map(self.to_submission, rows)}
                results = [self._forget_one(tx, sid, found.get(sid)) for sid in ids]
                done = [sid for sid, outcome, _ in results if outcome is RowOutcome.DONE]
                self._replace_events(tx, done)
                self.forget_provider_events_in(tx, done)
                self._scrub_action_log(tx, done, scrub, action_id)
                for sid in done:  # after the details are replaced: the person's note stays
                    sub = found[sid]
                    event = {
                        "submission_id": sid,
                        "status": sub.status.value,
                        "attempt": sub.attempts,
                    }
                    tx.execute("add_forget_event", {**event, "actor": actor, "detail": note})
                self._counted(tx, action_id, holder, lease, results)
                return results
        except _Lost:
            return None

    def _forget_one(
        self, tx: Tx, sid: int, sub: Submission | None
    ) -> tuple[int, RowOutcome, str | None]:
        """One locked row: its payload erased (a compare-and-set on its being closed);
        or why it is skipped."""
        if sub is None:
            return sid, RowOutcome.SKIPPED, NO_ROW
        if sub.forgotten_at is not None:
            return sid, RowOutcome.SKIPPED, FORGOTTEN_ALREADY
        if not tx.execute("forget_payload", {"id": sid, "resolution": replaced(sub.resolution)}):
            return sid, RowOutcome.SKIPPED, OPEN_AGAIN
        return sid, RowOutcome.DONE, None

    @retried
    def forget_kept(
        self, ids: Sequence[int], *, scrub: Scrubber, action_id: int, holder: str, lease: float
    ) -> Outcomes | None:
        """Mark a batch of removed rows' memories forgotten (their resolutions and the
        action log's texts about them scrubbed) in one transaction, once their archive
        files no longer hold their payloads; None as `forget_rows`."""
        try:
            with self.transaction() as tx:
                results: Outcomes = []
                for sid in ids:
                    kept = self.kept_by_id(tx, sid)
                    resolution = None if kept is None else replaced(kept.resolution)
                    if kept is None:
                        results.append((sid, RowOutcome.SKIPPED, NO_ROW))
                    elif tx.execute("forget_key", {"id": sid, "resolution": resolution}):
                        results.append((sid, RowOutcome.DONE, None))
                    else:
                        results.append((sid, RowOutcome.SKIPPED, FORGOTTEN_ALREADY))
                done = [sid for sid, outcome, _ in results if outcome is RowOutcome.DONE]
                self._scrub_action_log(tx, done, scrub, action_id)
                self.forget_provider_events_in(tx, done)
                self._counted(tx, action_id, holder, lease, results)
                return results
        except _Lost:
            return None

    def _replace_events(self, tx: Tx, ids: Sequence[int]) -> None:
        """The rows' event details, each replaced whole by `FORGOTTEN`."""
        if not ids:
            return
        for row in tx.fetch_all("list_forget_event_details", {"ids": self.id_list(ids)}):
            detail = replaced(row["detail"])
            if detail != row["detail"]:
                params = {"id": row["id"], "submission_id": row["submission_id"]}
                tx.execute("scrub_forget_events", {**params, "detail": detail})

    def _scrub_action_log(
        self, tx: Tx, ids: Sequence[int], scrub: Scrubber, action_id: int
    ) -> None:
        """The action log's texts about the rows: every other action's note, decision
        note and a resend's corrected payload replaced (an earlier forget's note, scrubbed
        when it was written, stays), its other parameters and dry run scrubbed, and why
        an action skipped one of them replaced."""
        if not ids:
            return
        params = {"ids": self.id_list(ids), "action_id": action_id}
        for row in tx.fetch_all("list_forget_action_texts", params):
            given = json.loads(row["params"] or "{}")
            plan = None if row["plan"] is None else json.loads(row["plan"])
            forget = row["kind"] == ActionKind.FORGET.value
            note = scrub(row["note"]) if forget else FORGOTTEN
            decision = (
                scrub.text(row["decision_note"]) if forget else replaced(row["decision_note"])
            )
            kept, planned = scrub.value(given), scrub.value(plan)
            if "payload" in kept:
                kept["payload"] = FORGOTTEN
            if (note, decision, kept, planned) != (row["note"], row["decision_note"], given, plan):
                texts = {"note": note, "decision_note": decision, "params": _json(kept)}
                texts["plan"] = None if planned is None else _json(planned)
                tx.execute("scrub_forget_actions", {**texts, "id": row["id"]})
        for row in tx.fetch_all("list_forget_action_reasons", {"ids": self.id_list(ids)}):
            reason = replaced(row["reason"])
            if reason != row["reason"]:
                key = {"action_id": row["action_id"], "submission_id": row["submission_id"]}
                tx.execute("scrub_forget_action_reasons", {**key, "reason": reason})

    def _counted(
        self, tx: Tx, action_id: int, holder: str, lease: float, results: Outcomes
    ) -> None:
        """What happened to each row, and the forget's counts, under its holder's lease;
        `_Lost` when the holder lost it (the caller's transaction rolls back)."""
        if not self.batch_done_in(tx, action_id, holder, lease, results):
            raise _Lost


class _Lost(Exception):
    """The forget's entry is no longer held by its holder: the batch rolls back."""


def _json(value: Any) -> str:
    """JSON text as the action log keeps its parameters and dry runs."""
    return json.dumps(value, separators=(",", ":"))
