"""psycopg's errors as denpyo's, and what a first connection's failure means: shared by
the store (store/postgresql.py) and the worker's asyncio connections
(store/postgresql_async.py)."""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors

from denpyo.errors import ConfigurationError, StoreUnavailable
from denpyo.store import masked, shown_url
from denpyo.store.conflicts import CONFLICT_STATES
from denpyo.store.connections import DriverErrors
from denpyo.store.dialects import POSTGRESQL

CONNECT_TIMEOUT = 10
"""Seconds a first connection may take before the store gives up on the server."""

UNREACHABLE_STATES = ("57P01", "57P02", "57P03", "53300")
"""The server ended the session (shutdown, crash) or takes none now (starting up,
too many clients); class 08, a connection exception, too."""
UNREACHABLE_SIGNS = (
    "Connection refused",
    "timeout expired",
    "timed out",
    "No route to host",
    "Network is unreachable",
    "Connection reset",
    "No such file or directory",
    "server closed the connection",
    "could not receive data from server",
    "could not send data to server",
    "the connection is lost",
    "SSL SYSCALL error",
    "the database system is",
    "too many clients",
    "remaining connection slots",
)
"""How libpq says, without a SQLSTATE, that no server answered or the connection
broke: refused, timed out, unreachable, no socket file, hung up; and the server's
own refusals of the moment (starting up, shutting down, full). A server that
refuses who we are or what we ask for (password, role, database) is not here."""


def _unreachable(exc: psycopg.Error) -> bool:
    """Whether the server is out of reach (an outage), not refusing the request."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    if state is not None:
        return state.startswith("08") or state in UNREACHABLE_STATES
    text = str(exc)
    return any(sign in text for sign in UNREACHABLE_SIGNS)


ERRORS = DriverErrors(
    POSTGRESQL,
    psycopg.Error,
    lambda exc: isinstance(exc, pg_errors.UndefinedTable),
    unavailable=_unreachable,
    conflict=lambda exc: exc.sqlstate in CONFLICT_STATES,
)
"""psycopg's errors as denpyo's (`UndefinedTable`: the tables are missing; a server
out of reach: StoreUnavailable; CONFLICT_STATES: StoreConflict)."""


def connect_failure(exc: psycopg.Error, conninfo: str) -> StoreUnavailable | ConfigurationError:
    """A first connection that failed: an outage (StoreUnavailable), or a refusal of
    the settings (ConfigurationError), named by the URL without its password."""
    message = f"cannot connect to PostgreSQL at {shown_url(conninfo)}: {masked(str(exc), conninfo)}"
    return StoreUnavailable(message) if _unreachable(exc) else ConfigurationError(message)
