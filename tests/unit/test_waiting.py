"""The tests' own wait (tests/waiting.py): it gives up on a stall, never on a slow
run that still moves."""

from __future__ import annotations

import time

import pytest

from waiting import wait_until


def test_a_wait_that_keeps_moving_outlasts_its_quiet_time() -> None:
    started = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - started

    wait_until(lambda: elapsed() > 1.5, "slow", moving=lambda: int(elapsed() / 0.05), quiet=1)
    assert elapsed() > 1.5


def test_a_wait_with_nothing_moving_fails_after_its_quiet_time() -> None:
    with pytest.raises(AssertionError, match="a stuck step: nothing moved for 0 s"):
        wait_until(lambda: False, "a stuck step", moving=lambda: 1, quiet=0.2, every=0.01)


def test_a_wait_fails_at_once_when_its_process_ended() -> None:
    with pytest.raises(AssertionError, match="a server: the process ended first"):
        wait_until(lambda: False, "a server", alive=lambda: False, quiet=3600)
