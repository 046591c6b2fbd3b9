"""The audit: the ledger against the provider's own records, one channel, one window.

Memory stays bounded however long the window: it is cut into steps (an hour by
default), and for each step

1. the provider's records of the step (`list_remote(a, b)`) are read in batches;
   each batch's rows are read by idempotency key (one indexed query) and each
   record is compared with its row. The keys seen are kept for this step only;
2. the ledger's rows synced in the step are read page by page (keyset on
   `synced_at, id`); a row whose key the provider did not list is a candidate;
3. candidates get a second look, because a row may be synced well after the
   provider accepted it (verified after a crash, marked by a person) and so fall
   in another step on the provider's side: the provider's records of the step
   widened by `slack` on each side are read, then the channel's `verify` (if it
   has one) is asked about each row still unaccounted for.

Whatever is left is missing at the provider. Nothing is written (domain/audit.py
says what each kind of discrepancy means), except with `adopt`: a call the
provider accepted that the ledger has no row of at all (its row lost with a
database that failed over before the commit reached the standby) is recorded as
a synced row, when `list_remote` gives its business key (`RemoteRecord.key`), so
the application's next submit of that key finds it and sends nothing.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from denpyo.domain.audit import (
    AuditReport,
    Discrepancy,
    RemoteRecord,
    adopted,
    compare_ids,
    compare_remote,
    missing_at_provider,
    why_not_adopted,
)
from denpyo.domain.limits import encode_payload, unlisted_payload
from denpyo.domain.submission import Submission
from denpyo.domain.verdict import Delivered, NotDelivered
from denpyo.engine.bridge import LoopThread
from denpyo.engine.channel import ChannelSpec
from denpyo.engine.flows import Check
from denpyo.engine.runners import SyncRunner
from denpyo.errors import ConfigurationError, InvalidInput
from denpyo.store import NewSubmission, Store

BATCH = 500
"""Records compared per query, and ledger rows per page."""

Progress = Callable[[int, int], None]
"""`progress(done, total)`: told how far a long run (an audit's steps, a reconcile's rows)
has come, from the thread that waits for it."""


class Auditor:
    """Runs audits for a ledger: its store, its private loop (where an async
    `list_remote` runs, beside the async channels) and its sync driver (verify)."""

    def __init__(self, store: Store, bridge: LoopThread, driver: SyncRunner) -> None:
        self.store = store
        self.bridge = bridge
        self.driver = driver

    def run(
        self,
        spec: ChannelSpec,
        since: datetime,
        until: datetime,
        *,
        step: float = 3600.0,
        slack: float = 3600.0,
        progress: Progress | None = None,
        adopt: bool = False,
        actor: str = "audit",
    ) -> AuditReport:
        if spec.list_remote is None:
            raise ConfigurationError(
                f"channel {spec.name!r} has no list_remote: the audit needs the provider's "
                "own records (ledger.channel(..., list_remote=fn))"
            )
        if since.tzinfo is None or until.tzinfo is None:
            raise InvalidInput("the audit's since and until must be timezone-aware")
        if since >= until:
            raise InvalidInput(f"the audit's window is empty: {since} is not before {until}")
        if step <= 0 or slack < 0:
            raise InvalidInput("step must be positive seconds and slack not negative")
        report = AuditReport(spec.name, since.astimezone(UTC), until.astimezone(UTC))
        steps = list(_steps(report.since, report.until, timedelta(seconds=step)))
        for done, (start, end) in enumerate(steps):
            if progress is not None:
                progress(done, len(steps))
            self._step(spec, start, end, timedelta(seconds=slack), report, adopt and actor)
        if progress is not None:
            progress(len(steps), len(steps))
        return report

    def _step(
        self,
        spec: ChannelSpec,
        start: datetime,
        end: datetime,
        slack: timedelta,
        report: AuditReport,
        adopter: str | bool,
    ) -> None:
        seen: dict[str, RemoteRecord] = {}
        synced: dict[str, Submission] = {}  # synced rows of the keys seen, and listed once
        for batch in self._records(spec, start, end):
            report.remote_records += len(batch)
            keys = sorted({record.idempotency_key for record in batch})
            rows = {
                row.idempotency_key: row
                for row in self.store.get_by_idempotency_keys(keys)
                if row.channel == spec.name
            }
            for record in batch:
                key = record.idempotency_key
                earlier = seen.get(key)
                if earlier == record:
                    continue  # listed twice by the provider's pager: one record
                row = rows.get(key)
                found = compare_remote(record, row, spec.name, earlier)
                if found is not None and row is None and earlier is None and adopter:
                    found = self._adopt(spec, record, found, str(adopter))
                    row = found.submission if found.adopted else None
                if found is not None:
                    report.discrepancies.append(found)
                seen.setdefault(key, record)
                if earlier is not None:
                    synced.pop(key, None)
                elif row is not None and found is None:
                    synced[key] = row
        for key, row in synced.items():
            if found := compare_ids(row, seen[key].remote_id):
                report.discrepancies.append(found)
        candidates: dict[str, Submission] = {}
        for row in self._synced(spec.name, start, end):
            report.ledger_synced += 1
            if row.idempotency_key in seen:
                continue
            candidates[row.idempotency_key] = row
        if candidates:
            self._second_look(spec, start - slack, end + slack, candidates, report)

    def _second_look(
        self,
        spec: ChannelSpec,
        start: datetime,
        end: datetime,
        candidates: dict[str, Submission],
        report: AuditReport,
    ) -> None:
        """Rows the provider did not list in their step: look wider, then ask verify."""
        for batch in self._records(spec, start, end):
            for record in batch:
                row = candidates.pop(record.idempotency_key, None)
                if row is not None and (found := compare_ids(row, record.remote_id)):
                    report.discrepancies.append(found)
            if not candidates:
                return
        for key, row in list(candidates.items()):
            why = ""
            if spec.verify is not None:
                verdict = self.driver.perform(Check(spec, row))
                if isinstance(verdict, Delivered):
                    del candidates[key]
                    if found := compare_ids(row, verdict.remote_id):
                        report.discrepancies.append(found)
                    continue
                why = "" if isinstance(verdict, NotDelivered) else f" (verify: {verdict.why})"
            report.discrepancies.append(missing_at_provider(row, why))

    def _adopt(
        self, spec: ChannelSpec, record: RemoteRecord, found: Discrepancy, actor: str
    ) -> Discrepancy:
        """Record the provider's call as its key's synced row, or say why not."""
        row_of_key = self.store.get_by_key(spec.name, record.key) if record.key else None
        why = why_not_adopted(record, row_of_key)
        if why is None:
            assert record.key is not None
            payload = (  # the marker is reserved: an application's payload may not hold it
                json.dumps(unlisted_payload())
                if record.payload is None
                else encode_payload(record.payload)
            )
            new = NewSubmission(spec.name, record.key, record.idempotency_key, payload)
            note = (
                "adopted by the audit: the provider accepted this call "
                f"({record.remote_id or 'no remote id'}) and the ledger had no row of it"
            )
            row = self.store.adopt(new, remote_id=record.remote_id, actor=actor, note=note)
            if row is not None:
                return adopted(found, row)
            why = "not adopted: a row of this key was written meanwhile"
        return Discrepancy(
            found.kind, found.idempotency_key, found.remote_id, None, f"{found.detail} ({why})"
        )

    def _synced(self, channel: str, start: datetime, end: datetime) -> Iterator[Submission]:
        after: tuple[datetime, int] | None = None
        while True:
            page = self.store.list_synced(channel, start, end, after=after, limit=BATCH)
            yield from page
            if len(page) < BATCH:
                return
            last = page[-1]
            assert last.synced_at is not None
            after = (last.synced_at, last.id)

    def _records(
        self, spec: ChannelSpec, start: datetime, end: datetime
    ) -> Iterator[list[RemoteRecord]]:
        """The provider's records of [start, end) in batches: `list_remote` may be a
        plain function returning an iterable (a generator that pages), an async
        generator, or an async function returning an iterable."""
        assert spec.list_remote is not None
        result: Any = spec.list_remote(start, end)
        if inspect.isawaitable(result):
            result = self.bridge.run(_awaited(result))
        if hasattr(result, "__aiter__"):
            iterator: AsyncIterator[Any] = result.__aiter__()
            try:
                while batch := self.bridge.run(_take(iterator, BATCH)):
                    yield _checked(spec, batch)
            finally:
                closer = getattr(iterator, "aclose", None)
                if closer is not None:
                    self.bridge.run(closer())
            return
        records = iter(result)
        while batch := list(islice(records, BATCH)):
            yield _checked(spec, batch)


def _steps(
    since: datetime, until: datetime, step: timedelta
) -> Iterator[tuple[datetime, datetime]]:
    start = since
    while start < until:
        end = min(start + step, until)
        yield start, end
        start = end


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


async def _take(iterator: AsyncIterator[Any], n: int) -> list[Any]:
    """Up to `n` items of an async iterator (fewer at its end)."""
    batch: list[Any] = []
    while len(batch) < n:
        try:
            batch.append(await iterator.__anext__())
        except StopAsyncIteration:
            break
    return batch


def _checked(spec: ChannelSpec, batch: Iterable[Any]) -> list[RemoteRecord]:
    records = list(batch)
    for record in records:
        if not isinstance(record, RemoteRecord) or not isinstance(record.idempotency_key, str):
            raise ConfigurationError(
                f"channel {spec.name!r}: list_remote must yield denpyo.RemoteRecord("
                f"idempotency_key, remote_id), not {record!r}"
            )
    return records
