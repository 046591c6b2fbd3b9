"""What the providers told by webhook (`denpyo_provider_events`, schema 15): each
(provider, event id) recorded once, with the row it named, in the transaction that
moves that row or adds the event to its history (domain/provider_events.py)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, ClassVar

from denpyo.domain.forgetting import FORGOTTEN
from denpyo.domain.moves import Change
from denpyo.domain.provider_events import ProviderEvent, Received, confirming_move
from denpyo.domain.submission import Submission
from denpyo.store.base import Row, Tx
from denpyo.store.conflicts import retried
from denpyo.store.connections import ConnectionModes
from denpyo.store.params import Params
from denpyo.store.rows import Rows

TRIES = 3
"""How often a confirming move is tried when the row moved under it (a worker
settled it meanwhile): then the row as it is now decides again."""


class ProviderEvents(ConnectionModes, Rows, Params):
    """The providers' webhook events, and the rows they settle."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "insert_provider_event",
            "list_provider_event_history",
            "find_provider_event_unknown",
            "list_provider_events",
            "get_submission_by_remote_id",
            "forget_provider_events",
        }
    )

    @abstractmethod
    def move_in(self, tx: Tx, changes: Sequence[Change]) -> list[Submission | None]:
        """`Store.move` inside a transaction (store/sql_store.py)."""

    @abstractmethod
    def kept_by_idempotency_keys(self, tx: Tx, keys: Sequence[str]) -> list[Submission]:
        """Removed rows, as denpyo_keys remembers them (store/removal.py)."""

    @abstractmethod
    def _live(self, tx: Tx, submission_id: int) -> Submission | None:
        """A live row by id (store/removal.py)."""

    @retried
    def record_provider_event(
        self, event: ProviderEvent, *, actor: str, scrub: Callable[[str, Submission], str | None]
    ) -> Received:
        """Record `event` once and apply it to the row it names, in one transaction:
        a row in doubt or failed is confirmed `synced` (`confirming_move`), any other
        gets a history line; no row: kept for the audit. `scrub(detail, row)` is the
        detail as it may be stored about that row. A second delivery writes nothing."""
        with self.transaction() as tx:
            sub = self._named_row(tx, event)
            detail = event.detail if sub is None else scrub(event.detail or "", sub) or None
            params: dict[str, Any] = {
                "provider": event.provider,
                "event_id": event.event_id,
                "kind": event.kind,
                "submission_id": None if sub is None else sub.id,
                "idempotency_key": event.idempotency_key,
                "remote_id": event.remote_id,
                "detail": detail,
            }
            event = replace(event, detail=detail, submission_id=params["submission_id"])
            if not tx.execute("insert_provider_event", params):
                return Received(event, sub, duplicate=True)
            if sub is None or sub.removed_at is not None:  # a removed row has no history
                return Received(event, sub)
            for _ in range(TRIES):
                move = confirming_move(sub, event, actor)
                if move is None:
                    break
                after = self.move_in(tx, [move])[0]
                if after is not None:
                    return Received(event, after, confirmed=True)
                found = self._live(tx, sub.id)  # moved meanwhile: as it is now
                if found is None:
                    return Received(event, None)
                sub = found
            told = event.history_line(detail)
            tx.execute(
                "list_provider_event_history",
                {
                    "submission_id": sub.id,
                    "status": sub.status.value,
                    "attempt": sub.attempts,
                    "actor": actor,
                    "detail": told,
                },
            )
            return Received(event, sub)

    def unknown_provider_events(
        self, since: datetime, until: datetime, limit: int = 1000
    ) -> list[ProviderEvent]:
        """The events received in [since, until) that named no row the ledger has,
        oldest first (what the audit lists)."""
        params = {"since": self.time_param(since), "until": self.time_param(until), "limit": limit}
        with self.reading() as tx:
            rows = tx.fetch_all("find_provider_event_unknown", params)
        return [self._provider_event(row) for row in rows]

    def provider_events_of(self, submission_id: int) -> list[ProviderEvent]:
        """The events that named a row, oldest first."""
        with self.reading() as tx:
            rows = tx.fetch_all("list_provider_events", {"submission_id": submission_id})
        return [self._provider_event(row) for row in rows]

    def forget_provider_events_in(self, tx: Tx, ids: Sequence[int]) -> None:
        """The details of the rows' provider events replaced by `FORGOTTEN` (a forget)."""
        if ids:
            tx.execute("forget_provider_events", {"ids": self.id_list(ids), "detail": FORGOTTEN})

    def _named_row(self, tx: Tx, event: ProviderEvent) -> Submission | None:
        """The row an event names: by its idempotency key (a removed row's too, as
        denpyo_keys remembers it), else by its remote id."""
        if event.idempotency_key is not None:
            keys = [event.idempotency_key]
            row = tx.fetch_one(
                "get_submissions_by_idempotency_keys", {"keys": self.text_list(keys)}
            )
            if row is not None:
                return self.to_submission(row)
            kept = self.kept_by_idempotency_keys(tx, keys)
            if kept:
                return kept[0]
        if event.remote_id is not None:
            row = tx.fetch_one("get_submission_by_remote_id", {"remote_id": event.remote_id})
            if row is not None:
                return self.to_submission(row)
        return None

    def _provider_event(self, row: Row) -> ProviderEvent:
        sid = row["submission_id"]
        return ProviderEvent(
            row["provider"],
            row["event_id"],
            row["kind"],
            row["idempotency_key"],
            row["remote_id"],
            row["detail"],
            None if sid is None else int(sid),
            self.parse_time(row["received_at"]),
        )
