"""denpyo in a Django project: add `"denpyo.contrib.django"` to INSTALLED_APPS.

- `manage.py migrate` creates denpyo's tables from the SQL files `denpyo migrate`
  runs, and records them in `denpyo_schema_version` as it does (schema.py);
- `get_ledger()` is the process's Ledger, on `settings.DENPYO_DATABASE_URL` or
  else the database of `DATABASES["default"]`;
- `ledger.enqueue(..., conn=django.db.connection)` inside `transaction.atomic()`
  writes the row in the block's transaction: rolled back, no row;
- the admin shows both tables read-only (admin.py); `manage.py denpyo_worker`
  runs the worker.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from denpyo.engine.ledger import Ledger
from denpyo.errors import ConfigurationError
from denpyo.store.dialects import DIALECTS, Dialect

__all__ = ["close_ledger", "database_url", "get_ledger", "url_of"]

# The last part of a Django ENGINE (Django's own, GeoDjango's, and wrappers that
# keep the name) -> denpyo's database (`Dialect.django_engines`).
ENGINES: dict[str, Dialect] = {
    engine: dialect for dialect in DIALECTS.values() for engine in dialect.django_engines
}

_lock = threading.Lock()
_ledger: Ledger | None = None
_closed = False


def get_ledger() -> Ledger:
    """The process's Ledger, opened at first use on `database_url()`.

    Register the channels on it where your app starts (`AppConfig.ready`). When
    the settings come to name another database (Django's test runner switches to
    the test database after start-up), the next call opens a ledger there with
    the same channels and alert callbacks, and closes the old one.
    """
    global _ledger, _closed
    url = database_url()
    with _lock:
        old = _ledger
        if old is not None and old.url == url and not _closed:
            return old
        ledger = Ledger(url)
        if old is not None:
            ledger.channels.update(old.channels)
            for handler in old.alerts.handlers:
                ledger.alerts.add(handler)
            if not _closed:
                old.close()
        _ledger, _closed = ledger, False
        return ledger


def close_ledger() -> None:
    """Release the process's ledger's connections: before a test database is
    dropped (PostgreSQL refuses while they are open), or at exit. The next
    `get_ledger()` opens it again, with the same channels."""
    global _closed
    with _lock:
        if _ledger is not None and not _closed:
            _ledger.close()
            _closed = True


def database_url(alias: str = "default") -> str:
    """`settings.DENPYO_DATABASE_URL`, else the URL of `settings.DATABASES[alias]`."""
    from django.conf import settings

    url = getattr(settings, "DENPYO_DATABASE_URL", None)
    if url:
        return str(url)
    if alias not in settings.DATABASES:
        raise ConfigurationError(f"settings.DATABASES has no {alias!r} database")
    return url_of(settings.DATABASES[alias])


def url_of(database: Mapping[str, Any]) -> str:
    """A denpyo URL for one entry of Django's DATABASES setting.

    SQLite: `sqlite:////absolute/path` (a relative NAME is taken from the working
    directory, as Django does). PostgreSQL and MariaDB: `scheme://user:password@
    host:port/name`; a HOST that is a path is the server's Unix socket.
    """
    engine = str(database.get("ENGINE") or "")
    dialect = ENGINES.get(engine.rsplit(".", 1)[-1])
    if dialect is None:
        *others, last = [known.title for known in DIALECTS.values() if not known.parent]
        raise ConfigurationError(
            f"denpyo cannot use the database engine {engine!r}: "
            f"it stores in {', '.join(others)} or {last} (set DENPYO_DATABASE_URL)"
        )
    name = str(database.get("NAME") or "")
    if dialect.embedded:
        if name in ("", ":memory:") or name.startswith("file:") or "mode=memory" in name:
            raise ConfigurationError(
                f"the {dialect.title} database {name!r} is not a file another connection can open: "
                "give Django's database a file NAME (and TEST NAME), or set DENPYO_DATABASE_URL"
            )
        return f"{dialect.name}:///" + quote(os.path.abspath(name))
    if not name:
        raise ConfigurationError(
            f"the {engine} database has no NAME; set DENPYO_DATABASE_URL to reach it"
        )
    # Only the OPTIONS that mean the same in its URL; the rest (Django's own, or a
    # pool) are not the ledger's business.
    options: Mapping[str, Any] = database.get("OPTIONS") or {}
    query = {key: str(options[key]) for key in dialect.django_options if options.get(key)}
    host = str(database.get("HOST") or "")
    socket_path, *socket_port = dialect.socket_options
    if host.startswith("/"):
        query[socket_path] = host
        host = ""
    elif ":" in host:
        host = f"[{host}]"  # an IPv6 address
    port = str(database.get("PORT") or "")
    if port and not host and socket_port:
        query[socket_port[0]] = port  # the socket's name ends in its port (libpq)
    user = quote(str(database.get("USER") or ""), safe="")
    password = quote(str(database.get("PASSWORD") or ""), safe="")
    login = f"{user}:{password}@" if password else f"{user}@" if user else ""
    address = f"{host}:{port}" if port and host else host
    url = f"{dialect.name}://{login}{address}/{quote(name, safe='')}"
    return f"{url}?{urlencode(query)}" if query else url
