"""What one `Worker.run()` did (`WorkReport`), and the rows one reconcile pass took
in doubt (`ReconcilePass`): counted by the worker, told to a person as it stops."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


def counts(counted: Counter[str]) -> str:
    """`name n, name n`, sorted, or `none`."""
    return ", ".join(f"{name} {n}" for name, n in sorted(counted.items())) or "none"


@dataclass(slots=True, eq=False)
class ReconcilePass:
    """The rows in doubt one round of claims took to verify (`Worker._claim_in_doubt`),
    per channel, and how each ended: logged once the last has."""

    taken: Counter[str]
    ended: Counter[str] = field(default_factory=Counter)

    def end(self, how: str) -> bool:
        """Count one row's end; True when it was the last."""
        self.ended[how] += 1
        return self.ended.total() == self.taken.total()


@dataclass
class WorkReport:
    """What one `work()` run did: `attempted`, rows whose attempt it began (a row given
    back before its call started included); `outcomes`, how its calls ended, by the
    status their settles recorded; `reconciled`, rows it took in doubt to verify, and
    `verified`, the status each of those ended in (`requesting`: still in doubt, or
    given back); `released`, rows given back before their call started (its lease ran
    out first, or the worker stopped); `errors`, flows that failed (their rows
    recovered when their leases end); `cut`, calls still on the wire when the grace
    of a stop ran out (each counted as an attempt, its row in doubt: `failed`,
    ambiguous, and in `outcomes`)."""

    attempted: int = 0
    reconciled: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    verified: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    released: int = 0
    cut: int = 0

    def summary(self) -> str:
        """One line for a person, as a worker stops."""
        line = (
            f"attempted {self.attempted}, outcomes: {counts(self.outcomes)}; reconciled "
            f"{self.reconciled}, verified: {counts(self.verified)}; released "
            f"{self.released}, errors {self.errors}"
        )
        if self.cut:
            line += (
                f"; cut {self.cut} call{'s' if self.cut != 1 else ''} on the wire at the end "
                "of the grace: their rows are in doubt and will be verified"
            )
        return line
