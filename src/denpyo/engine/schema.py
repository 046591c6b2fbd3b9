"""The schema as one SQL script, for those who run their own migrations (`denpyo
sql`): the store's migrations of a database kind, named by the kind or by a URL."""

from __future__ import annotations

from denpyo.errors import InvalidInput
from denpyo.store import dialect_of
from denpyo.store.dialects import DIALECTS
from denpyo.store.queries import ddl

DATABASES: tuple[str, ...] = tuple(DIALECTS)
"""The database kinds denpyo has a schema for."""


def schema_sql(dialect: str | None = None, *, url: str | None = None) -> str:
    """Every migration of `dialect` (default: the kind `url` names) as one script,
    with the schema-version rows, so that `migrate` later knows the tables are there."""
    chosen = dialect or dialect_of(url or "")
    variant = DIALECTS.get(chosen)
    try:
        if variant is not None and variant.parent is not None:
            return ddl(variant.parent, overlay=variant.name)
        return ddl(chosen)
    except (FileNotFoundError, KeyError):
        raise InvalidInput(f"this denpyo has no {chosen} schema") from None
