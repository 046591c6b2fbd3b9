"""Statement parameters: denpyo's values as the named queries take them.

The functions build the parameters of the statements every SQL database shares
(an insert, a move, a settle, an event, an operator's filter); `Params` holds
the conversions a driver needs, which a database overrides in its own module
where its driver or its stored form differs (store/sqlite.py, store/mysql.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from denpyo.domain.filters import Filter
from denpyo.domain.moves import Change, Move, Settle, event_attempt
from denpyo.domain.status import Status
from denpyo.store.base import NewSubmission
from denpyo.store.sealing import Sealing


class Params:
    """A SQL store's conversions of values into query parameters."""

    def id_list(self, ids: Sequence[int]) -> Any:
        """A list of row ids as one query parameter (SQLite: a JSON array)."""
        return sorted(ids)

    def text_list(self, values: Sequence[str]) -> Any:
        """A list of strings as one query parameter (SQLite: a JSON array)."""
        return list(values)

    def time_param(self, value: datetime) -> Any:
        """An aware datetime as a query parameter that compares with the stored times
        (and so can use their indexes)."""
        return value.astimezone(UTC)


def insert_params(
    new: NewSubmission, actor: str, lease: float | None, sealing: Sealing
) -> dict[str, Any]:
    """The parameters of the statement that inserts one row. Its payload goes in as
    `sealing.stored` makes it (sealed where the ledger has keys: store/sealing.py), as
    it does in PostgreSQL's many-row inserts."""
    return {
        "channel": new.channel,
        "key": new.key,
        "idempotency_key": new.idempotency_key,
        "payload": sealing.stored(new),
        "ordering_key": new.ordering_key,
        "supersedes": new.supersedes,
        "locked_by": actor if lease else None,
        "lease": seconds(lease),
        "traceparent": new.traceparent,
        "tracestate": new.tracestate,
    }


def seconds(value: float | None) -> float | None:
    """Durations go to SQL rounded to milliseconds (SQLite reads them as text)."""
    return None if value is None else round(max(float(value), 0.0), 3)


Group = list[tuple[int, Change]]
"""Changes that name each row once, with their places among the changes asked for."""


def distinct_groups(changes: Sequence[Change]) -> list[Group]:
    """Changes (with their position) in consecutive groups that name each row once:
    one statement applies one change per row, so a row named again begins the next
    group."""
    groups: list[Group] = []
    seen: set[int] = set()
    for ordinal, change in enumerate(changes):
        if not groups or change.submission_id in seen:
            groups.append([])
            seen = set()
        groups[-1].append((ordinal, change))
        seen.add(change.submission_id)
    return groups


def filter_params(flt: Filter) -> dict[str, Any]:
    """An operator's filter as the parameters of `{{list_filter}}` (and its limit)."""
    statuses = [status.value for status in flt.statuses]
    padded = (statuses * 4)[:4] if statuses else [None] * 4
    return {
        "all_statuses": not statuses,
        **{f"status{i}": value for i, value in enumerate(padded)},
        "channel": flt.channel,
        "since": flt.since.isoformat() if flt.since else None,
        "until": flt.until.isoformat() if flt.until else None,
        "key_prefix": flt.key_prefix,
        "error_text": flt.error_text,
        "in_doubt": _flag(flt.in_doubt),
        "needs_person": _flag(flt.needs_person),
        "resolved": _flag(flt.resolved),
        "limit": flt.limit,
    }


def _flag(value: bool | None) -> int | None:
    """An optional yes/no filter as SQL sees it: 1, 0, or NULL for "either"."""
    return None if value is None else int(value)


def event_row(
    submission_id: int,
    kind: str,
    from_status: Status | None,
    to_status: Status | None,
    attempt: int,
    actor: str,
    detail: str | None = None,
    duration_ms: int | None = None,
) -> dict[str, Any]:
    """`insert_event`'s parameters: one line of a submission's history."""
    return {
        "submission_id": submission_id,
        "kind": kind,
        "from_status": from_status,
        "to_status": to_status,
        "attempt": attempt,
        "actor": actor,
        "detail": detail,
        "duration_ms": duration_ms,
    }


def event_params(change: Change, attempts: int) -> dict[str, Any]:
    """`insert_event`'s parameters for the event a change records (`change.event`), on
    a row left with `attempts`."""
    assert change.event is not None
    return event_row(
        change.submission_id,
        change.event,
        change.from_status,
        change.to_status,
        event_attempt(change.event, attempts),
        change.actor,
        change.detail,
        change.duration_ms,
    )


def move_params(move: Move) -> dict[str, Any]:
    return {
        "id": move.submission_id,
        "from_status": move.from_status.value,
        "to_status": move.to_status.value,
        "holder": move.holder,
        "locked_by": move.new_holder,
        "lease": seconds(move.lease),
        "attempt_delta": move.attempt_delta,
        "retry_in": seconds(move.retry_in),
        "remote_id": move.remote_id,
        "keep_error": move.keep_error,
        "error_kind": move.error_kind.value if move.error_kind else None,
        "last_error": move.last_error,
        "resolution": move.resolution,
    }


def settle_params(settle: Settle) -> dict[str, Any]:
    """`settle_submission`'s parameters: what a settle changes, and the holder it
    expects."""
    return {
        "id": settle.submission_id,
        "holder": settle.holder,
        "to_status": settle.to_status.value,
        "retry_in": seconds(settle.retry_in),
        "remote_id": settle.remote_id,
        "error_kind": settle.error_kind.value if settle.error_kind else None,
        "last_error": settle.last_error,
    }
