"""Who holds rows now, and for how long: what `status`, `list`, `show` and a starting
worker say of rows being sent or verified. Pure: whether a holder's process still
runs is asked by the engine (engine/holders.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Holding:
    """The rows of one channel that one holder holds under a live lease: how many, and
    when the first and the last of their leases end, read at `now` (database clock).
    The rows of one claim share their holder."""

    channel: str
    holder: str
    rows: int
    first_end: datetime
    last_end: datetime
    now: datetime
    gone: bool = False
    """Its holder is known to be gone (told by the engine, which can ask: the store
    cannot)."""

    @property
    def ends_in(self) -> tuple[float, float]:
        """Seconds until the first and the last of the leases end."""
        return (self.first_end - self.now).total_seconds(), (
            self.last_end - self.now
        ).total_seconds()


def by_actor(holdings: Sequence[Holding]) -> list[Holding]:
    """The holdings of each channel and actor as one (a worker's claims each have a
    holder of their own), its holder written as the actor; the lease that ends last
    first."""
    merged: dict[tuple[str, str], Holding] = {}
    for held in holdings:
        key = (held.channel, actor_of(held.holder))
        seen = merged.get(key)
        merged[key] = (
            replace(held, holder=key[1])
            if seen is None
            else replace(
                seen,
                rows=seen.rows + held.rows,
                first_end=min(seen.first_end, held.first_end),
                last_end=max(seen.last_end, held.last_end),
            )
        )
    return sorted(merged.values(), key=lambda held: held.last_end, reverse=True)


def actor_of(holder: str) -> str:
    """The process or worker behind a holder (`worker:host:pid:abc123/7` → without
    its hold's number)."""
    return holder.rpartition("/")[0] or holder


def process_of(holder: str) -> tuple[str, int] | None:
    """The host and process id in a holder written as denpyo names its actors by
    default (`role:host:pid:suffix`, then `/n`); None for any other form (a ledger
    given a `name` of its own)."""
    parts = actor_of(holder).split(":")
    if len(parts) != 4 or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


def lease_left(locked_until: datetime | None, now: datetime) -> float | None:
    """Seconds until a lease ends by the database clock (negative: it ended; None: no
    lease)."""
    return None if locked_until is None else (locked_until - now).total_seconds()
