"""`prune` and `archive` as a person runs them: each one entry of the action log
(who, the ages given, how many rows went, and for an archive where), and a dry
run that counts what would go and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from denpyo.domain.actions import ActionKind, ActionRecord, ActionState, Scope
from denpyo.domain.retention import Retention
from denpyo.engine.acting import operator_actor
from denpyo.store.actions import NewAction

if TYPE_CHECKING:
    from denpyo.engine.archiving import ArchiveReport
    from denpyo.engine.ledger import Ledger

T = TypeVar("T")


def removable_counts(ledger: Ledger, **ages: float) -> list[tuple[str, str, int]]:
    """What a prune or an archive with these ages (seconds) would remove now, per
    channel and status: [(channel, status, n)]. Nothing is written."""
    return ledger.store.count_removable(Retention.of(**ages))


@dataclass(frozen=True, slots=True)
class Keeping:
    """What a person asks of a prune or an archive: the ages in seconds (`older_than`,
    `synced`, `rejected`, `abandoned`), the same as typed (`shown`, for the log),
    who, why, and the rows per batch."""

    ages: dict[str, float]
    shown: str
    by: str | None = None
    note: str = ""
    batch_size: int = 1000


def prune(ledger: Ledger, asked: Keeping) -> ActionRecord:
    """`Ledger.prune`, logged: an entry of kind `prune` naming the ages, done with how
    many rows went."""
    return _logged(
        ledger,
        ActionKind.PRUNE,
        asked,
        {},
        lambda: ledger.prune(**asked.ages, batch_size=asked.batch_size),
        lambda n: n,
    )[1]


def archive(
    ledger: Ledger, to: str, asked: Keeping, progress: Callable[[int], None] | None = None
) -> tuple[ArchiveReport, ActionRecord]:
    """`Ledger.archive` to `to`, logged as `prune` is, with where the rows went."""
    return _logged(
        ledger,
        ActionKind.ARCHIVE,
        asked,
        {"to": to},
        lambda: ledger.archive(to, **asked.ages, batch_size=asked.batch_size, progress=progress),
        lambda report: report.rows,
    )


def _logged(
    ledger: Ledger,
    kind: ActionKind,
    asked: Keeping,
    more: dict[str, Any],
    work: Callable[[], T],
    removed: Callable[[T], int],
) -> tuple[T, ActionRecord]:
    """Run `work` behind an entry of the action log: written running before the
    first row goes (a run that dies leaves who started it), then done with how many
    rows went, or cancelled when it failed (and the error raised on)."""
    Retention.of(**asked.ages)  # refused ages write no entry
    target = f"settled rows, {asked.shown}" + (f", to {more['to']}" if "to" in more else "")
    entry = NewAction(
        kind,
        Scope.TABLE,
        target,
        operator_actor(asked.by),
        asked.note.strip(),
        params={"ages": asked.ages, **more},
    )
    record = ledger.store.add_action(entry)
    try:
        result = work()
    except BaseException:
        ledger.store.move_action(record.id, ActionState.CANCELLED, from_=(ActionState.IN_PROGRESS,))
        raise
    return result, ledger.store.counted(record.id, removed(result))
