"""Waiting in the tests: on progress, never on how fast the machine is.

A busy machine (other test runs, two CPU-bound processes beside the suite) makes
every step slower; a test that gives up at a fixed time after its start would
say the product is broken when only the machine is slow. So a wait ends when
what it waits for holds, and fails only when nothing has moved for `quiet`
seconds (or the process it waits on has ended): pytest's own timeout stops a
true hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable

QUIET = 120.0  # seconds with no progress at all before a wait gives up


def wait_until(
    done: Callable[[], bool],
    what: str,
    *,
    moving: Callable[[], object] | None = None,
    alive: Callable[[], bool] | None = None,
    quiet: float = QUIET,
    every: float = 0.05,
) -> None:
    """Wait until `done()` holds. `moving()`: a reading that changes while the work
    goes on (rows settled, calls made); the wait fails once it has not changed for
    `quiet` seconds (without it, `quiet` seconds from the start: a step that shows
    no progress of its own, such as a process starting). `alive()`: whether the
    process waited on still runs; the wait fails at once when it has ended."""
    seen = moving() if moving is not None else None
    since = time.monotonic()
    while not done():
        assert alive is None or alive(), f"{what}: the process ended first"
        if moving is not None and (now := moving()) != seen:
            seen, since = now, time.monotonic()
        assert time.monotonic() - since < quiet, f"{what}: nothing moved for {quiet:.0f} s"
        time.sleep(every)
