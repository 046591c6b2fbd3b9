"""Rows to objects: what a statement returns, as a `Submission` or an `Event`.

`to_submission` and `settled` run for every row a worker claims or settles, so
they build `Submission` positionally, each value read once, with no call per
field beyond the conversions. The conversions are the ones a driver needs:
`parse_time` and `parse_payload` here take what most drivers return, and a
database whose driver returns another form overrides them in its own module
(store/sqlite.py, store/mysql.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from denpyo.domain.moves import Settle
from denpyo.domain.sealed import SEALED
from denpyo.domain.status import ERROR_KINDS, STATUSES, Status
from denpyo.domain.submission import Event, Submission
from denpyo.store.base import NewSubmission, Row
from denpyo.store.sealing import CLEAR, Sealing


class Rows:
    """A SQL store's rows as denpyo's objects."""

    sealing: Sealing = CLEAR
    """How payloads are kept (store/sealing.py): the ledger sets its own."""

    def parse_time(self, value: Any) -> datetime | None:
        """Turn a driver's timestamp into an aware UTC datetime."""
        if value is None or isinstance(value, datetime):
            return value
        parsed = datetime.fromisoformat(str(value))
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

    def parse_payload(self, value: Any, channel: str, key: str) -> Any:
        """The payload column as read (JSON text, or what the driver parsed), opened
        where it is sealed: the one place a stored payload becomes the payload."""
        payload = json.loads(value) if isinstance(value, str | bytes) else value
        if type(payload) is dict and SEALED in payload:
            return self.sealing.open(payload, channel, key)
        return payload

    def to_submission(self, row: Row, known: Submission | None = None) -> Submission:
        """A row as read. With `known`, the same row as read before a move: what a
        move never changes (the payload, the key, when it was created…) is taken
        from there, not sent back nor parsed again."""
        if known is None:
            sub_id, channel, key, idempotency_key = (
                int(row["id"]),
                row["channel"],
                row["key"],
                row["idempotency_key"],
            )
            payload = self.parse_payload(row["payload"], channel, key)
            ordering_key = row["ordering_key"]
            created_at, supersedes = self.parse_time(row["created_at"]), row["supersedes"]
            traceparent, tracestate = row.get("traceparent"), row.get("tracestate")
        else:
            sub_id, channel, key, idempotency_key = (
                known.id,
                known.channel,
                known.key,
                known.idempotency_key,
            )
            payload, ordering_key = known.payload, known.ordering_key
            created_at, supersedes = known.created_at, known.supersedes
            traceparent, tracestate = known.traceparent, known.tracestate
        error_kind, parse_time = row["error_kind"], self.parse_time
        return Submission(
            sub_id,
            channel,
            key,
            idempotency_key,
            payload,
            STATUSES[row["status"]],
            int(row["attempts"]),
            parse_time(row["next_attempt_at"]),
            row["locked_by"],
            parse_time(row["locked_until"]),
            row["remote_id"],
            row["last_error"],
            ERROR_KINDS[error_kind] if error_kind else None,
            ordering_key,
            created_at,
            parse_time(row["updated_at"]),
            parse_time(row["synced_at"]),
            row["resolution"],
            supersedes,
            bool(row["in_doubt"]),
            None,
            None,
            None,
            None,
            traceparent,
            tracestate,
            parse_time(row.get("forgotten_at")),
        )

    def recorded(self, row: Row, new: NewSubmission, params: Mapping[str, Any]) -> Submission:
        """The row `insert_submission` wrote from `params` (`insert_params`): what the
        statement computed (its id and times) comes back in `row`, the rest was sent."""
        return Submission(
            int(row["id"]),
            new.channel,
            new.key,
            new.idempotency_key,
            self.parse_payload(new.payload_json, new.channel, new.key),
            Status.REQUESTING,
            0,
            self.parse_time(row["next_attempt_at"]),
            params["locked_by"],
            self.parse_time(row["locked_until"]),
            None,
            None,
            None,
            new.ordering_key,
            self.parse_time(row["created_at"]),
            self.parse_time(row["updated_at"]),
            None,
            None,
            new.supersedes,
            False,
            None,
            None,
            None,
            None,
            new.traceparent,
            new.tracestate,
        )

    def settled(self, row: Row, settle: Settle) -> Submission:
        """The row a settle moved: what the statement could not know from the settle
        and the row as held comes back in `row`; its call counted (attempts + 1)."""
        known = settle.row
        return Submission(
            known.id,
            known.channel,
            known.key,
            known.idempotency_key,
            known.payload,
            settle.to_status,
            known.attempts + 1,
            self.parse_time(row["next_attempt_at"]),
            None,
            None,
            row["remote_id"],
            settle.last_error,
            settle.error_kind,
            known.ordering_key,
            known.created_at,
            self.parse_time(row["updated_at"]),
            self.parse_time(row["synced_at"]),
            row["resolution"],
            known.supersedes,
            bool(row["in_doubt"]),
            None,
            None,
            None,
            None,
            known.traceparent,
            known.tracestate,
            known.forgotten_at,
        )

    def to_event(self, row: Row) -> Event:
        at = self.parse_time(row["at"])
        assert at is not None
        return Event(
            id=int(row["id"]),
            submission_id=int(row["submission_id"]),
            at=at,
            kind=row["kind"],
            from_status=Status(row["from_status"]) if row["from_status"] else None,
            to_status=Status(row["to_status"]) if row["to_status"] else None,
            attempt=int(row["attempt"]),
            actor=row["actor"],
            detail=row["detail"],
            duration_ms=row["duration_ms"],
        )
