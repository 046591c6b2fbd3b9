"""PostgreSQL's partitioned layout (`migrate --partitions`): rows partitioned by
creation time and kept by pg_partman, keys unique through denpyo_keys, and
retention that drops a whole day after remembering its keys and counts.

The rest of the store's and the ledger's tests run on this layout too:
`DENPYO_TEST_POSTGRES_PARTITIONS=daily` (make test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import denpyo
from denpyo.cli import main
from denpyo.domain.filters import Filter
from denpyo.domain.retention import Retention
from denpyo.errors import ConfigurationError, StoreError
from denpyo.store.base import NewSubmission
from doc_pages import commands, named
from partitioned import DAY_NS, age


@pytest.fixture
def url(postgres_empty_url: str) -> str:
    with denpyo.Ledger(postgres_empty_url) as ledger:
        assert ledger.migrate(partitions="daily") == list(
            range(1, ledger.store.latest_version() + 1)
        )
    return postgres_empty_url


@pytest.fixture
def ledger(url: str) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(url) as ledger:
        calls: list[str] = []
        ledger.calls = calls  # type: ignore[attr-defined]

        @ledger.channel("email", idempotent=True)
        def send(sub: denpyo.Submission) -> str:
            if sub.payload.get("reject"):
                raise denpyo.Rejected("no such address")
            calls.append(sub.key)
            return f"msg-{len(calls)}"

        yield ledger


def one(url: str, query: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
        return None if row is None else row[0]


def test_the_layout_is_partitioned_by_day_and_kept_by_pg_partman(url: str) -> None:
    assert one(url, "SELECT relkind FROM pg_class WHERE relname = 'denpyo_submissions'") == "p"
    assert one(url, "SELECT relkind FROM pg_class WHERE relname = 'denpyo_events'") == "p"
    assert one(url, "SELECT COUNT(*) FROM partman.part_config") == 2
    with denpyo.Ledger(url) as ledger:
        parts = ledger.store.partitions()
        assert len(parts) >= 8  # four days back, today, four ahead
        assert all((p.to_at - p.from_at).days == 1 for p in parts)
        ledger.store.maintain_partitions()
        assert ledger.migrate() == [] and ledger.migrate(partitions="daily") == []


def test_a_key_is_sent_once_whatever_partition_its_row_is_in(
    ledger: denpyo.Ledger, url: str
) -> None:
    first = ledger.submit("email", "order:42", {"to": "a"})
    age(url, "order:", 3)
    again = ledger.submit("email", "order:42", {"to": "a"})
    assert ledger.calls == ["order:42"]  # type: ignore[attr-defined]
    assert (again.status, again.remote_id) == (first.status, first.remote_id)
    assert again.id == first.id - 3 * DAY_NS
    assert ledger.enqueue_many("email", [("order:42", {"to": "a"}), ("order:43", {})]) == 1
    assert ledger.get("email", "order:42").id == again.id


def test_the_idempotency_key_is_unique_across_partitions(ledger: denpyo.Ledger, url: str) -> None:
    sub = ledger.enqueue("email", "k1", {})
    age(url, "k1", 2)
    twin = NewSubmission("email", "k2", sub.idempotency_key, "{}", None)
    with pytest.raises(StoreError, match="denpyo_keys_idempotency_key"):
        ledger.store.record(twin, actor="t")


def test_ids_are_creation_times_and_the_list_pages_through_them(ledger: denpyo.Ledger) -> None:
    subs = [ledger.enqueue("email", f"p{i}", {}) for i in range(7)]
    assert [s.id for s in subs] == sorted(s.id for s in subs)
    created = subs[0].created_at.timestamp()
    assert abs(subs[0].id / 1e9 - created) < 5
    seen: list[int] = []
    before = None
    while True:
        page = ledger.store.list_page(Filter(limit=2), before=before, window=3)
        seen += [s.id for s in page.rows]
        if page.older is None:
            break
        before = int(page.older)
    assert seen == [s.id for s in reversed(subs)]


def test_retention_drops_an_old_day_whole_after_keeping_its_keys_and_counts(
    ledger: denpyo.Ledger, url: str, tmp_path: Path
) -> None:
    for i in range(20):
        ledger.submit("email", f"old:{i}", {"i": i})
    ledger.submit("email", "new:1", {})
    age(url, "old:", 3)
    report = ledger.report(by="day")
    partitions = len(ledger.store.partitions())

    archived = ledger.archive(tmp_path / "archive", older_than=86_400)

    assert (archived.rows, archived.events) == (20, 60)
    assert len(ledger.store.partitions()) == partitions - 1  # the day went, not its rows
    assert one(url, "SELECT COUNT(*) FROM denpyo_submissions WHERE key LIKE 'old:%'") == 0
    before = "denpyo_id_at(now() - interval '2 days')"
    assert one(url, f"SELECT COUNT(*) FROM denpyo_events WHERE submission_id < {before}") == 0
    assert ledger.report(by="day") == report
    assert {(s, n) for _, s, n in ledger.store.count_by_status()} == {("synced", 1)}
    calls = len(ledger.calls)  # type: ignore[attr-defined]
    again = ledger.submit("email", "old:7", {"i": 7})
    assert len(ledger.calls) == calls  # type: ignore[attr-defined]
    assert again.status is denpyo.Status.SYNCED and again.archived_to is not None
    assert again.remote_id == "msg-8"


def test_a_day_with_a_row_retention_keeps_waits_and_its_other_rows_go_one_by_one(
    ledger: denpyo.Ledger, url: str
) -> None:
    for i in range(5):
        ledger.submit("email", f"old:{i}", {})
    with pytest.raises(denpyo.SubmissionRejected):
        ledger.submit("email", "old:rejected", {"reject": True})
    ledger.enqueue("email", "old:open", {})
    age(url, "old:", 3)
    partitions = ledger.store.partitions()

    assert ledger.prune(older_than=86_400) == 5

    assert len(ledger.store.partitions()) == len(partitions)  # the day waits
    left = ledger.store.list_submissions(Filter(key_prefix="old:"))
    assert sorted(s.key for s in left) == ["old:open", "old:rejected"]
    assert ledger.submit("email", "old:3", {}).removed_at is not None


def test_a_partition_being_dropped_refuses_every_change_to_its_rows(
    ledger: denpyo.Ledger, url: str
) -> None:
    sub = ledger.submit("email", "old:1", {})
    age(url, "old:", 3)
    [part] = [p for p in ledger.store.partitions() if p.from_id <= sub.id - 3 * DAY_NS < p.to_id]
    seen: list[str] = []

    def meddle() -> None:  # a write to the row while its day is being dropped
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("UPDATE denpyo_submissions SET remote_id = 'x' WHERE key = 'old:1'")
        except psycopg.Error as exc:
            seen.append(str(exc))

    dropped = ledger.store.drop_partition(part, Retention.of(older_than=86_400), before_drop=meddle)
    assert dropped == 1
    assert seen and "is being dropped by retention" in seen[0]


def test_partitions_are_postgresql_s_and_only_for_a_database_without_tables(
    postgres_url: str, tmp_path: Path
) -> None:
    sqlite = denpyo.Ledger(f"sqlite:///{tmp_path}/a.db")
    with sqlite, pytest.raises(ConfigurationError, match="partitions are PostgreSQL's"):
        sqlite.migrate(partitions="daily")
    with denpyo.Ledger(postgres_url) as ledger:
        if ledger.store.partitions():
            pytest.skip("the suite runs on the partitioned layout")
        with pytest.raises(ConfigurationError, match="plain layout"):
            ledger.migrate(partitions="daily")
        with pytest.raises(ConfigurationError, match="choose one of daily, monthly"):
            ledger.migrate(partitions="weekly")
    result = CliRunner().invoke(main, ["--db", postgres_url, "migrate", "--partitions", "hourly"])
    assert result.exit_code == 2 and "hourly" in result.output


def test_the_cli_makes_the_monthly_layout(postgres_empty_url: str) -> None:
    result = CliRunner().invoke(
        main, ["--db", postgres_empty_url, "migrate", "--partitions", "monthly", "--json"]
    )
    assert result.exit_code == 0, result.output
    with denpyo.Ledger(postgres_empty_url) as ledger:
        assert json.loads(result.output)["version"] == ledger.store.latest_version()
        parts = ledger.store.partitions()
        assert all(28 <= (p.to_at - p.from_at).days <= 31 for p in parts)


def test_a_plain_ledger_moves_to_the_partitioned_layout_as_the_page_says(
    postgres_url: str, postgres_empty_url: str, tmp_path: Path
) -> None:
    """The commands of "Moving a ledger to the partitioned layout", run as written."""
    with denpyo.Ledger(postgres_url) as old:
        if old.store.partitions():
            pytest.skip("the suite runs on the partitioned layout")
        calls: list[str] = []

        @old.channel("email", idempotent=True)
        def send(sub: denpyo.Submission) -> str:
            calls.append(sub.key)
            return f"msg-{len(calls)}"

        for i in range(5):
            old.submit("email", f"order:{i}", {"i": i})
        old.prune(older_than=0)  # some keys were pruned before, some rows are live
        for i in range(5, 8):
            old.submit("email", f"order:{i}", {"i": i})
        report = old.report(by="day")
    script = named("how-to/keeping-for-years.md", "upgrade")["partitions"]
    env = {**os.environ, "OLD_URL": postgres_url, "NEW_URL": postgres_empty_url}
    env["ARCHIVE"] = str(tmp_path / "archive")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    with denpyo.Ledger(postgres_empty_url) as new:
        assert new.store.partitions()
        again: list[str] = []

        @new.channel("email", idempotent=True)
        def resend(sub: denpyo.Submission) -> str:
            again.append(sub.key)
            return "msg-new"

        for i in range(8):
            found = new.submit("email", f"order:{i}", {"i": i})
            assert (found.status, found.remote_id) == (denpyo.Status.SYNCED, f"msg-{i + 1}")
        assert again == []
        assert new.report(by="day") == report
        assert new.submit("email", "order:8", {}).remote_id == "msg-new"


def test_the_page_s_command_makes_the_partitioned_layout(postgres_empty_url: str) -> None:
    """`denpyo --db "$DATABASE_URL" migrate --partitions daily`, as printed."""
    [command] = commands(named("how-to/keeping-for-years.md", "partitions")["command"])
    env = {**os.environ, "DATABASE_URL": postgres_empty_url}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert one(postgres_empty_url, "SELECT COUNT(*) FROM partman.part_config") == 2


def test_the_page_s_python_makes_the_partitioned_layout(postgres_empty_url: str) -> None:
    code = named("how-to/keeping-for-years.md", "partitions")["python"]
    with denpyo.Ledger(postgres_empty_url) as ledger:
        exec(code, {"ledger": ledger})
        assert ledger.store.partitions()
    assert one(postgres_empty_url, "SELECT COUNT(*) FROM partman.part_config") == 2
