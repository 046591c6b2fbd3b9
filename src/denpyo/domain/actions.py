"""What people did, as the action log keeps it (`denpyo_actions`): pure, no I/O.

Every action a person takes (retry, abandon, resend, mark synced, pause, resume)
is one entry: who, when, why, what it named, and the rows behind it
(`denpyo_action_rows`, each with what happened to it). A bulk action is one
entry whose rows were frozen when it was made, carried out in batches; a
two-person rule turns an action into a *request* that waits for a second person.

    planned --confirm--> (awaiting_approval --approve-->) in_progress --(rows done)--> done
       |                      |                            |  ^
       +----------------------+--> declined or lapsed     pause  resume
                                                           v  |
    in_progress/paused --cancel--> cancelled              paused
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class ActionKind(StrEnum):
    """A person's action: on rows (the CLI's `retry` and `resolve`, the dashboard's
    buttons; `ROW_KINDS`, which domain/rules.py judges), on a channel, the erasure
    of payloads (`forget`: no move of a row, so neither a row kind nor a bulk kind;
    domain/forgetting.py), or old rows leaving the table (`prune`, `archive`)."""

    RETRY = "retry"
    ABANDON = "abandon"
    RESEND = "resend"
    MARK_SYNCED = "mark_synced"
    PAUSE = "pause"
    RESUME = "resume"
    FORGET = "forget"
    PRUNE = "prune"
    ARCHIVE = "archive"


ROW_KINDS = (ActionKind.RETRY, ActionKind.ABANDON, ActionKind.RESEND, ActionKind.MARK_SYNCED)
BULK_KINDS = (ActionKind.RETRY, ActionKind.ABANDON, ActionKind.RESEND)
"""What a bulk action over a filtered set may do."""


class Scope(StrEnum):
    """What an action names: rows by id, every row a filter found, a channel, or the
    table's rows retention lets go (a prune, an archive)."""

    ROWS = "rows"
    FILTER = "filter"
    CHANNEL = "channel"
    TABLE = "table"


class ActionState(StrEnum):
    PLANNED = "planned"
    """A bulk action's dry run: its rows frozen, waiting for its person to confirm."""
    AWAITING_APPROVAL = "awaiting_approval"
    DECLINED = "declined"
    LAPSED = "lapsed"
    IN_PROGRESS = "in_progress"
    PAUSED = "paused"
    DONE = "done"
    CANCELLED = "cancelled"

    @property
    def open(self) -> bool:
        """Still waiting for a person or for its rows."""
        return self in (
            ActionState.PLANNED,
            ActionState.AWAITING_APPROVAL,
            ActionState.IN_PROGRESS,
            ActionState.PAUSED,
        )


class RowOutcome(StrEnum):
    """What an action did to one of its rows."""

    DONE = "done"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One entry of the action log. `actor` is ``operator:<name>`` as in the rows'
    histories; `approver` the second person of a two-person rule; `params` what the
    action needs to be carried out (a note is in `note`); `plan` its dry run."""

    id: int
    kind: ActionKind
    scope: Scope
    target: str
    params: dict[str, Any]
    plan: dict[str, Any] | None
    state: ActionState
    actor: str
    note: str
    approver: str | None
    decision_note: str | None
    decided_at: datetime | None
    lapses_at: datetime | None
    total: int
    done: int
    skipped: int
    locked_by: str | None
    locked_until: datetime | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @property
    def pending(self) -> int:
        """Rows not yet done nor skipped."""
        return max(self.total - self.done - self.skipped, 0)

    @property
    def person(self) -> str:
        return person_of(self.actor)

    @property
    def approved_by(self) -> str | None:
        """The second person, once they approved (a decline names them too, in
        `approver`, with the state saying which)."""
        if self.approver is None or self.state in (
            ActionState.DECLINED,
            ActionState.AWAITING_APPROVAL,
        ):
            return None
        return person_of(self.approver)

    @property
    def details(self) -> list[str]:
        """What the action carries besides its kind and rows, in words."""
        found = []
        if self.params.get("remote_id"):
            found.append(f"the provider's id: {self.params['remote_id']}")
        if self.params.get("force_in_doubt"):
            found.append("forced: rows in doubt too (their call may have arrived)")
        if "payload" in self.params:
            found.append("with a corrected payload")
        if self.params.get("where"):
            found.append(
                f"the payloads whose {self.params['where']} had the value asked for "
                "(the value itself is not kept)"
            )
        return found

    @property
    def started(self) -> bool:
        """Past its dry run and its approval: its rows are being (or were) worked on."""
        return self.state not in (
            ActionState.PLANNED,
            ActionState.AWAITING_APPROVAL,
            ActionState.DECLINED,
            ActionState.LAPSED,
        ) and not (self.state is ActionState.CANCELLED and self.done + self.skipped == 0)

    @property
    def steers(self) -> list[str]:
        """What its person (or an admin) may do to it now: pause, resume, cancel."""
        return {
            ActionState.PLANNED: ["cancel"],
            ActionState.AWAITING_APPROVAL: ["cancel"],
            ActionState.IN_PROGRESS: ["pause", "cancel"],
            ActionState.PAUSED: ["resume", "cancel"],
        }.get(self.state, [])

    @property
    def decided_by(self) -> str | None:
        """The second person who approved or declined it."""
        return None if self.approver is None else person_of(self.approver)

    def describe(self) -> str:
        """One line: what, on what, and where it stands."""
        line = f"{self.kind} {self.target}: {self.state}"
        if self.total and self.state is not ActionState.AWAITING_APPROVAL:
            line += f", {self.done} done, {self.skipped} skipped of {self.total}"
        return line


@dataclass(frozen=True, slots=True)
class ActionRow:
    """One row behind an action, and what happened to it (None: not yet)."""

    action_id: int
    submission_id: int
    outcome: RowOutcome | None
    reason: str | None


def person_of(actor: str) -> str:
    """The person's name in an actor (``operator:alice`` -> ``alice``)."""
    return actor.split(":", 1)[1] if actor.startswith("operator:") else actor


def history_note(note: str, action_id: int, approver: str | None, *, bulk: bool) -> str:
    """The note a row's history keeps for a move an action made: the person's note,
    and, for a bulk action or an approved request, the action's number and the
    second person, so that the row's history names both people."""
    parts = [f"bulk action #{action_id}" if bulk else f"request #{action_id}"]
    if approver:
        parts.append(f"approved by {person_of(approver)}")
    elif not bulk:
        return note
    return f"{note} ({', '.join(parts)})"


DEFAULT_BULK_OVER = 100
DEFAULT_LAPSES_AFTER = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Approval:
    """A two-person rule: the actions that wait for a second person with the
    `approver` role (never the one who asked) before anything is written.

    By default: marking a row synced (a person says the provider has the call), a
    forced retry or resend of an in-doubt row (the call may have arrived: a second
    one may double its effect), and any bulk action over `bulk_over` rows. A request
    nobody decides lapses after `lapses_after` seconds.
    """

    mark_synced: bool = True
    forced: bool = True
    bulk_over: int | None = DEFAULT_BULK_OVER
    lapses_after: float = DEFAULT_LAPSES_AFTER

    def __post_init__(self) -> None:
        if self.bulk_over is not None and self.bulk_over < 0:
            raise ValueError("bulk_over must be 0 or more (None: no rule for bulk actions)")
        if not self.lapses_after > 0:
            raise ValueError("lapses_after must be a number of seconds above 0")

    def reason(self, kind: ActionKind, *, rows: int, forced: bool, bulk: bool) -> str | None:
        """Why this action needs a second person, or None when it does not."""
        if kind is ActionKind.MARK_SYNCED and self.mark_synced:
            return "marking a row synced needs a second person"
        if forced and self.forced:
            return "a forced action on a row in doubt needs a second person"
        if bulk and self.bulk_over is not None and rows > self.bulk_over:
            return f"a bulk action over {self.bulk_over} rows needs a second person"
        return None
