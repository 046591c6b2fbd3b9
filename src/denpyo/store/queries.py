"""Load the named queries of one database from `sql/<dialect>.sql`.

Each query starts with a header line `-- name: what it does` and runs to the
next header. The files are split once, at import of the store module.

A predicate that several queries share is written once, as a fragment at the
top of the file: a header `-- @name: what it means`, then its SQL up to the next
blank line, with `$.` before each column. A query includes it as `{{name}}`, or
`{{name s}}` for the table aliased `s` (`$.status` becomes `s.status`). The
expanded text is exactly what the query would spell out, so the planner sees
the same predicates (partial indexes still match).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

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
def load_queries(dialect: str, layout: str | None = None) -> dict[str, str]:
    """Return {name: sql} for a dialect; the header comment stays as the first line.
    With a `layout` (PostgreSQL's "partitioned"), the queries of
    `sql/<dialect>-<layout>.sql` replace those of the same name and add their own;
    they use the dialect's fragments."""
    text = _sql_file(dialect)
    queries = _split(text, load_fragments(text), f"{dialect}.sql")
    if layout is not None:
        queries.update(_split(_sql_file(f"{dialect}-{layout}"), load_fragments(text), layout))
    return queries


def load_layout_queries(dialect: str, layout: str) -> dict[str, str]:
    """Only the queries a layout's file defines (tests check they are the store's)."""
    text = _sql_file(dialect)
    return _split(_sql_file(f"{dialect}-{layout}"), load_fragments(text), layout)


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
def load_migrations(dialect: str, overlay: str | None = None) -> tuple[tuple[int, str], ...]:
    """The numbered migration scripts of a dialect, in order: ((1, sql), ...). With an
    `overlay` (a variant's, such as "distributed"), the scripts of
    `migrations/<dialect>-<overlay>/` replace the dialect's of the same number."""
    scripts = dict(_numbered(dialect))
    if overlay is not None:
        scripts.update(_numbered(f"{dialect}-{overlay}"))
    return tuple(sorted(scripts.items()))


def _numbered(folder_name: str) -> list[tuple[int, str]]:
    folder = resources.files("denpyo.store").joinpath("migrations", folder_name)
    return [
        (int(entry.name.split("_", 1)[0]), entry.read_text())
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]


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


def ddl(dialect: str, overlay: str | None = None) -> str:
    """Every migration of a dialect (or of its variant `overlay`) as one script, for
    users who run their own migrations."""
    migrations = load_migrations(dialect, overlay)
    named = f"{dialect}-{overlay}" if overlay else dialect
    parts = [f"-- denpyo schema for {named}: migrations 1..{len(migrations)}"]
    for version, script in migrations:
        parts.append(f"\n-- migration {version}\n{script.strip()}")
    parts.append(f"\n{load_queries(dialect)['schema_version_create'].strip()};")
    for version, _ in migrations:
        parts.append(f"INSERT INTO denpyo_schema_version (version) VALUES ({version});")
    return "\n".join(parts) + "\n"
