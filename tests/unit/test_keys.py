"""Idempotency keys: random version 4 UUIDs, never the same twice, not in threads and
not across a fork."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from denpyo.engine.keys import IdempotencyKeys


def test_keys_are_version_4_uuids_in_their_text_form() -> None:
    keys = IdempotencyKeys(batch=4)
    for _ in range(10):  # past two batches
        key = keys()
        parsed = uuid.UUID(key)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == key


def test_threads_never_share_a_key() -> None:
    keys = IdempotencyKeys(batch=8)
    drawn: list[list[str]] = [[] for _ in range(8)]

    def draw(into: list[str]) -> None:
        into.extend(keys() for _ in range(500))

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [key for into in drawn for key in into]
    assert len(set(every)) == len(every) == 4000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_does_not_repeat_its_parents_keys() -> None:
    keys = IdempotencyKeys(batch=64)
    keys()  # the parent holds a batch with 63 keys left
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next keys, to the parent
        os.close(read)
        os.write(write, "\n".join(keys() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs = set(pipe.read().split("\n"))
    os.waitpid(pid, 0)
    parents = {keys() for _ in range(63)}
    assert len(childs) == 10 and not childs & parents
