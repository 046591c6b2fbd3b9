"""Pointed at the wrong database, denpyo says so and writes nothing: a caller's
connection to another database, a SQLite file that does not exist, a path it
cannot open. On SQLite, PostgreSQL and MariaDB where the item touches them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import denpyo
from conftest import driver_connection, free_port
from database_records import database_record
from denpyo.errors import ConfigurationError, SchemaError, StoreUnavailable
from denpyo.store.dialects import DIALECTS

PAYLOAD = {"to": "a@example.com"}


def _rows(backend: str, url: str) -> int:
    conn = driver_connection(backend, url)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT COUNT(*) FROM denpyo_submissions")
        return int(cursor.fetchone()[0])
    finally:
        conn.close()


def test_enqueue_on_a_connection_to_another_database_is_refused(
    backend: str, db_url: str, empty_url: str
) -> None:
    """The row would land in the other database, where no worker ever looks."""
    with denpyo.Ledger(empty_url) as other:
        other.migrate()
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("email")(lambda sub: "sent")
        conn = driver_connection(backend, empty_url)
        try:
            with pytest.raises(ConfigurationError, match="nothing was written"):
                ledger.enqueue("email", "k1", PAYLOAD, conn=conn)
            with pytest.raises(ConfigurationError, match="nothing was written"):
                ledger.enqueue_many("email", [("k2", PAYLOAD)], conn=conn)
            conn.commit()
        finally:
            conn.close()
    assert _rows(backend, empty_url) == 0 and _rows(backend, db_url) == 0


def test_enqueue_on_the_same_database_spelled_otherwise_is_accepted(
    backend: str, db_url: str
) -> None:
    """`localhost` and `127.0.0.1`, or a relative and an absolute path: one database."""
    other_spelling = database_record(backend).other_spelling(db_url)
    if not DIALECTS[backend].embedded:  # a file's path may be absolute already
        assert other_spelling != db_url
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("email")(lambda sub: "sent")
        conn = driver_connection(backend, other_spelling)
        try:
            ledger.enqueue("email", "k1", PAYLOAD, conn=conn)
            conn.commit()
        finally:
            conn.close()
    assert _rows(backend, db_url) == 1


def test_reading_a_missing_sqlite_file_does_not_create_it(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    with denpyo.Ledger(f"sqlite:///{typo}") as ledger:
        with pytest.raises(SchemaError, match=f"no SQLite database at {typo}"):
            ledger.get_by_id(1)
        with pytest.raises(SchemaError, match="`denpyo migrate` creates it"):
            ledger.get("email", "k1")
    assert not typo.exists()
    with denpyo.Ledger(f"sqlite:///{typo}") as ledger:
        ledger.migrate()
    assert typo.exists()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "denpyo.cli", *args], cwd=cwd, capture_output=True, text=True
    )


@pytest.mark.parametrize("command", [["status"], ["list"], ["show", "1"]])
def test_a_read_command_on_a_missing_file_says_which_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    done = _cli("--db", "sqlite:///typo.db", *command, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "typo.db") in lines[0], done.stderr
    assert not (tmp_path / "typo.db").exists()


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a file system mounted read-only, holding a migrated database
    (file permissions would not stop root, which the test machine may be)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)]).returncode:
        pytest.skip("cannot mount a file system here")
    try:
        with denpyo.Ledger(f"sqlite:///{mount}/app.db") as ledger:
            ledger.migrate()
        for suffix in ("-wal", "-shm"):
            (mount / f"app.db{suffix}").unlink(missing_ok=True)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)])


def test_a_database_it_cannot_write_is_one_line_and_exit_2(read_only_dir: Path) -> None:
    """Setting up the journal (WAL) is the first write SQLite tries, before any of
    denpyo's statements: its failure must read as any other error."""
    done = _cli("--db", f"sqlite:///{read_only_dir}/app.db", "status", cwd=read_only_dir.parent)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot open SQLite database" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_names_the_database_it_read(tmp_path: Path, postgres_url: str) -> None:
    """Which database the counts come from, in the header, never with a password."""
    with denpyo.Ledger(f"sqlite:///{tmp_path}/app.db") as ledger:
        ledger.migrate()
    done = _cli("--db", "sqlite:///app.db", "status", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"database sqlite:///{tmp_path}/app.db"

    with_password = postgres_url.replace("postgres@", "postgres:hunter2@", 1)
    done = _cli("--db", with_password, "status", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["database"] == with_password.replace("hunter2", "***")
    assert "hunter2" not in done.stdout


def test_a_postgresql_database_that_does_not_exist_is_one_line(
    tmp_path: Path, postgres_url: str
) -> None:
    """The server's own reason, at once, not the pool's retries for its whole timeout."""
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    done = _cli("--db", missing, "status", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert 'database "no_such_database" does not exist' in done.stderr


@pytest.fixture
def alt_schema(postgres_url: str) -> str:
    """A second copy of the denpyo tables, in schema `alt` of the same database."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA alt")
    with denpyo.Ledger(f"{postgres_url}?options=-csearch_path%3Dalt") as in_alt:
        in_alt.migrate()
    return "alt"


def _count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        return int(row[0]) if row else -1


def test_a_connection_whose_search_path_finds_another_schema_is_refused(
    postgres_url: str, alt_schema: str
) -> None:
    """The same database, but its unqualified tables are another copy: the row
    would land where neither `get` nor any worker looks."""
    with denpyo.Ledger(postgres_url) as ledger:
        ledger.channel("email")(lambda sub: "sent")
        with psycopg.connect(postgres_url, options=f"-c search_path={alt_schema}") as conn:
            with pytest.raises(ConfigurationError, match=r"alt\.denpyo_submissions") as caught:
                ledger.enqueue("email", "k1", PAYLOAD, conn=conn)
            assert "public.denpyo_submissions" in str(caught.value)
            assert "nothing was written" in str(caught.value)
            with pytest.raises(ConfigurationError, match="nothing was written"):
                ledger.enqueue_many("email", [("k2", PAYLOAD)], conn=conn)
        with psycopg.connect(postgres_url, options="-c search_path=public") as conn:
            ledger.enqueue("email", "k3", PAYLOAD, conn=conn)  # the ledger's own tables
        assert ledger.get("email", "k3") is not None

        async def on_asyncio() -> None:
            aconn = await psycopg.AsyncConnection.connect(
                postgres_url, options=f"-c search_path={alt_schema}"
            )
            try:
                with pytest.raises(ConfigurationError, match=r"alt\.denpyo_submissions"):
                    await ledger.aenqueue("email", "k4", PAYLOAD, conn=aconn)
                await aconn.commit()
            finally:
                await aconn.close()

        asyncio.run(on_asyncio())
    assert _count(postgres_url, "alt.denpyo_submissions") == 0
    assert _count(postgres_url, "public.denpyo_submissions") == 1


def _closed_port_url(backend: str) -> str:
    """A server URL on a local port nothing listens on: an outage, as a client sees one."""
    scheme = {"postgresql": "postgresql://postgres", "mysql": "mysql://root"}[backend]
    return f"{scheme}:SecretPw@127.0.0.1:{free_port()}/app"


@pytest.mark.parametrize("server", ["postgresql", "mysql"])
def test_a_server_out_of_reach_is_unavailable_not_a_usage_error(
    tmp_path: Path, server: str
) -> None:
    """An outage is nobody's typo: StoreUnavailable, exit 3, one line, no password."""
    url = _closed_port_url(server)
    with denpyo.Ledger(url) as ledger, pytest.raises(StoreUnavailable, match="cannot connect to"):
        ledger.get_by_id(1)
    for command in (["status"], ["status", "--check"], ["list"], ["show", "1"]):
        done = _cli("--db", url, *command, cwd=tmp_path)
        assert done.returncode == 3, (command, done.stderr)
        assert done.stderr.startswith("error: cannot connect to"), done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert "SecretPw" not in done.stderr and done.stdout == ""


def test_a_server_that_answers_and_refuses_stays_exit_2(tmp_path: Path, postgres_url: str) -> None:
    """A wrong password or database is the user's to fix: exit 2, not 3."""
    wrong_user = postgres_url.replace("postgres@", "denpyo_no_such_role:x@", 1)
    done = _cli("--db", wrong_user, "status", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "denpyo_no_such_role" in done.stderr
