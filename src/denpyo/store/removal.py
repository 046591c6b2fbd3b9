"""Rows leaving the table, and what they leave behind: their keys and their counts.

A row a retention lets go (domain/retention.py) is removed, pruned or archived
first, by `remove`: its key and outcome go to denpyo_keys, its place in the counts
to denpyo_removed_counts, and the row and its history are deleted. From then on
the reads by key or id find the remembered outcome (`Submission.removed_at` set),
and an insert of the same channel and key writes nothing: a key is sent at most
once, whether its row is live or not.

Each database removes in its own way (`remove_in`): SQLite in one transaction (one
writer: no insert passes between the row leaving and its key arriving);
PostgreSQL and MariaDB commit the keys first, wait until no transaction may still
read the table as it was before them, then delete. PostgreSQL's partitioned layout
has every key from its insert on: it deletes at once, and drops whole partitions
(`PostgresStore.drop_partition`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import date
from typing import Any, ClassVar

from denpyo.domain.retention import Retention
from denpyo.domain.status import ERROR_KINDS, STATUSES
from denpyo.domain.submission import Event, Submission
from denpyo.store.base import Row, Tx
from denpyo.store.conflicts import retried
from denpyo.store.connections import ConnectionModes
from denpyo.store.params import Params, seconds
from denpyo.store.rows import Rows


class Removal(ConnectionModes, Rows, Params):
    """`removable`, `remove`, `expire_keys` and `report_counts`, and the reads of a
    removed row's memory that the store's reads fall back on."""

    QUERIES: ClassVar[frozenset[str]] = frozenset(
        {
            "list_submissions_removable",
            "count_submissions_removable",
            "remember_keys",
            "expire_keys",
            "get_key",
            "get_key_by_id",
            "find_key_superseding",
            "get_keys_by_idempotency_keys",
            "mark_key_resent",
            "count_report",
            "list_events_many",
        }
    )

    def events_of(self, ids: Sequence[int]) -> list[Event]:
        if not ids:  # MariaDB's driver writes an empty list as `IN ()`, an error
            return []
        with self.reading() as tx:
            rows = tx.fetch_all("list_events_many", {"ids": self.id_list(ids)})
        return [self.to_event(row) for row in rows]

    def removable(self, retention: Retention, limit: int = 1000) -> list[Submission]:
        with self.reading() as tx:
            rows = tx.fetch_all(
                "list_submissions_removable", {**retention_params(retention), "limit": limit}
            )
        return [self.to_submission(row) for row in rows]

    def count_removable(self, retention: Retention) -> list[tuple[str, str, int]]:
        with self.reading() as tx:
            rows = tx.fetch_all("count_submissions_removable", retention_params(retention))
        return [(str(r["channel"]), str(r["status"]), int(r["n"])) for r in rows]

    def remove(
        self, ids: Sequence[int], retention: Retention, *, archived_to: str | None = None
    ) -> int:
        if not ids:
            return 0
        params = {**retention_params(retention), "ids": self.id_list(ids)}
        params["archived_to"] = archived_to
        return self.remove_in(params)

    @abstractmethod
    def remove_in(self, params: dict[str, Any]) -> int:
        """Remember the keys of the rows `params["ids"]` that retention still lets go,
        add them to the removed counts, delete their history and them; how many went."""

    @retried
    def expire_keys(self, older_than: float, limit: int = 1000) -> int:
        with self.transaction() as tx:
            rows = tx.fetch_all("expire_keys", {"older_than": seconds(older_than), "limit": limit})
        return len(rows)

    def report_counts(
        self, since: date, until: date, channel: str | None = None
    ) -> list[tuple[date, str, str, str, int]]:
        params = {"since": self.day_param(since), "until": self.day_param(until)}
        params["channel"] = channel
        with self.reading() as tx:
            rows = tx.fetch_all("count_report", params)
        return [
            (
                self.parse_day(row["day"]),
                str(row["channel"]),
                str(row["status"]),
                str(row["error_kind"]),
                int(row["n"]),
            )
            for row in rows
        ]

    def day_param(self, day: date) -> Any:
        """A day as `report_counts` compares it (SQLite: its text)."""
        return day

    def parse_day(self, value: Any) -> date:
        return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])

    # -- a removed row's memory ------------------------------------------------------------

    def kept(self, tx: Tx, channel: str, key: str) -> Submission | None:
        row = tx.fetch_one("get_key", {"channel": channel, "key": key})
        return self.to_kept(row) if row else None

    def kept_by_id(self, tx: Tx, submission_id: int) -> Submission | None:
        row = tx.fetch_one("get_key_by_id", {"id": submission_id})
        return self.to_kept(row) if row else None

    def kept_superseding(self, tx: Tx, submission_id: int) -> Submission | None:
        """The resend that replaced a row, when either of them is removed."""
        old = self.kept_by_id(tx, submission_id)
        if old is not None and old.superseded_by is not None:
            return self.kept_by_id(tx, old.superseded_by) or self._live(tx, old.superseded_by)
        row = tx.fetch_one("find_key_superseding", {"id": submission_id})
        return self.to_kept(row) if row else None

    def kept_by_idempotency_keys(self, tx: Tx, keys: Sequence[str]) -> list[Submission]:
        rows = tx.fetch_all("get_keys_by_idempotency_keys", {"keys": self.text_list(keys)})
        return [self.to_kept(row) for row in rows]

    def _live(self, tx: Tx, submission_id: int) -> Submission | None:
        row = tx.fetch_one("get_submission", {"id": submission_id})
        return self.to_submission(row) if row else None

    def to_kept(self, row: Row) -> Submission:
        """A removed row as denpyo_keys remembers it."""
        parse_time = self.parse_time
        kind = row["error_kind"]
        return Submission(
            int(row["submission_id"]),
            row["channel"],
            row["key"],
            row["idempotency_key"],
            None,
            STATUSES[row["status"]],
            int(row["attempts"]),
            None,
            None,
            None,
            row["remote_id"],
            None,
            ERROR_KINDS[kind] if kind else None,
            None,
            parse_time(row["created_at"]),
            parse_time(row["removed_at"]),
            parse_time(row["synced_at"]),
            row["resolution"],
            row["supersedes"],
            False,
            None,
            parse_time(row["removed_at"]),
            row["archived_to"],
            row["superseded_by"],
            None,
            None,
            parse_time(row.get("forgotten_at")),
        )


def retention_params(retention: Retention) -> dict[str, Any]:
    """The ages of `{{removable}}` and the youngest of them, in seconds."""
    return {
        "synced": seconds(retention.synced),
        "rejected": seconds(retention.rejected),
        "abandoned": seconds(retention.abandoned),
        "youngest": seconds(retention.youngest),
    }
