"""The application's own transaction, run again when it loses to a concurrent one.

denpyo runs its own transactions again after a conflict (store/conflicts.py), but
never the application's: it holds the application's writes, and only the
application can run them again. On a database where any transaction may end in
a serialization failure (CockroachDB, SERIALIZABLE PostgreSQL), the application
wraps the function that opens its transaction, writes, enqueues and commits in
`run_again_on_conflict`. The call to the provider is never inside: the worker
makes it once the slip is committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from denpyo.errors import StoreConflict
from denpyo.store.conflicts import CONFLICT_STATES, CONFLICT_TRIES, Conflicts

T = TypeVar("T")


def is_conflict(exc: BaseException) -> bool:
    """Whether `exc` (denpyo's, or the application's driver's) says the transaction
    lost to a concurrent one and may succeed if run again: 40001 or 40P01."""
    if isinstance(exc, StoreConflict):
        return True
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state in CONFLICT_STATES


def run_again_on_conflict(
    transaction: Callable[[], T], *, tries: int = CONFLICT_TRIES, what: str = "transaction"
) -> T:
    """`transaction()`, run again (up to `tries` runs, paused with full jitter) while
    it ends in a conflict: each run must open, write and commit its own transaction
    (the one that ended was rolled back). Other errors, and the last conflict, are
    raised."""
    conflicts = Conflicts(what, tries=tries)
    while True:
        try:
            result = transaction()
        except Exception as exc:
            if not is_conflict(exc):
                raise
            time.sleep(conflicts.pause(exc))
        else:
            conflicts.done()
            return result
