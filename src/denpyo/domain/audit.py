"""The audit's words: what a provider says it accepted, and where it and the ledger
disagree. Pure: the engine (engine/audit.py) pages through both sides and asks
these functions what each pair of records means.

The ledger is the record of what the application *meant* to call, and of what it
believes happened; the provider's own list is what did happen. After reconcile
they should agree, channel by channel (guarantee 3). Each way they can disagree:

- ``not_synced``: the provider accepted a call whose row is not `synced` (no row
  at all, or `requesting`, `failed`, `rejected`): the ledger under-reports, or a
  row in flight had not settled yet when the audit looked;
- ``missing_at_provider``: the ledger says `synced` and the provider has no record
  of that key: the ledger over-reports (or the provider lost it);
- ``remote_id_differs``: both have it, under different remote ids;
- ``accepted_twice``: the provider accepted the same key more than once, under
  different ids: a double effect (a resend after the provider forgot the key, or a
  provider that never honoured it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from denpyo.domain.provider_events import ProviderEvent
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission


@dataclass(frozen=True, slots=True)
class RemoteRecord:
    """One call the provider accepted, as its own list (or its logs) tells it.

    `key` and `payload`: the business key and the data the call was made for, when
    the provider keeps them (metadata sent with the call: Stripe's `metadata`, an
    e-mail provider's tags). Only with the key can `audit(adopt=True)` record a call
    the ledger lost (a failover) as the row a later submit of that key finds; the
    payload, when given, is kept with it (else the row's is
    `limits.unlisted_payload()`)."""

    idempotency_key: str
    remote_id: str | None = None
    key: str | None = None
    payload: Any = None


class DiscrepancyKind(StrEnum):
    """How the ledger and the provider disagree: `not_synced` (the provider accepted
    a call whose row is not synced), `missing_at_provider` (a synced row the provider
    has no record of), `remote_id_differs` (both have it, under different ids),
    `accepted_twice` (the provider accepted one key twice: a double effect)."""

    NOT_SYNCED = "not_synced"
    MISSING_AT_PROVIDER = "missing_at_provider"
    REMOTE_ID_DIFFERS = "remote_id_differs"
    ACCEPTED_TWICE = "accepted_twice"


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """One disagreement, with the ledger's row when there is one."""

    kind: DiscrepancyKind
    idempotency_key: str
    remote_id: str | None
    submission: Submission | None
    detail: str
    adopted: bool = False
    """The audit recorded the provider's call as a synced row (`submission`)."""


@dataclass(slots=True)
class AuditReport:
    """What an audit of one channel over [since, until) found. `remote_records`
    counts the provider's records of the window, `ledger_synced` the ledger's rows
    synced in it; `discrepancies` lists each disagreement."""

    channel: str
    since: datetime
    until: datetime
    remote_records: int = 0
    ledger_synced: int = 0
    discrepancies: list[Discrepancy] = field(default_factory=list)
    unknown_events: list[ProviderEvent] = field(default_factory=list)
    """The providers' webhook events received in the window that named no row of the
    ledger (whatever the channel: such an event names none)."""

    @property
    def clean(self) -> bool:
        return not self.discrepancies and not self.unknown_events

    @property
    def adopted(self) -> int:
        """Calls the provider accepted that the ledger had no row of, recorded now."""
        return sum(1 for found in self.discrepancies if found.adopted)

    def counts(self) -> dict[str, int]:
        """The discrepancies found, by kind, every kind named (0 when none): what
        `denpyo audit` summarizes."""
        counts = dict.fromkeys((kind.value for kind in DiscrepancyKind), 0)
        for found in self.discrepancies:
            counts[found.kind.value] += 1
        return counts


def compare_remote(
    record: RemoteRecord,
    row: Submission | None,
    channel: str,
    earlier: RemoteRecord | None = None,
) -> Discrepancy | None:
    """A provider's record against the ledger's row of its key (None: no row on this
    channel). `earlier` is another record of the same key the audit met before. The
    ids of a synced row are compared later (`compare_ids`), for keys listed once: a
    key listed twice is a double effect, whichever record came first."""
    key, remote_id = record.idempotency_key, record.remote_id
    if earlier is not None:
        return Discrepancy(
            DiscrepancyKind.ACCEPTED_TWICE,
            key,
            remote_id,
            row,
            f"the provider accepted this key twice: {earlier.remote_id} and {remote_id}",
        )
    if row is None:
        return Discrepancy(
            DiscrepancyKind.NOT_SYNCED,
            key,
            remote_id,
            None,
            f"the provider accepted it ({remote_id}); the ledger has no row of {channel!r} "
            "with this idempotency key",
        )
    if row.status is not Status.SYNCED:
        state = row.status.value + (
            " in doubt" if row.in_doubt else " in flight" if row.in_flight else ""
        )
        return Discrepancy(
            DiscrepancyKind.NOT_SYNCED,
            key,
            remote_id,
            row,
            f"the provider accepted it ({remote_id}); the ledger says {state}",
        )
    return None  # synced: its id is compared once every record of the key is in


def compare_ids(row: Submission, remote_id: str | None) -> Discrepancy | None:
    """Both sides have the call: do their ids agree? (An id missing on either side
    cannot disagree.)"""
    if remote_id is None or row.remote_id is None or remote_id == row.remote_id:
        return None
    return Discrepancy(
        DiscrepancyKind.REMOTE_ID_DIFFERS,
        row.idempotency_key,
        remote_id,
        row,
        f"the ledger says {row.remote_id}, the provider {remote_id}",
    )


def missing_at_provider(row: Submission, why: str = "") -> Discrepancy:
    """The ledger says synced and the provider has no record of the key."""
    return Discrepancy(
        DiscrepancyKind.MISSING_AT_PROVIDER,
        row.idempotency_key,
        None,
        row,
        f"the ledger says synced ({row.remote_id or 'no remote id'}); the provider has no "
        f"record of this key{why}",
    )


def discrepancy_json(found: Discrepancy) -> dict[str, Any]:
    sub = found.submission
    return {
        "kind": found.kind.value,
        "idempotency_key": found.idempotency_key,
        "remote_id": found.remote_id,
        "submission_id": sub.id if sub else None,
        "key": sub.key if sub else None,
        "status": sub.status.value if sub else None,
        "ledger_remote_id": sub.remote_id if sub else None,
        "detail": found.detail,
        "adopted": found.adopted,
    }


def why_not_adopted(record: RemoteRecord, row_of_key: Submission | None) -> str | None:
    """Why a call the provider accepted, and the ledger has no row of its idempotency
    key, cannot be recorded as that key's synced row (None: it can). A row of the
    same channel and key under another idempotency key means the application
    submitted the key again after the ledger lost the first row: a second call was
    (or may be) made, which no adoption can undo; a person looks."""
    if record.key is None:
        return "list_remote gave no key for it, so it cannot be adopted"
    if row_of_key is not None:
        where = "remembered (removed)" if row_of_key.removed_at else f"row {row_of_key.id}"
        return (
            f"not adopted: the ledger has {where} for key {record.key!r} under another "
            "idempotency key, a second call for the same key"
        )
    return None


def adopted(found: Discrepancy, row: Submission) -> Discrepancy:
    """The discrepancy once the audit recorded its call as `row`."""
    return Discrepancy(
        found.kind,
        found.idempotency_key,
        found.remote_id,
        row,
        f"{found.detail}; adopted as row {row.id} (synced)",
        adopted=True,
    )
