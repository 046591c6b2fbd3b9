"""How a worker claims and runs one channel: calls at once, rows held ahead, and
the smallest claim worth a round trip.

Ready rows are claimed ahead, so that a call never waits for a claim's round trip.
A crash leaves every held row in doubt, its call begun or not: a channel that can
verify, or is idempotent, decides them by itself, so it claims well ahead; any other
leaves each one to a person, so it holds at most twice what runs (measured:
bench/CHANGES.md).
"""

from __future__ import annotations

from typing import NamedTuple

from denpyo.engine.channel import ChannelSpec

CLAIM_AHEAD = 128
"""Rows of a channel that can decide its in-doubt rows itself held ready or running:
three times what may run at once, and up to this many (at most 8 times). A claim
takes a few milliseconds on a busy loop; calls of a few milliseconds drained three
times the slots before it returned, and slots sat empty (measured: bench/CHANGES.md)."""


class Shape(NamedTuple):
    """How a worker claims and runs one channel (`shape_of`)."""

    cap: int  # calls at once
    ahead: int  # rows held, ready or running
    batch: int  # the smallest claim worth a round trip


def shape_of(spec: ChannelSpec, concurrency: int) -> Shape:
    """The channel's shape in a worker of `concurrency` lanes; the batch is up to
    half of the rows held (fewer claims per call)."""
    cap = min(spec.concurrency or concurrency, concurrency)
    if spec.fleet_concurrency is not None:
        # Every row held counts against the fleet's share: hold only what runs.
        cap = min(cap, spec.fleet_concurrency)
        return Shape(cap, cap, 1)
    if not spec.policy.decides_doubt:
        return Shape(cap, 2 * cap, max(1, cap // 2))
    ahead = max(3 * cap, min(8 * cap, CLAIM_AHEAD))
    # Up to half of it, while a slot-full stays ready as the claim goes out.
    return Shape(cap, ahead, min(ahead // 2, ahead - 2 * cap))
