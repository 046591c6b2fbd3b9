"""Transactions the store owns, run again when they lose to a concurrent one.

A serialization failure or a deadlock (StoreConflict: store/connections.py says
which driver errors are one) rolls the whole transaction back, and the same
transaction, run again a moment later, usually succeeds. A `with` body cannot be
run again by its context manager, so the unit that runs again is the store's
method that owns the transaction: `@retried` on each such method (one transaction
each: a method of two would run the first, committed, again).

Never the caller's transaction (`conn=`): it holds the application's own writes,
and only the application can run it again. Never an inner call either: a method
called from another retried method runs once, and the outer one runs again.

Up to CONFLICT_TRIES tries, `CONFLICT_PAUSE` seconds doubling between them with
full jitter (two transactions that collided must not collide again in step),
capped at `CONFLICT_PAUSE_MAX` (`WAITED_TRIES` for one that waited out a lock
timeout: it has spent that long already); one log line for a transaction that needed more
than one try (not one per try); after the last, the StoreConflict is raised.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Generic, TypeVar, cast

from denpyo.errors import StoreConflict

log = logging.getLogger("denpyo.store")

CONFLICT_STATES = ("40001", "40P01")
"""PostgreSQL's SQLSTATEs of a conflict: a serialization failure, a deadlock (what
store/postgresql.py and asyncpg's errors read)."""

CONFLICT_TRIES = 8
WAITED_TRIES = 2
"""Tries of a transaction that waited out the database's lock timeout (MariaDB's
1205, 50 s by default): eight would hold its caller for minutes."""
CONFLICT_PAUSE = 0.005
CONFLICT_PAUSE_MAX = 0.25

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_retrying: ContextVar[bool] = ContextVar("denpyo_retrying", default=False)
"""Whether a retried method is running in this context (an inner one runs once)."""


class Conflicts:
    """The tries of one transaction: how long to wait before the next, and the one
    log line about them."""

    __slots__ = ("limit", "tries", "what")

    def __init__(self, what: str, *, tries: int = CONFLICT_TRIES) -> None:
        self.what = what
        self.tries = 1
        self.limit = tries

    def pause(self, exc: Exception) -> float:
        """Seconds to wait before trying again after `exc`; raises it once the tries
        are spent."""
        waited = isinstance(exc, StoreConflict) and exc.waited
        if self.tries >= (min(WAITED_TRIES, self.limit) if waited else self.limit):
            log.warning(
                "%s: gave up after %d tries, each lost to a conflict: %s",
                self.what,
                self.tries,
                exc,
            )
            raise exc
        ceiling = min(CONFLICT_PAUSE * 2 ** (self.tries - 1), CONFLICT_PAUSE_MAX)
        self.tries += 1
        return random.uniform(0, ceiling)

    def done(self) -> None:
        if self.tries > 1:
            log.info(
                "%s: succeeded at try %d, after conflicts with concurrent transactions",
                self.what,
                self.tries,
            )


class Replayed(Generic[T]):
    """An iterable that a retried method may read again: the items read so far, then
    the rest of `items` as it reads on (each item is read from `items` once)."""

    def __init__(self, items: Iterable[T]) -> None:
        self.source = iter(items)
        self.read: list[T] = []

    def __iter__(self) -> Iterator[T]:
        yield from self.read
        for item in self.source:
            self.read.append(item)
            yield item


def again_on_conflict(run: Callable[[], T], what: str) -> T:
    """`run()`, run again while it ends in StoreConflict (CONFLICT_TRIES in all)."""
    conflicts = Conflicts(what)
    while True:
        try:
            result = run()
        except StoreConflict as exc:
            time.sleep(conflicts.pause(exc))
        else:
            conflicts.done()
            return result


def in_retried() -> bool:
    """Whether a retried method runs in this context: it, not a statement inside it,
    is run again."""
    return _retrying.get()


def retried(method: F) -> F:
    """Run the store's method again when its own transaction ends in StoreConflict
    (see the module's docstring); once only when called with a caller's `conn` (a
    keyword argument) or from inside another retried method."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("conn") is not None or _retrying.get():
            return method(*args, **kwargs)
        token = _retrying.set(True)
        try:
            return again_on_conflict(lambda: method(*args, **kwargs), f"store.{method.__name__}")
        finally:
            _retrying.reset(token)

    return cast(F, run)
