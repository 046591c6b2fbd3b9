"""Key rotation: every live payload re-encrypted with the current key, batch by batch.

`Ledger.rotate_payload_key` (`denpyo rotate-key`) walks the rows in id order, a
batch at a time: a row sealed with another key is opened and sealed again with the
first configured key, a row still in clear is sealed (so turning encryption on and
running this encrypts the rows written before), a row sealed with the current key is
left alone, and a row no configured key opens is listed, never touched. Forgotten
rows (their payload erased) are skipped. Each batch is one transaction of
compare-and-set writes (store/payload_keys.py): a run killed half-way leaves every
batch before it done, and a second run finds those rows current and goes on.

A worker may run meanwhile: rotation changes the payload column only, and the
worker reads the payload with any configured key, so each row is sent once, with
its payload, whichever key it is sealed with when it is claimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from denpyo.domain.sealed import SealedPayload
from denpyo.errors import ConfigurationError
from denpyo.store.payload_keys import Reseal
from denpyo.store.sealing import new_payload_key as new_payload_key  # for `payload-key --new-key`
from denpyo.store.sealing import no_key_configured, sealed_token

if TYPE_CHECKING:
    from denpyo.store import Store

BUSY_TRIES = 8
"""Times a batch's rows that another transaction held locked are tried again (after
0.02 s, doubling): a claim or a settle holds a row for milliseconds."""

UNREADABLE_LISTED = 1000
"""Unreadable rows a report lists (all are counted)."""


@dataclass(frozen=True, slots=True)
class UnreadableRow:
    """A row whose payload no configured key opens: left as it is."""

    id: int
    channel: str
    key: str
    kid: str
    reason: str


@dataclass(slots=True)
class KeyRotation:
    """What one `rotate_payload_key` run did: rows re-encrypted with the key `kid`
    (`from_clear` of them were in clear), rows `current` already, rows `unreadable`
    (their key is not configured: listed, up to 1000, and left as they are), rows
    `busy` (held by other transactions throughout, or removed meanwhile: a second run
    takes them), rows `changed` meanwhile (forgotten, or written by another run), in
    how many `batches`."""

    kid: str
    reencrypted: int = 0
    from_clear: int = 0
    current: int = 0
    unreadable_count: int = 0
    busy: int = 0
    changed: int = 0
    batches: int = 0
    last_id: int = 0
    unreadable: list[UnreadableRow] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every live payload is sealed with the current key now."""
        return not self.unreadable_count and not self.busy

    def to_json(self) -> dict[str, Any]:
        """The report as `denpyo rotate-key --json` prints it."""
        return {
            "kid": self.kid,
            "reencrypted": self.reencrypted,
            "from_clear": self.from_clear,
            "current": self.current,
            "unreadable": self.unreadable_count,
            "busy": self.busy,
            "changed": self.changed,
            "batches": self.batches,
            "complete": self.complete,
            "unreadable_rows": [
                {
                    "id": row.id,
                    "channel": row.channel,
                    "key": row.key,
                    "kid": row.kid,
                    "reason": row.reason,
                }
                for row in self.unreadable
            ],
        }


Progress = Callable[[KeyRotation], None]
"""`progress(report_so_far)`, after each batch."""


def rotate_payloads(
    store: Store,
    *,
    batch_size: int = 500,
    channel: str | None = None,
    progress: Progress | None = None,
) -> KeyRotation:
    """Re-encrypt every live payload not sealed with the current key (module docstring)."""
    sealing = store.sealing
    if sealing.codec is None:
        raise ConfigurationError(no_key_configured("rotate-key"))
    report = KeyRotation(sealing.codec.kid)
    while batch := store.payload_batch(report.last_id, batch_size, channel):
        changes: list[Reseal] = []
        clear: set[int] = set()
        for row in batch:
            value = row.value
            new = sealing.rotated(value, row.channel, row.key)
            if new is None:
                report.current += 1
            elif isinstance(new, SealedPayload):
                report.unreadable_count += 1
                if len(report.unreadable) < UNREADABLE_LISTED:
                    report.unreadable.append(
                        UnreadableRow(row.id, row.channel, row.key, new.kid, new.reason)
                    )
            else:
                changes.append(Reseal(row.id, row.text, new))
                if sealed_token(value) is None:
                    clear.add(row.id)
        written, busy = _write(store, changes)
        report.reencrypted += len(written)
        report.from_clear += len(clear.intersection(written))
        report.busy += len(busy)
        report.changed += len(changes) - len(written) - len(busy)
        report.batches += 1
        report.last_id = batch[-1].id
        if progress is not None:
            progress(report)
    return report


def _write(store: Store, changes: list[Reseal]) -> tuple[list[int], list[int]]:
    """Write a batch; rows held by other transactions are tried again a few times."""
    written, busy = store.reseal(changes)
    pause = 0.02
    for _ in range(BUSY_TRIES):
        if not busy:
            break
        time.sleep(pause)
        pause *= 2
        waiting = set(busy)
        more, busy = store.reseal([change for change in changes if change.id in waiting])
        written += more
    return written, busy
