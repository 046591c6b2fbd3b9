"""Opening a store from a database URL."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from denpyo.errors import InvalidDatabaseURL
from denpyo.extras import missing
from denpyo.store.base import NewSubmission, Store

__all__ = ["NewSubmission", "Store", "dialect_of", "open_store", "shown_url"]

SCHEMES = {
    "sqlite": "sqlite",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "postgresql+psycopg": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "mysql+pymysql": "mysql",
}


def dialect_of(url: str) -> str:
    """The dialect a URL names, or InvalidDatabaseURL with the reason."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidDatabaseURL(
            f"not a database URL: {url!r} (expected sqlite:///path.db, "
            "postgresql://user@host/db or mysql://user@host/db)"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise InvalidDatabaseURL(
            f"unsupported database {scheme!r} in {url!r}; use one of: {', '.join(sorted(SCHEMES))}"
        )
    return SCHEMES[scheme]


def shown_url(url: str) -> str:
    """The URL for a header or a message: no password, a SQLite path made absolute."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    if dialect_of(url) == "sqlite":
        return f"sqlite:///{os.path.abspath(sqlite_path(url))}"
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return url


def sqlite_path(url: str) -> str:
    """`sqlite:///app.db` is app.db relative to the working directory; `sqlite:////abs`."""
    rest = url.split("://", 1)[1]
    if not rest.startswith("/") or len(rest) < 2:
        raise InvalidDatabaseURL(
            f"malformed SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = unquote(rest[1:].split("?", 1)[0])
    if path in ("", ":memory:"):
        raise InvalidDatabaseURL(
            f"{url!r}: denpyo needs a database file that outlives the process, not :memory:"
        )
    return path


def open_store(url: str) -> Store:
    """Open (lazily connect) the store a URL names."""
    dialect = dialect_of(url)
    if dialect == "sqlite":
        from denpyo.store.sqlite import SqliteStore

        return SqliteStore(sqlite_path(url))
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise InvalidDatabaseURL(f"malformed port in {url!r}") from exc
    if not parts.path.strip("/"):
        raise InvalidDatabaseURL(f"{url!r} names no database (…/dbname)")
    if dialect == "postgresql":
        try:
            from denpyo.store.postgresql import PostgresStore
        except ImportError as exc:
            raise missing("postgresql", "a PostgreSQL URL", exc) from exc
        return PostgresStore(url.replace("postgresql+psycopg://", "postgresql://", 1))
    try:
        from denpyo.store.mysql import MysqlStore  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise missing("mysql", "a MariaDB URL", exc) from exc
    store: Store = MysqlStore(url)
    return store
