"""The Alembic page (docs/how-to/alembic.md), run as written: a real `alembic init`
project in a temporary folder, on a fresh PostgreSQL database; the page's command
prints the schema and its revision (both read from the page) runs it. Then
denpyo's tables are there at the latest schema version, `denpyo migrate` has
nothing to do, and the downgrade leaves no denpyo table or function behind. The
page's upgrade rule takes a database from the previous release's schema to this
one's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import denpyo
from denpyo import Status
from denpyo.store import queries
from doc_pages import named

PAGE = "how-to/alembic.md"
SCHEMA = "alembic/versions/denpyo_schema.sql"
LATEST = len(queries.load_migrations("postgresql"))


def alembic(project: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture
def url(postgres_empty_url: str) -> str:
    return postgres_empty_url


@pytest.fixture
def project(tmp_path: Path, url: str) -> Path:
    """`alembic init alembic` in a new folder, its `sqlalchemy.url` on the database."""
    alembic(tmp_path, "init", "alembic")
    ini = tmp_path / "alembic.ini"
    engine_url = url.replace("postgresql://", "postgresql+psycopg://")
    text = re.sub(
        r"^sqlalchemy\.url = .*$", f"sqlalchemy.url = {engine_url}", ini.read_text(), flags=re.M
    )
    ini.write_text(text)
    return tmp_path


def print_schema(project: Path) -> None:
    """The page's command, in a shell."""
    command = named(PAGE, "example")["print"]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    subprocess.run(
        ["bash", "-ec", command],
        cwd=project,
        env={**os.environ, "PATH": path},
        check=True,
        timeout=60,
    )


def add_revision(project: Path) -> None:
    """The page's revision, at the path its first line names."""
    code = named(PAGE, "example")["revision"]
    match = re.match(r"# (\S+\.py)\n", code)
    assert match is not None, code
    (project / match.group(1)).write_text(code)


def version(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT MAX(version) FROM denpyo_schema_version").fetchone()
    assert row is not None
    return int(row[0])


def denpyo_objects(url: str) -> list[str]:
    """Every table, sequence, view or function named denpyo_… in the database."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'denpyo%%' "
            "UNION ALL SELECT proname FROM pg_proc WHERE proname LIKE 'denpyo%%'"
        ).fetchall()
    return sorted(name for (name,) in rows)


def test_the_revision_creates_the_tables_and_its_downgrade_drops_them(
    project: Path, url: str
) -> None:
    print_schema(project)
    add_revision(project)
    alembic(project, "upgrade", "head")

    assert "denpyo_schema (head)" in alembic(project, "current")
    assert version(url) == LATEST
    with denpyo.Ledger(url) as ledger:
        assert ledger.store.schema_version() == LATEST
        assert ledger.migrate() == []  # `denpyo migrate` finds nothing to do
        ledger.channel("invoice-email")(lambda sub: "msg-1")
        sub = ledger.submit("invoice-email", "order:42", {"to": "a@example.com"})
        assert sub.status is Status.SYNCED and sub.remote_id == "msg-1"
        assert [e.kind for e in ledger.events(sub.id)] == ["created", "attempt", "settle"]

    alembic(project, "downgrade", "base")
    assert denpyo_objects(url) == []


def test_an_upgrade_of_denpyo_is_a_revision_of_the_sections_it_adds(
    project: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database got the previous release's schema through the page's revision;
    the next revision holds this release's sections above its version."""
    every = queries.load_migrations
    with monkeypatch.context() as previous_release:
        previous_release.setattr(queries, "load_migrations", lambda d: every(d)[:-1])
        (project / SCHEMA).write_text(queries.ddl("postgresql"))
    add_revision(project)
    alembic(project, "upgrade", "head")
    have = version(url)
    assert have == LATEST - 1

    print_schema(project)  # this release's
    printed = (project / SCHEMA).read_text()
    assert printed.count("\n-- migration ") == LATEST
    body = printed[: printed.index("\n-- create_schema_version")]
    sections = dict(
        re.findall(r"^-- migration (\d+)\n(.*?)(?=^-- migration |\Z)", body, re.M | re.S)
    )
    new = [
        f"{sections[n]}\nINSERT INTO denpyo_schema_version (version) VALUES ({n});"
        for n in map(str, range(have + 1, LATEST + 1))
    ]
    (project / "alembic/versions/denpyo_upgrade.sql").write_text("\n".join(new))
    (project / "alembic/versions/denpyo_upgrade.py").write_text(
        "from pathlib import Path\n\nfrom alembic import op\n\n"
        'revision = "denpyo_upgrade"\ndown_revision = "denpyo_schema"\n\n\n'
        "def upgrade() -> None:\n"
        '    op.execute(Path(__file__).with_name("denpyo_upgrade.sql").read_text())\n'
    )
    alembic(project, "upgrade", "head")

    assert version(url) == LATEST
    with denpyo.Ledger(url) as ledger:
        assert ledger.migrate() == []
