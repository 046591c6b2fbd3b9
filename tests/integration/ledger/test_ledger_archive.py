"""`archive`: rows written to Parquet, read back, then removed; what DuckDB reads
there is what the table held, and an archived key is never sent again. On every
backend."""

from __future__ import annotations

import contextlib
from pathlib import Path

import duckdb
import pytest
from ledger_helpers import Script, fail, ok

import denpyo
from denpyo import ArchiveError, InvalidInput, Status
from denpyo.engine import operator as op

COUNTS = """
SELECT channel, status, COUNT(*) AS n
FROM read_parquet('{dir}/submissions/**/*.parquet', hive_partitioning = true)
GROUP BY channel, status ORDER BY channel, status
"""


def _story(ledger: denpyo.Ledger) -> Script:
    script = Script(ok)
    ledger.channel("email", idempotent=True)(script)
    ledger.channel("push")(Script(fail(denpyo.Rejected("unknown device"))))
    for n in range(4):
        ledger.submit("email", f"order:{n}", {"n": n})
    for key in ("p1", "p2"):
        with contextlib.suppress(denpyo.SubmissionRejected):
            ledger.submit("push", key, {"device": key})
    op.resolve_abandon(ledger, "push:p1", note="device gone")
    return script


def test_an_archive_holds_what_the_table_held_and_keys_stay(
    ledger: denpyo.Ledger, tmp_path: Path
) -> None:
    script = _story(ledger)
    report_before = ledger.report(by="day")
    target = tmp_path / "archive"

    done = ledger.archive(str(target), older_than=0, batch_size=3)

    assert (done.rows, done.events, done.batches) == (5, 16, 2)  # 4 synced + p1; p2 waits
    assert done.target == str(target) and done.files >= 4 and done.bytes > 0
    counted = duckdb.sql(COUNTS.format(dir=target)).fetchall()
    assert counted == [("email", "synced", 4), ("push", "rejected", 1)]
    history = duckdb.sql(
        f"SELECT kind FROM read_parquet('{target}/events/**/*.parquet', hive_partitioning = true)"
        " WHERE submission_id = (SELECT id FROM read_parquet("
        f"'{target}/submissions/**/*.parquet', hive_partitioning = true) WHERE key = 'order:2')"
        " ORDER BY id"
    ).fetchall()
    assert [kind for (kind,) in history] == ["created", "attempt", "settle"]

    assert ledger.report(by="day") == report_before
    again = ledger.submit("email", "order:2", {"n": 2})
    assert len(script.calls) == 4, "an archived key was sent again"
    assert again.status is Status.SYNCED and again.archived_to == str(target)
    waiting = ledger.get("push", "p2")
    assert waiting is not None and waiting.removed_at is None, "unresolved rows stay"


def test_a_person_resends_an_archived_row_with_its_archived_payload(
    ledger: denpyo.Ledger, tmp_path: Path
) -> None:
    _story(ledger)
    ledger.archive(str(tmp_path / "archive"), rejected=0)
    done = op.resolve_resend(ledger, "push:p1", note="the device is back")
    assert done.created is not None and done.created.payload == {"device": "p1"}
    assert done.submission.superseded_by == done.created.id


def test_an_archive_that_cannot_be_written_removes_nothing(
    ledger: denpyo.Ledger, tmp_path: Path
) -> None:
    _story(ledger)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ArchiveError, match="cannot write"):
        ledger.archive(str(blocker / "archive"), older_than=0)
    with pytest.raises(InvalidInput):
        ledger.archive(str(tmp_path / "archive"), older_than=-1)
    with pytest.raises(InvalidInput):
        ledger.archive(str(tmp_path / "archive"))
    with pytest.raises(InvalidInput):
        ledger.archive("ftp://example.invalid/x", older_than=0)
    sub = ledger.get("email", "order:0")
    assert sub is not None and sub.removed_at is None
    assert not (tmp_path / "archive").exists()
