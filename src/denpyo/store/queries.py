"""Load the named queries of one database from `sql/<dialect>.sql`.

Each query starts with a header line `-- name: what it does` and runs to the
next header. The files are split once, at import of the store module.

A predicate that several queries share is written once, as a fragment at the
top of the file: a header `-- @name: what it means`, then its SQL up to the next
blank line, with `$.` before each column. A query includes it as `{{name}}`, or
`{{name s}}` for the table aliased `s` (`$.status` becomes `s.status`). The
expanded text is exactly what the query would spell out, so the planner sees
the same predicates (partial indexes still match). A fragment may also be a
statement that several queries hold as a CTE (the partitioned layout's
`keys_of_gone`: `kept AS {{keys_of_gone}}`, the parentheses the include's).

A variant (a `Dialect` with a `parent`, store/dialects.py) has an overlay file
holding only what it changes: its queries replace the parent's of the same name
or add their own, and its fragments join the parent's. Its migrations are the
parent's with its own folder's replacing those of the same number.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from denpyo.store.dialects import DIALECTS

HEADER = re.compile(r"^-- ([a-z][a-z0-9_]*): (.+)$", re.MULTILINE)
FRAGMENT = re.compile(r"^-- @([a-z][a-z0-9_]*): .+\n((?:.+\n?)+)", re.MULTILINE)
INCLUDE = re.compile(r"\{\{([a-z][a-z0-9_]*)(?: ([a-z][a-z0-9_]*))?\}\}")


def load_fragments(text: str) -> dict[str, str]:
    """{name: sql} of the fragments in a query file (`$.` still in place)."""
    return {match.group(1): match.group(2).strip() for match in FRAGMENT.finditer(text)}


def expand(sql: str, fragments: dict[str, str], depth: int = 0) -> str:
    """Replace each `{{name}}` / `{{name alias}}` by its fragment, in parentheses. A
    fragment included by another without an alias takes the outer one's."""
    if depth > 5:
        raise ValueError("fragments include each other too deeply")

    def one(match: re.Match[str]) -> str:
        name, alias = match.group(1), match.group(2)
        if name not in fragments:
            raise ValueError(f"no fragment named {name}")
        body = expand(fragments[name], fragments, depth + 1)
        if alias is not None:
            body = body.replace("$.", f"{alias}.")
        elif depth == 0:  # in a query: bare column names
            body = body.replace("$.", "")
        return f"({body})"

    return INCLUDE.sub(one, sql)


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """Return {name: sql} for a dialect; the header comment stays as the first line.
    A variant's (`Dialect.parent`) are its parent's, with the queries of its own
    overlay file `sql/<name>.sql` replacing those of the same name and adding their
    own; its fragments are its parent's and its own."""
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for record in _lineage(dialect):
        text = _sql_file(record)
        fragments = fragments | load_fragments(text)
        queries.update(_split(text, fragments, f"{record}.sql"))
    return queries


def load_overlay_queries(dialect: str) -> dict[str, str]:
    """Only the queries a variant's overlay file defines (tests check that it
    replaces only its parent's and adds only its store's)."""
    fragments: dict[str, str] = {}
    for record in _lineage(dialect):
        fragments = fragments | load_fragments(_sql_file(record))
    return _split(_sql_file(dialect), fragments, f"{dialect}.sql")


def _lineage(dialect: str) -> list[str]:
    """The names of a dialect and its parents, the root first (one name for a
    dialect without a record: tests load files of their own so)."""
    record = DIALECTS.get(dialect)
    return [dialect] if record is None else [parent.name for parent in record.lineage]


def _sql_file(name: str) -> str:
    return resources.files("denpyo.store").joinpath("sql", f"{name}.sql").read_text()


def _split(text: str, fragments: dict[str, str], where: str) -> dict[str, str]:
    matches = list(HEADER.finditer(text))
    queries: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(text)
        body = text[match.start() : end].strip().rstrip(";").strip()
        if match.group(1) in queries:
            raise ValueError(f"{where} defines {match.group(1)} twice")
        queries[match.group(1)] = expand(body, fragments)
    return queries


@cache
def load_migrations(dialect: str) -> tuple[tuple[int, str], ...]:
    """The numbered migration scripts of a dialect, in order: ((1, sql), ...). A
    variant's are its parent's, its own replacing those of the same number and adding
    theirs; a `squashed` variant's first one replaces every parent script up to it."""
    record = DIALECTS.get(dialect)
    found: dict[int, str] = {}
    if record is not None and record.parent is not None:
        found = dict(load_migrations(record.parent))
    own = _own_migrations(dialect)
    if own and record is not None and record.squashed:
        first = min(own)
        found = {version: script for version, script in found.items() if version > first}
    found.update(own)
    return tuple(sorted(found.items()))


def _own_migrations(dialect: str) -> dict[int, str]:
    """The scripts of `migrations/<dialect>/` (none: a variant that changes no script)."""
    folder = resources.files("denpyo.store").joinpath("migrations", dialect)
    if not folder.is_dir():
        return {}
    return {
        int(entry.name.split("_", 1)[0]): entry.read_text()
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    }


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
    migrations = load_migrations(dialect)
    latest = migrations[-1][0] if migrations else 0
    parts = [f"-- denpyo schema for {dialect}: migrations 1..{latest}"]
    for version, script in migrations:
        parts.append(f"\n-- migration {version}\n{script.strip()}")
    parts.append(f"\n{load_queries(dialect)['create_schema_version'].strip()};")
    for version in range(1, latest + 1):
        parts.append(f"INSERT INTO denpyo_schema_version (version) VALUES ({version});")
    return "\n".join(parts) + "\n"
