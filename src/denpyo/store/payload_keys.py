"""Re-encrypting the payloads with the current key, a batch at a time (the store's side
of `Ledger.rotate_payload_key`: engine/payload_keys.py decides what each row gets).

A batch is read without locks, its new payloads are computed outside any
transaction, and then written in one transaction: the rows are locked first with
SKIP LOCKED (a row a worker's claim or settle holds this instant is skipped, never
waited for, so rotation cannot deadlock with them: it is tried again), then each is
written by a compare-and-set on its payload as read. Rotation changes the payload
column only: status, locks, times and the history stay as they are, so a worker
sending the row meanwhile settles it as if nothing happened.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from denpyo.store.conflicts import retried
from denpyo.store.connections import ConnectionModes
from denpyo.store.params import Params
from denpyo.store.rows import Rows


@dataclass(frozen=True, slots=True)
class StoredPayload:
    """A row's payload as the table keeps it: `text` as stored (what a compare-and-set
    compares), `value` that text parsed, not opened."""

    id: int
    channel: str
    key: str
    text: str

    @property
    def value(self) -> Any:
        return json.loads(self.text)


@dataclass(frozen=True, slots=True)
class Reseal:
    """Write `new` (JSON text) as the payload of row `id`, if it is still `old`."""

    id: int
    old: str
    new: str


class PayloadKeys(ConnectionModes, Rows, Params):
    """`payload_batch`, `reseal` and `due_for_keys`, over the named queries under
    `-- Payload keys`."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {"list_payload_batch", "lock_payload", "reseal_payload", "make_payload_due_now"}
    )

    def payload_batch(
        self, after: int, limit: int, channel: str | None = None
    ) -> list[StoredPayload]:
        params = {"after": after, "limit": limit, "channel": channel}
        with self.reading() as tx:
            rows = tx.fetch_all("list_payload_batch", params)
        return [
            StoredPayload(int(row["id"]), row["channel"], row["key"], _text(row["payload"]))
            for row in rows
        ]

    @retried
    def reseal(self, changes: Sequence[Reseal]) -> tuple[list[int], list[int]]:
        if not changes:
            return [], []
        with self.transaction() as tx:
            ids = self.id_list([change.id for change in changes])
            locked = {int(row["id"]) for row in tx.fetch_all("lock_payload", {"ids": ids})}
            written = [
                change.id
                for change in changes
                if change.id in locked
                and tx.execute(
                    "reseal_payload", {"id": change.id, "old": change.old, "new": change.new}
                )
            ]
        busy = [change.id for change in changes if change.id not in locked]
        return written, busy

    @retried
    def due_for_keys(self, channel: str, prefixes: Sequence[str]) -> int:
        with self.transaction() as tx:
            return sum(
                tx.execute("make_payload_due_now", {"channel": channel, "pattern": prefix + "%"})
                for prefix in prefixes
            )


def _text(value: Any) -> str:
    """The payload column as text (every query here selects it so)."""
    return value.decode() if isinstance(value, bytes) else str(value)
