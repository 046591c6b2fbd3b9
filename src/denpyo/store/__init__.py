"""Opening a store from a database URL: its scheme names the database (store/dialects.py)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from denpyo.errors import InvalidDatabaseURL
from denpyo.store.base import NewSubmission, Store
from denpyo.store.dialects import BY_SCHEME, Dialect

__all__ = ["NewSubmission", "Store", "dialect_of", "masked", "open_store", "shown_url"]


def dialect_of(url: str) -> str:
    """The dialect a URL names, or InvalidDatabaseURL with the reason."""
    return _dialect(url).name


def _dialect(url: str) -> Dialect:
    """The database a URL names (store/dialects.py), or InvalidDatabaseURL."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidDatabaseURL(
            f"not a database URL: {url!r} (expected sqlite:///path.db, "
            "postgresql://user@host/db or mysql://user@host/db)"
        )
    scheme = url.split("://", 1)[0].lower()
    dialect = BY_SCHEME.get(scheme)
    if dialect is None:
        schemes = ", ".join(sorted(BY_SCHEME))
        raise InvalidDatabaseURL(
            f"unsupported database {scheme!r} in {_without_password(url)!r}; use one of: {schemes}"
        )
    return dialect


def shown_url(url: str) -> str:
    """The URL for a header or a message: no password, a SQLite path made absolute."""
    if "://" not in url:
        return url
    dialect = _dialect(url)
    if dialect.embedded:
        return f"{dialect.name}:///{os.path.abspath(sqlite_path(url))}"
    return _without_password(url)


def _without_password(url: str) -> str:
    """The URL with `***` for its password, whatever its scheme."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return url


def masked(text: str, url: str) -> str:
    """`text` (a driver's message, say) with the URL's password hidden, as written
    and as decoded: a driver that cannot read a URL may quote any part of it."""
    userinfo, at, _ = url.partition("://")[2].rpartition("@")
    password = userinfo.partition(":")[2] if at else ""
    for form in sorted({password, unquote(password)}, key=len, reverse=True):
        if form:
            text = text.replace(form, "***")
    return text


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


def _check_hosts(netloc: str, dialect: Dialect, shown: str) -> None:
    """Each host's port is a number. PostgreSQL takes several hosts, comma-separated
    (`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`): libpq
    tries them in turn, which is how a client follows a failover to a standby."""
    hosts = netloc.rpartition("@")[2].split(",")
    if len(hosts) > 1 and dialect.name != "postgresql":
        raise InvalidDatabaseURL(f"{shown!r}: several hosts are for PostgreSQL only")
    for host in hosts:
        try:
            urlsplit(f"//{host}").port  # noqa: B018 - raises on a malformed port
        except ValueError as exc:
            raise InvalidDatabaseURL(f"malformed port in {shown!r}") from exc


def open_store(url: str) -> Store:
    """Open (lazily connect) the store a URL names."""
    dialect = _dialect(url)
    if not dialect.embedded:
        shown = shown_url(url)
        try:
            parts = urlsplit(url)  # raises on a bracket left open ([::1)
        except ValueError as exc:
            reason = masked(str(exc), url)
            raise InvalidDatabaseURL(f"malformed URL {shown!r}: {reason}") from exc
        _check_hosts(parts.netloc, dialect, shown)
        if not parts.path.strip("/"):
            raise InvalidDatabaseURL(f"{shown!r} names no database (…/dbname)")
    return dialect.store_class().from_url(url)
