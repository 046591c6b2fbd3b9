"""The archive's files: written, read back, laid out for DuckDB, on a folder and on
a real S3 API server (moto's), and every bad target refused before anything is
written.

The three queries below are the ones the documentation shows; they run here as
written, from the folder that holds `archive/`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer

import denpyo
from conftest import free_port
from denpyo import ArchiveError, ConfigurationError, Event, InvalidInput, Status, Submission
from denpyo.archive import Archive, Written
from doc_pages import named

QUERIES = named("how-to/keeping-for-years.md", "duckdb")
"""The DuckDB queries of the how-to page, as a reader copies them."""
MONTH_BY_STATUS = QUERIES["month"]
ONE_KEY_HISTORY = QUERIES["history"]
RESOLVED_BY_A_PERSON = QUERIES["resolved"]

JAN, FEB = datetime(2026, 1, 10, 9, tzinfo=UTC), datetime(2026, 2, 10, 9, tzinfo=UTC)
BILLING = "billing:eu.v2"  # a channel name that needs escaping in a folder name

INVOICE = "invoice-email"
SYNCED, FAILED, REJECTED = Status.SYNCED, Status.FAILED, Status.REJECTED
Story = tuple[int, str, str, Status, datetime, str | None, str | None, str | None, int | None]

# id, channel, key, status, created, error kind, resolution, person's action, supersedes
STORY: list[Story] = [
    (1, INVOICE, "order:1", SYNCED, JAN, None, None, None, None),
    (2, INVOICE, "order:2", SYNCED, JAN, None, None, None, None),
    (3, INVOICE, "order:3", REJECTED, JAN, "rejected", "resent as #7", "resend", None),
    (4, INVOICE, "order:4", FAILED, JAN, "transient", "abandoned: customer left", "abandon", None),
    (5, BILLING, "inv:1", SYNCED, JAN, None, None, None, None),
    (6, BILLING, "inv:2", REJECTED, JAN, "rejected", None, None, None),
    (7, INVOICE, "order:3:resend", SYNCED, FEB, None, None, None, 3),
    (8, INVOICE, "order:5", FAILED, FEB, "ambiguous", None, None, None),
    (9, BILLING, "inv:3", SYNCED, FEB, None, None, None, None),
    (10, BILLING, "inv:4", SYNCED, FEB, None, "marked synced: on the portal", "mark_synced", None),
    (11, "sms", "sms:1", SYNCED, FEB, None, None, None, None),
]


def story() -> tuple[list[Submission], list[Event]]:
    """Rows and events as the ledger would hold them: created, attempted, settled, and
    for some a person's resolution a day later."""
    rows: list[Submission] = []
    events: list[Event] = []

    def event(
        sub: int,
        at: datetime,
        kind: str,
        moves: tuple[Status | None, Status | None],
        attempt: int,
        actor: str,
        detail: str | None = None,
        ms: int | None = None,
    ) -> None:
        events.append(Event(len(events) + 100, sub, at, kind, *moves, attempt, actor, detail, ms))

    for n, channel, key, status, created, error, resolution, action, supersedes in STORY:
        at = created + timedelta(hours=n)
        settled = at + timedelta(seconds=2)
        remote = f"r-{n}" if status is Status.SYNCED and action is None else None
        rows.append(
            Submission(
                id=n,
                channel=channel,
                key=key,
                idempotency_key=str(uuid.UUID(int=n)),
                payload={"n": n, "to": f"customer-{n}@example.com", "note": "café ✓"},
                status=status,
                attempts=1,
                remote_id=remote,
                last_error=None if error is None else f"{error} failure",
                error_kind=None if error is None else denpyo.ErrorKind(error),
                ordering_key="customer-1" if n in (1, 2) else None,
                created_at=at,
                updated_at=settled + timedelta(days=1 if action else 0),
                synced_at=settled if status is Status.SYNCED else None,
                resolution=resolution,
                supersedes=supersedes,
            )
        )
        req = Status.REQUESTING
        event(n, at, "created", (None, req), 0, "app:web:1")
        event(n, at + timedelta(seconds=1), "attempt", (req, req), 1, "worker:h:1:a/1")
        settle_to = Status.FAILED if action == "mark_synced" else status
        event(n, settled, "settle", (req, settle_to), 1, "worker:h:1:a/1", remote or error, 840)
        if action:
            event(
                n,
                settled + timedelta(days=1),
                action,
                (settle_to, status),
                1,
                "operator:alice",
                resolution,
            )
    return rows, events


def layout(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


# A folder


def test_write_and_verify_to_a_folder_in_hive_layout(tmp_path: Path) -> None:
    rows, events = story()
    archive = Archive(str(tmp_path / "archive"))
    assert str(archive) == str(tmp_path / "archive")
    archive.check_writable()
    assert layout(tmp_path / "archive") == []  # the probe is gone

    written = archive.write(rows, events, batch="2026-03-01T000000-1")
    archive.verify(written)

    parts = [
        f"channel={c}/month={m}"
        for c, m in (
            ("billing%3Aeu.v2", "2026-01"),
            ("billing%3Aeu.v2", "2026-02"),
            ("invoice-email", "2026-01"),
            ("invoice-email", "2026-02"),
            ("sms", "2026-02"),
        )
    ]
    expected = sorted(
        f"{table}/{part}/2026-03-01T000000-1.parquet"
        for table in ("submissions", "events")
        for part in parts
    )
    assert layout(tmp_path / "archive") == expected
    assert sorted(f.path for f in written.files) == expected
    assert written.rows == len(rows) == 11 and written.events == len(events)
    by_path = {f.path: f for f in written.files}
    jan = by_path["submissions/channel=invoice-email/month=2026-01/2026-03-01T000000-1.parquet"]
    assert (jan.rows, jan.ids) == (4, (1, 2, 3, 4))
    assert written.size == sum((tmp_path / "archive" / p).stat().st_size for p in expected)


def test_columns_have_the_tables_types_and_values(tmp_path: Path) -> None:
    rows, events = story()
    archive = Archive(f"file://{tmp_path}/archive")
    archive.verify(archive.write(rows, events, batch="b1"))

    part = tmp_path / "archive/submissions/channel=invoice-email/month=2026-01/b1.parquet"
    table = pq.ParquetFile(part).read()
    utc = pa.timestamp("us", tz="UTC")
    assert [(f.name, f.type) for f in table.schema] == [
        ("id", pa.int64()),
        ("channel", pa.string()),
        ("key", pa.string()),
        ("idempotency_key", pa.string()),
        ("payload", pa.string()),
        ("status", pa.string()),
        ("attempts", pa.int32()),
        ("next_attempt_at", utc),
        ("locked_by", pa.string()),
        ("locked_until", utc),
        ("remote_id", pa.string()),
        ("last_error", pa.string()),
        ("error_kind", pa.string()),
        ("ordering_key", pa.string()),
        ("created_at", utc),
        ("updated_at", utc),
        ("synced_at", utc),
        ("resolution", pa.string()),
        ("supersedes", pa.int64()),
    ]
    got = table.to_pylist()
    assert [r["id"] for r in got] == [1, 2, 3, 4]
    third = got[2]
    assert json.loads(third["payload"]) == rows[2].payload
    assert third["payload"] == '{"n":3,"to":"customer-3@example.com","note":"café ✓"}'
    assert third["status"] == "rejected" and third["error_kind"] == "rejected"
    assert third["created_at"] == rows[2].created_at and third["created_at"].utcoffset() == (
        timedelta(0)
    )
    assert third["resolution"] == "resent as #7" and third["supersedes"] is None

    events_file = tmp_path / "archive/events/channel=invoice-email/month=2026-01/b1.parquet"
    ev = pq.ParquetFile(events_file).read()
    assert [(f.name, f.type) for f in ev.schema] == [
        ("id", pa.int64()),
        ("submission_id", pa.int64()),
        ("at", utc),
        ("kind", pa.string()),
        ("from_status", pa.string()),
        ("to_status", pa.string()),
        ("attempt", pa.int32()),
        ("actor", pa.string()),
        ("detail", pa.string()),
        ("duration_ms", pa.int32()),
    ]
    assert sorted(set(ev.column("submission_id").to_pylist())) == [1, 2, 3, 4]
    assert ev.column("from_status").to_pylist()[0] is None


def test_the_month_is_the_rows_month_in_utc_and_its_events_follow_it(tmp_path: Path) -> None:
    tokyo = timezone(timedelta(hours=9))
    row = Submission(
        1,
        "c",
        "k",
        "i",
        {},
        Status.SYNCED,
        created_at=datetime(2026, 2, 1, 8, 30, tzinfo=tokyo),  # 2026-01-31 23:30 UTC
        updated_at=datetime(2026, 2, 1, tzinfo=UTC),
    )
    naive = replace(row, id=2, key="k2", idempotency_key="i2", created_at=datetime(2026, 3, 1))
    later = Event(1, 1, datetime(2026, 4, 2, tzinfo=UTC), "settle", None, Status.SYNCED, 1, "w")
    written = Archive(tmp_path).write([row, naive], [later], batch="b")
    assert sorted(f.path for f in written.files) == [
        "events/channel=c/month=2026-01/b.parquet",
        "submissions/channel=c/month=2026-01/b.parquet",
        "submissions/channel=c/month=2026-03/b.parquet",
    ]


def test_a_rerun_of_the_same_batch_overwrites_and_another_batch_adds(tmp_path: Path) -> None:
    rows, events = story()
    archive = Archive(str(tmp_path / "archive"))
    first = archive.write(rows, events, batch="b1")
    files = layout(tmp_path / "archive")
    again = archive.write(rows, events, batch="b1")
    archive.verify(again)
    assert layout(tmp_path / "archive") == files
    assert [f.path for f in again.files] == [f.path for f in first.files]

    # Rerun with fewer rows: the batch's files hold the new rows, not both runs'.
    fewer = archive.write(rows[:2], [e for e in events if e.submission_id <= 2], batch="b1")
    archive.verify(fewer)
    count = "SELECT COUNT(*) FROM read_parquet('archive/submissions/**/*.parquet')"
    con = duckdb.connect(config={"file_search_path": str(tmp_path)})
    assert con.sql(count).fetchall() == [(11 - 4 + 2,)]  # b1's January invoices: 2, not 4

    archive.write(rows[10:], [], batch="b2")
    assert len(layout(tmp_path / "archive")) == len(files) + 1
    assert con.sql(count).fetchall() == [(10,)]


def test_verify_finds_a_file_that_differs_or_is_gone(tmp_path: Path) -> None:
    rows, events = story()
    archive = Archive(str(tmp_path))
    written = archive.write(rows, events, batch="b")
    target = written.files[0]
    path = tmp_path / target.path

    other = archive.write(rows[1:4], [], batch="other")  # same partition, other ids
    path.write_bytes((tmp_path / other.files[0].path).read_bytes())
    with pytest.raises(ArchiveError) as found:
        archive.verify(written)
    assert target.path in one_line(found) and "3 rows where 4 were written" in str(found.value)

    wrong = archive.write([replace(r, id=r.id + 100) for r in rows[:4]], [], batch="w")
    path.write_bytes((tmp_path / wrong.files[0].path).read_bytes())
    with pytest.raises(ArchiveError, match="does not hold the ids that were written"):
        archive.verify(written)

    path.write_bytes(b"PAR1 not really")
    with pytest.raises(ArchiveError, match="cannot read back"):
        archive.verify(written)
    path.unlink()
    with pytest.raises(ArchiveError) as gone:
        archive.verify(written)
    assert "cannot read back" in one_line(gone)


def test_input_that_cannot_be_filed_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    rows, events = story()
    archive = Archive(str(tmp_path))
    orphan = replace(events[0], submission_id=999)
    for bad_rows, bad_events, batch, message in [
        (rows, events, "", "batch id"),
        (rows, events, "../up", "batch id"),
        (rows, events, "_hidden", "batch id"),
        (rows, [*events, orphan], "b", "submission #999, which is not among the rows"),
        ([*rows, replace(rows[5], created_at=None)], [], "b", "has no created_at"),
        ([*rows, rows[0]], [], "b", "given twice"),
        ([replace(rows[0], payload={"x": float("nan")})], [], "b", "payload"),
        ([replace(rows[0], updated_at=None)], [], "b", "updated_at is empty"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            archive.write(bad_rows, bad_events, batch=batch)
        assert message in one_line(refused)
    assert layout(tmp_path) == []
    assert archive.write([], [], batch="empty") == Written("empty", ())


# DuckDB over the archive


@pytest.fixture
def duck(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """DuckDB run from the folder that holds the archive, as a person would."""
    rows, events = story()
    archive = Archive(str(tmp_path / "archive"))
    archive.verify(archive.write(rows[:6], [e for e in events if e.submission_id <= 6], batch="a"))
    archive.verify(archive.write(rows[6:], [e for e in events if e.submission_id > 6], batch="b"))
    return duckdb.connect(config={"file_search_path": str(tmp_path)})


def test_duckdb_counts_a_months_calls_by_status_per_channel(
    duck: duckdb.DuckDBPyConnection,
) -> None:
    expected: dict[tuple[str, str], int] = {}
    for _, channel, _, status, created, *_ in STORY:
        if created == JAN:
            expected[channel, status.value] = expected.get((channel, status.value), 0) + 1
    assert duck.sql(MONTH_BY_STATUS).fetchall() == [(*k, n) for k, n in sorted(expected.items())]
    assert expected == {
        (BILLING, "rejected"): 1,
        (BILLING, "synced"): 1,
        ("invoice-email", "failed"): 1,
        ("invoice-email", "rejected"): 1,
        ("invoice-email", "synced"): 2,
    }


def test_duckdb_tells_one_keys_history_in_order(duck: duckdb.DuckDBPyConnection) -> None:
    rows, events = story()
    row = next(r for r in rows if r.key == "order:3")
    expected = [
        (
            row.id,
            row.status.value,
            row.remote_id,
            e.at,
            e.kind,
            e.from_status and e.from_status.value,
            e.to_status and e.to_status.value,
            e.actor,
            e.detail,
        )
        for e in events
        if e.submission_id == row.id
    ]
    got = duck.sql(ONE_KEY_HISTORY).fetchall()
    assert got == expected
    assert [g[4] for g in got] == ["created", "attempt", "settle", "resend"]


def test_duckdb_lists_what_people_resolved(duck: duckdb.DuckDBPyConnection) -> None:
    rows, events = story()
    resent_as = {r.supersedes: r.key for r in rows if r.supersedes is not None}
    expected = sorted(
        (
            (r.channel, r.key, r.status.value, r.resolution, e.actor, e.at, resent_as.get(r.id))
            for r in rows
            if r.resolution is not None
            for e in events
            if e.submission_id == r.id and e.actor.startswith("operator:")
        ),
        key=lambda found: found[5],
    )
    assert duck.sql(RESOLVED_BY_A_PERSON).fetchall() == expected
    assert [found[1] for found in expected] == ["order:3", "order:4", "inv:4"]
    assert expected[0][6] == "order:3:resend"


# S3, on moto's server


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@dataclass
class Bucket:
    client: Any
    name: str

    def objects(self) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=self.name).get("Contents", [])
        return sorted(item["Key"] for item in listed)


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Bucket:
    """The standard AWS environment pointing at the server, and a new bucket there."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    bucket = Bucket(boto3.client("s3", endpoint_url=s3_server), f"archive-{uuid.uuid4().hex[:12]}")
    bucket.client.create_bucket(Bucket=bucket.name)
    return bucket


def test_write_and_verify_on_s3(s3: Bucket) -> None:
    rows, events = story()
    archive = Archive(f"s3://{s3.name}/denpyo/prod/")
    assert str(archive) == f"s3://{s3.name}/denpyo/prod"
    archive.check_writable()
    # The probe is gone; pyarrow keeps the emptied prefix as a folder marker.
    assert s3.objects() == ["denpyo/prod/"]

    written = archive.write(rows, events, batch="b1")
    archive.verify(written)
    files = sorted(f"denpyo/prod/{f.path}" for f in written.files)
    assert s3.objects() == ["denpyo/prod/", *files]
    escaped = "denpyo/prod/submissions/channel=billing%3Aeu.v2/month=2026-01/b1.parquet"
    assert escaped in s3.objects()
    # A rerun replaces the objects, and the bytes are Parquet that pyarrow reads alone.
    archive.verify(archive.write(rows, events, batch="b1"))
    assert s3.objects() == ["denpyo/prod/", *files]
    body = s3.client.get_object(Bucket=s3.name, Key=f"denpyo/prod/{written.files[0].path}")["Body"]
    assert pq.read_table(pa.BufferReader(body.read())).num_rows == written.files[0].rows


def test_the_endpoint_may_be_given_in_the_url(
    s3: Bucket, s3_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    host = s3_server.removeprefix("http://")
    archive = Archive(f"s3://{s3.name}/p?endpoint_override={host}&scheme=http")
    assert str(archive) == f"s3://{s3.name}/p?endpoint_override={host}&scheme=http"
    archive.check_writable()
    rows, events = story()
    archive.verify(archive.write(rows[:1], events[:3], batch="b"))
    assert s3.objects() == [
        "p/",
        "p/events/channel=invoice-email/month=2026-01/b.parquet",
        "p/submissions/channel=invoice-email/month=2026-01/b.parquet",
    ]


def test_a_missing_bucket_fails_the_check_and_the_write(s3: Bucket) -> None:
    missing = f"no-such-{uuid.uuid4().hex[:12]}"
    archive = Archive(f"s3://{missing}/prefix")
    with pytest.raises(ArchiveError) as refused:
        archive.check_writable()
    message = one_line(refused)
    assert message.startswith(f"cannot write to s3://{missing}/prefix: ")
    assert "testing-secret" not in message
    rows, events = story()
    with pytest.raises(ArchiveError) as failed:
        archive.write(rows, events, batch="b")
    assert one_line(failed).startswith(f"cannot write s3://{missing}/prefix/")
    assert missing not in [b["Name"] for b in s3.client.list_buckets()["Buckets"]]


# Targets refused


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("gs://bucket/prefix", "unknown scheme"),
        ("https://user:hunter2@example.com/archive", "unknown scheme"),
        ("s3://", "malformed"),
        ("s3:///prefix", "malformed"),
        ("s3://Not_A_Bucket/prefix", "malformed"),
        ("s3://bucket/a b", "malformed"),
        ("s3://bucket/prefix#x", "malformed"),
        ("s3://bucket/prefix?endpoint_override", "malformed"),
        ("s3://bucket/prefix?colour=blue", "unknown parameter 'colour'"),
        ("s3://bucket/prefix?secret_key=hunter2", "unknown parameter 'secret_key'"),
        ("s3://AKIDEXAMPLE:hunter2@bucket/prefix", "carries credentials"),
        ("s3://AKIDEXAMPLE:hun/ter2@bucket/prefix", "malformed"),
        ("file://otherhost/srv/archive", "malformed"),
        ("http://[::1/archive", "malformed"),
        ("", "empty"),
        ("archive\nrm -rf", "control character"),
    ],
)
def test_an_unusable_url_is_invalid_input_in_one_line_without_secrets(
    url: str, says: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as refused:
        Archive(url)
    message = one_line(refused)
    assert says in message
    assert "hunter2" not in message and "ter2" not in message


def test_a_folder_that_cannot_be_made_fails_the_check_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "afile").write_text("a regular file")
    for target in (tmp_path / "afile" / "sub", tmp_path / "afile"):
        archive = Archive(str(target))
        with pytest.raises(ArchiveError) as refused:
            archive.check_writable()
        assert one_line(refused).startswith(f"cannot write to {target}: ")
        rows, events = story()
        with pytest.raises(ArchiveError) as failed:
            archive.write(rows, events, batch="b")
        assert one_line(failed).startswith(f"cannot write {target}/submissions/")
    assert layout(tmp_path) == ["afile"]


def test_without_the_extra_it_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigurationError) as refused:
        Archive(str(tmp_path))
    assert "pip install 'denpyo[archive]'" in one_line(refused)


def test_a_ledger_archives_to_s3_and_resends_from_there(s3: Bucket, tmp_path: Path) -> None:
    """`denpyo archive --to s3://…` end to end: the rows go to the S3 server, leave the
    table, their keys stay, and a resend reads the payload back from S3."""
    import denpyo
    from denpyo.engine import operator as op

    with denpyo.Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.migrate()
        ledger.channel("email")(lambda sub: f"msg-{sub.key}")
        ledger.channel("push")(lambda sub: (_ for _ in ()).throw(denpyo.Rejected("gone")))
        ledger.submit("email", "order:1", {"to": "a@example.com"})
        with pytest.raises(denpyo.SubmissionRejected):
            ledger.submit("push", "device:1", {"token": "t-1"})
        op.resolve_abandon(ledger, "push:device:1", note="device gone")

        done = ledger.archive(f"s3://{s3.name}/ledger", older_than=0)
        month = f"{ledger.store.now():%Y-%m}"

        assert (done.rows, done.target) == (2, f"s3://{s3.name}/ledger")
        assert [key for key in s3.objects() if key.endswith(".parquet")] == sorted(
            f"ledger/{table}/channel={channel}/month={month}/rows-1-2.parquet"
            for table in ("events", "submissions")
            for channel in ("email", "push")
        )
        kept = ledger.get("email", "order:1")
        assert kept is not None and kept.archived_to == f"s3://{s3.name}/ledger"
        resent = op.resolve_resend(ledger, "push:device:1", note="device back")
        assert resent.created is not None and resent.created.payload == {"token": "t-1"}


def test_the_page_s_python_runs_a_query_file_over_the_archive(
    duck: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """The page's query.py, with its month query saved as month.sql, in the folder
    that holds the archive: what a reader without DuckDB's command runs."""
    (tmp_path / "query.py").write_text(QUERIES["run"])
    (tmp_path / "month.sql").write_text(MONTH_BY_STATUS)
    done = subprocess.run(
        [sys.executable, "query.py", "month.sql"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for channel, status, calls in duck.sql(MONTH_BY_STATUS).fetchall():
        assert re.search(rf"│ {re.escape(channel)} +│ {status} +│ +{calls} │", done.stdout), (
            done.stdout
        )
