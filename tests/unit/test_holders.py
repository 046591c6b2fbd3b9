"""Who holds a row: the holder's parts (domain/holders.py) and whether its process is
known to be gone (engine/holders.py)."""

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from denpyo.domain.holders import Holding, actor_of, by_actor, lease_left, process_of
from denpyo.engine.holders import holder_gone

HOST = socket.gethostname()


def test_a_holder_names_its_actor_host_and_process() -> None:
    assert actor_of("worker:h1:42:abc123/7") == "worker:h1:42:abc123"
    assert process_of("worker:h1:42:abc123/7") == ("h1", 42)
    assert process_of("app:my-service:abc123/1") is None  # a ledger named otherwise
    assert process_of("operator:ann") is None


def test_the_leases_left_are_read_by_the_database_clock() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    held = Holding("c", "w/1", 3, now + timedelta(seconds=5), now + timedelta(seconds=40), now)
    assert held.ends_in == (5.0, 40.0)
    assert lease_left(now - timedelta(seconds=2), now) == -2.0 and lease_left(None, now) is None


def test_only_a_process_of_this_host_that_no_longer_runs_is_gone() -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(ended.stdout)
    assert holder_gone(f"worker:{HOST}:{dead}:abc123/1")
    assert not holder_gone(f"worker:{HOST}:{os.getpid()}:abc123/1")  # this one runs
    assert not holder_gone(f"worker:another-{HOST}:{dead}:abc123/1")  # not known here
    assert not holder_gone("worker:named:abc123/1")


def test_the_claims_of_one_worker_are_told_as_one_holding() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def held(holder: str, rows: int, first: int, last: int, channel: str = "c") -> Holding:
        ends = (now + timedelta(seconds=first), now + timedelta(seconds=last))
        return Holding(channel, holder, rows, *ends, now)

    merged = by_actor(
        [
            held("w:h:1:a/1", 3, 5, 9),
            held("w:h:1:a/2", 2, 2, 12),
            held("w:h:2:b/1", 1, 4, 4),
            held("w:h:1:a/3", 1, 1, 1, "d"),
        ]
    )
    assert [(m.channel, m.holder, m.rows, m.ends_in) for m in merged] == [
        ("c", "w:h:1:a", 5, (2.0, 12.0)),
        ("c", "w:h:2:b", 1, (4.0, 4.0)),
        ("d", "w:h:1:a", 1, (1.0, 1.0)),
    ]
