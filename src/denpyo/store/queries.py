"""Load the named queries of one database from `sql/<dialect>.sql`.

Each query starts with a header line `-- name: what it does` and runs to the
next header. The files are split once, at import of the store module.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

HEADER = re.compile(r"^-- ([a-z][a-z0-9_]*): (.+)$", re.MULTILINE)
DIALECTS = ("sqlite", "postgresql", "mysql")


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """Return {name: sql} for a dialect; the header comment stays as the first line."""
    text = resources.files("denpyo.store").joinpath("sql", f"{dialect}.sql").read_text()
    matches = list(HEADER.finditer(text))
    queries: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(text)
        body = text[match.start() : end].strip().rstrip(";").strip()
        if match.group(1) in queries:
            raise ValueError(f"{dialect}.sql defines {match.group(1)} twice")
        queries[match.group(1)] = body
    return queries


@cache
def load_migrations(dialect: str) -> tuple[tuple[int, str], ...]:
    """The numbered migration scripts of a dialect, in order: ((1, sql), ...)."""
    folder = resources.files("denpyo.store").joinpath("migrations", dialect)
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text()))
    return tuple(sorted(found))


def split_statements(script: str) -> list[str]:
    """Split a migration script at semicolons that end a line.

    SQLite and MariaDB migration scripts are written so that no statement has a
    line-ending semicolon inside it (PostgreSQL's run whole, function bodies and
    all); comment-only chunks are dropped.
    """
    statements = []
    for chunk in re.split(r";[ \t]*$", script, flags=re.MULTILINE):
        code = "\n".join(
            line for line in chunk.splitlines() if not line.strip().startswith("--")
        ).strip()
        if code:
            statements.append(code)
    return statements


def ddl(dialect: str) -> str:
    """Every migration of a dialect as one script, for users who run their own migrations."""
    parts = [f"-- denpyo schema for {dialect}: migrations 1..{len(load_migrations(dialect))}"]
    for version, script in load_migrations(dialect):
        parts.append(f"\n-- migration {version}\n{script.strip()}")
    parts.append(f"\n{load_queries(dialect)['schema_version_create'].strip()};")
    for version, _ in load_migrations(dialect):
        parts.append(f"INSERT INTO denpyo_schema_version (version) VALUES ({version});")
    return "\n".join(parts) + "\n"
