"""How long settled rows are kept, by state: pure, no I/O.

A row leaves the table (pruned, or archived and then deleted) only once nothing
more can happen to it without a person: `synced`; `rejected` or `failed` with a
person's resolution (abandoned, or resent as a new row). Rows still open, in
doubt, or waiting for a person are never removed, whatever their age. What a
removed row leaves behind (its key, its outcome, its place in the counts) is kept
in denpyo_keys and denpyo_removed_counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from denpyo.errors import InvalidInput

STATES = ("synced", "rejected", "abandoned")
"""The states retention is set for: synced rows; rejected rows a person resolved;
failed rows a person resolved (abandoned, or resent as a new row)."""


@dataclass(frozen=True, slots=True)
class Retention:
    """Seconds since its creation after which a row of each state may be removed
    (None: rows of that state are kept)."""

    synced: float | None = None
    rejected: float | None = None
    abandoned: float | None = None

    @classmethod
    def of(
        cls,
        *,
        older_than: float | None = None,
        synced: float | None = None,
        rejected: float | None = None,
        abandoned: float | None = None,
    ) -> Retention:
        """Per-state ages, `older_than` for each state not given; refused when none is
        given or one is negative (nothing is removed on a mistake)."""
        ages = {
            "synced": synced if synced is not None else older_than,
            "rejected": rejected if rejected is not None else older_than,
            "abandoned": abandoned if abandoned is not None else older_than,
        }
        if all(age is None for age in ages.values()):
            raise InvalidInput(
                "say how old a row must be to go: an age for every settled state "
                "(older_than) or for some of synced, rejected, abandoned"
            )
        for state, age in ages.items():
            if age is not None and (not isinstance(age, int | float) or age != age or age < 0):
                raise InvalidInput(f"the age for {state} rows must be >= 0 seconds, not {age!r}")
        return cls(**ages)

    @property
    def youngest(self) -> float:
        """The smallest age set: no row created since then is removed."""
        return min(age for age in (self.synced, self.rejected, self.abandoned) if age is not None)
