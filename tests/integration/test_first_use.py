"""A new ledger used first from many threads, or many asyncio tasks, at once.

What a threaded web server's first requests do: every lazily made shared object
(the PostgreSQL pool and its layout, the ledger's database threads, the bridge's
loop, the tracer) is made once, every call returns, every returned call is a
committed row, and after `close()` the database has no connection of the ledger's
left (no pool leaked). Payloads are sealed, so that the keys are used from every
thread too. The race is run a few times: once is not enough to lose it reliably.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import denpyo
from database_records import database_record
from denpyo.engine import bridge, tracing
from denpyo.store import postgresql
from denpyo.store.sealing import new_payload_key

THREADS = 8
CALLS = 40
TASKS = 200
ROUNDS = 4
QUIET = 5.0  # seconds with no change in the server's connections: they are all gone


class Made:
    """Counts the instances of a class made while it is patched in."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def counting(self, cls: type) -> type:
        made = self

        class Counted(cls):  # type: ignore[valid-type, misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                with made.lock:
                    made.count += 1
                super().__init__(*args, **kwargs)

        return Counted


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Made:
    """The PostgreSQL pools made."""
    made = Made()
    monkeypatch.setattr(postgresql, "ConnectionPool", made.counting(postgresql.ConnectionPool))
    return made


@pytest.fixture
def loops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The bridges' event loops made."""
    made: list[Any] = []
    real = asyncio.new_event_loop

    def new_loop() -> Any:
        loop = real()
        made.append(loop)
        return loop

    monkeypatch.setattr(bridge.asyncio, "new_event_loop", new_loop)
    yield made


def connections(backend: str, db_url: str, sql: Callable[[str], list[tuple[Any, ...]]]) -> int:
    """The server's connections to this test's database, but the one asking."""
    query = database_record(backend).sessions_query(db_url.rpartition("/")[2])
    return 0 if query is None else int(sql(query)[0][0]) - 1


def settled_connections(backend: str, db_url: str, sql: Callable[..., Any]) -> int:
    """The count once it stops moving (a closed connection leaves the server's list
    a moment later)."""
    if database_record(backend).sessions_query("") is None:  # no server
        return 0
    seen, since = connections(backend, db_url, sql), time.monotonic()
    while seen and time.monotonic() - since < QUIET:
        time.sleep(0.1)
        now = connections(backend, db_url, sql)
        if now != seen:
            seen, since = now, time.monotonic()
    return seen


def new_ledger(db_url: str) -> denpyo.Ledger:
    ledger = denpyo.Ledger(db_url, payload_key=new_payload_key())
    ledger.channel("mail")(lambda sub: None)
    return ledger


def check_rows(ledger: denpyo.Ledger, keys: list[str], returned: list[Any]) -> None:
    """Every call returned a row, each committed once, its payload sealed and open."""
    assert len(returned) == len(keys)
    assert sorted(sub.key for sub in returned) == sorted(keys)
    for sub in returned[:: max(1, len(returned) // 10)]:
        stored = ledger.get("mail", sub.key)
        assert stored.payload == {"n": sub.key}


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_first_use_from_threads(
    backend: str,
    db_url: str,
    sql: Callable[[str], list[tuple[Any, ...]]],
    pools: Made,
    loops: list[Any],
    round_: int,
) -> None:
    """Threads that start together: one pool, one loop for the bridge, one tracer."""
    tracing.use(None)  # the tracer made anew, at the first span of these threads
    ledger = new_ledger(db_url)
    start = threading.Barrier(THREADS)
    tracers: list[Any] = []

    def calls(thread: int) -> list[Any]:
        start.wait()
        tracers.append(tracing._tracer())
        loop = ledger.bridge.loop
        assert loop is not None
        keys = [f"t{thread}-{n}" for n in range(CALLS)]
        return [ledger.enqueue("mail", key, {"n": key}) for key in keys]

    try:
        with ThreadPoolExecutor(THREADS) as threads:
            returned = [sub for subs in threads.map(calls, range(THREADS)) for sub in subs]
        keys = [f"t{t}-{n}" for t in range(THREADS) for n in range(CALLS)]
        check_rows(ledger, keys, returned)
        assert len({id(tracer) for tracer in tracers}) == 1
        assert len(loops) == 1
    finally:
        ledger.close()
    assert _rows(backend, sql) == THREADS * CALLS
    assert pools.count == (1 if database_record(backend).pooled else 0)
    assert settled_connections(backend, db_url, sql) == 0


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_first_use_from_tasks(
    backend: str,
    db_url: str,
    sql: Callable[[str], list[tuple[Any, ...]]],
    pools: Made,
    monkeypatch: pytest.MonkeyPatch,
    round_: int,
) -> None:
    """Many tasks on each of a few threads' own loops: one set of database threads."""
    from denpyo.engine import ledger as ledger_module

    executors = Made()
    monkeypatch.setattr(
        ledger_module, "ThreadPoolExecutor", executors.counting(ledger_module.ThreadPoolExecutor)
    )
    ledger = new_ledger(db_url)
    loops = 4
    start = threading.Barrier(loops)

    async def tasks(loop_n: int) -> list[Any]:
        keys = [f"a{loop_n}-{n}" for n in range(TASKS // loops)]
        return await asyncio.gather(*(ledger.aenqueue("mail", key, {"n": key}) for key in keys))

    def on_its_loop(loop_n: int) -> list[Any]:
        start.wait()
        return asyncio.run(tasks(loop_n))

    try:
        with ThreadPoolExecutor(loops) as threads:
            returned = [sub for subs in threads.map(on_its_loop, range(loops)) for sub in subs]
        keys = [f"a{n}-{i}" for n in range(loops) for i in range(TASKS // loops)]
        check_rows(ledger, keys, returned)
        assert executors.count == 1  # the ledger's database threads, made once
    finally:
        ledger.close()
    assert _rows(backend, sql) == TASKS
    assert pools.count == (1 if database_record(backend).pooled else 0)
    assert settled_connections(backend, db_url, sql) == 0


def _rows(backend: str, sql: Callable[[str], list[tuple[Any, ...]]]) -> int:
    """The rows committed, each payload sealed."""
    payloads = [str(payload) for (payload,) in sql("SELECT payload FROM denpyo_submissions")]
    assert all("denpyo:sealed" in payload for payload in payloads)
    return len(payloads)
