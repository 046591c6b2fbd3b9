"""One denpyo migration as a Django migration operation.

The SQL is read from the same packaged files `denpyo migrate` runs
(`denpyo/store/migrations/<dialect>/NNNN_*.sql`), so there is one source of the
schema. Both commands record what they applied in `denpyo_schema_version` and
skip what is recorded there, so either may follow the other: `denpyo migrate`
after `manage.py migrate` finds nothing to do, and `manage.py migrate` on a
database that `denpyo migrate` already set up records its Django migrations
without running any SQL.

A crash half-way: on PostgreSQL and SQLite the whole Django migration is one
transaction (the script and its version row commit together). MariaDB commits
each DDL statement on its own, as under `denpyo migrate`; its scripts are written
to be run again to the end (`IF NOT EXISTS`), and the version row is written last.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import router
from django.db.migrations import RunSQL

from denpyo.errors import ConfigurationError, StoreError
from denpyo.store.dialects import DIALECTS, Dialect
from denpyo.store.queries import load_migrations, load_queries, split_statements

# Django's `connection.vendor` is the name of denpyo's dialect for each of them.
VENDORS = frozenset(name for name, dialect in DIALECTS.items() if dialect.django_engines)


class ApplySchema(RunSQL):
    """Apply denpyo migration `version` unless `denpyo_schema_version` records it.

    It takes the same lock as `denpyo migrate`, so the two never run a script at
    once, and reads the recorded version under that lock. `sqlmigrate` shows the
    SQL for a database with no denpyo tables.
    """

    def __init__(self, version: int) -> None:
        self.version = version
        super().__init__(sql=RunSQL.noop, reverse_sql=None, elidable=False)

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (type(self).__qualname__, [], {"version": self.version})

    def describe(self) -> str:
        return f"denpyo schema {self.version} (denpyo_schema_version records it)"

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        connection = schema_editor.connection
        if not router.allow_migrate(connection.alias, app_label, **self.hints):
            return
        dialect = _dialect(connection.vendor)
        queries = load_queries(dialect.name)
        script = dict(load_migrations(dialect.name))[self.version]
        # PostgreSQL runs a script whole (function bodies hold semicolons); the
        # others take one statement per call, as the store's own migrate does.
        statements = [script] if dialect.whole_scripts else split_statements(script)
        # The literal row `denpyo sql` prints too (store/queries.py ddl()).
        record = f"INSERT INTO denpyo_schema_version (version) VALUES ({int(self.version)})"
        if schema_editor.collect_sql:
            self._run_sql(schema_editor, [queries["create_schema_version"], *statements, record])
            return
        with _migration_lock(connection, dialect, queries):
            self._run_sql(schema_editor, [queries["create_schema_version"]])
            with connection.cursor() as cursor:
                cursor.execute(queries["get_schema_version"])
                recorded = int(cursor.fetchone()[0])
            if recorded >= self.version:
                return
            self._run_sql(schema_editor, [*statements, record])


def _dialect(vendor: str) -> Dialect:
    if vendor not in VENDORS:
        raise ConfigurationError(
            f"denpyo has no schema for Django's {vendor!r} database; "
            f"it supports {', '.join(sorted(VENDORS))}"
        )
    return DIALECTS[vendor]


@contextmanager
def _migration_lock(connection: Any, dialect: Dialect, queries: dict[str, str]) -> Iterator[None]:
    """`denpyo migrate`'s lock (store/sql/<dialect>.sql `lock_schema`).

    PostgreSQL's is a transaction lock, held until the Django migration commits;
    SQLite's writer lock is taken by the first write. MariaDB's belongs to the
    session (its DDL commits on its own), so it is released here: Django keeps
    the connection, and a `denpyo migrate` would otherwise wait on it.
    """
    with connection.cursor() as cursor:
        cursor.execute(queries["lock_schema"])
        if dialect.session_lock and cursor.fetchone()[0] != 1:
            raise StoreError(
                "another process has held the migration lock of this database (GET_LOCK "
                "'denpyo_migrate:<database>') for 60 s: is a `denpyo migrate` stuck?"
            )
    try:
        yield
    finally:
        if dialect.session_lock:
            with connection.cursor() as cursor:
                cursor.execute(queries["unlock_schema"])
