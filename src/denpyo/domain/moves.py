"""The changes the store applies to a row, each one compare-and-set with its event.

- `Move`: any change of a row's state (a claim, a verify's verdict, a person's
  resolution), guarded by the status and holder it expects.
- `Settle`: the end of an attempt, by the holder that made it. It is the
  commonest write of all (every call ends in one), so it is a type of its own
  that the store writes by a statement of its own, knowing its shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from denpyo.domain.limits import storable_text
from denpyo.domain.policy import AttemptDecision
from denpyo.domain.status import ALLOWED_MOVES, ErrorKind, Status, check_move
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput

KEEPABLE = frozenset({Status.FAILED, Status.REJECTED})
_TEXT_FIELDS = ("remote_id", "last_error", "resolution", "detail")
_ENDS = frozenset({Status.SYNCED, Status.FAILED, Status.REJECTED})
"""How an attempt may end: the moves out of `requesting` but to itself."""


@dataclass(frozen=True, slots=True)
class Move:
    """Change one row from (`from_status`, held by `holder`) to a new state.

    The store applies it as a single UPDATE guarded by the expected status and
    lock holder, and writes the event row in the same transaction: if another
    process moved the row first, nothing changes and the caller learns it lost.
    `holder=None` means "nobody holds a live lease on the row". A row a
    person resolved is final for the engine: of the moves on a row nobody holds,
    only one that writes a resolution itself (a person's) applies to it, so a
    claim, a submit or a retry that read the row before the person acted loses;
    a holder's settle needs its hold, which the person's resolution cleared.

    Leases are seconds from the database clock: `lease=None` clears the lock,
    `lease=0` expires it now (an in-doubt row stays recognisable), `lease>0`
    holds it; a held row's next step is due when the lease runs out, otherwise
    `retry_in` seconds from now (None: no automatic next step).

    `row` is the row as the mover read it, when it has it: a move never changes
    the payload, so the moved row takes the payload from it instead of reading
    it back and parsing it again (on the worker's hot path, measured: bench/CHANGES.md).
    """

    submission_id: int
    from_status: Status
    to_status: Status
    actor: str
    holder: str | None = None
    event: str | None = None  # the event kind to write; None writes none
    new_holder: str | None = None
    lease: float | None = None
    attempt_delta: int = 0
    retry_in: float | None = None
    remote_id: str | None = None
    keep_error: bool = False
    error_kind: ErrorKind | None = None
    last_error: str | None = None
    resolution: str | None = None
    detail: str | None = None
    duration_ms: int | None = None
    row: Submission | None = field(default=None, compare=False, repr=False)

    # -- the engine's moves ------------------------------------------------------------
    #
    # A lease of `seconds` > 0 holds the row for `holder`; `lease=0` sets `locked_until`
    # to now, an expired lease, so that an in-doubt `requesting` row stays recognisable
    # as one; `lease=None` clears it. These special values live here and nowhere else.

    @classmethod
    def claim(
        cls, submission_id: int, status: Status, holder: str, seconds: float, *, verify: bool
    ) -> Move:
        """A worker takes a due row: to send it (`requesting`, an `attempt` event: its
        next attempt may start, and counts once it has), or, in doubt, only to verify
        it (its status stays)."""
        return cls(
            submission_id,
            status,
            status if verify else Status.REQUESTING,
            holder,
            event=None if verify else "attempt",
            new_holder=holder,
            lease=seconds,
            keep_error=True,
        )

    @classmethod
    def take_to_verify(cls, sub: Submission, holder: str, seconds: float) -> Move:
        """An inline submit takes an in-doubt row of its key, to verify it first."""
        return cls(
            sub.id,
            sub.status,
            sub.status,
            holder,
            new_holder=holder,
            lease=seconds,
            keep_error=True,
            row=sub,
        )

    @classmethod
    def start_attempt(
        cls, sub: Submission, new_holder: str, seconds: float, note: str, holder: str | None
    ) -> Move:
        """The next attempt on a row: `requesting`, held by a fresh `new_holder` (from a
        row held by `holder`, or from one nobody holds); counted once its call started."""
        return cls(
            sub.id,
            sub.status,
            Status.REQUESTING,
            new_holder,
            holder=holder,
            event="attempt",
            new_holder=new_holder,
            lease=seconds,
            keep_error=True,
            detail=note,
            row=sub,
        )

    @classmethod
    def verified_delivered(
        cls, sub: Submission, actor: str, remote_id: str | None, note: str
    ) -> Move:
        """Verify found that the call arrived: `synced`, the remote id it found in the
        event too (the row's `remote_id` keeps only the latest). A `requesting` row's
        call was cut short (its sender gone before the settle): it started, so it is
        counted now; a failed one's was counted by its settle."""
        return cls(
            sub.id,
            sub.status,
            Status.SYNCED,
            actor,
            holder=sub.locked_by,
            event="verify",
            attempt_delta=1 if sub.status is Status.REQUESTING else 0,
            remote_id=remote_id,
            detail=note if remote_id is None else f"{note}, remote id {remote_id}",
            row=sub,
        )

    @classmethod
    def verified_given_up(cls, sub: Submission, actor: str, kind: ErrorKind, note: str) -> Move:
        """No more attempts after verify: `failed`, with no next step."""
        return cls(
            sub.id,
            sub.status,
            Status.FAILED,
            actor,
            holder=sub.locked_by,
            event="verify",
            error_kind=kind,
            last_error=note,
            detail=note,
            row=sub,
        )

    @classmethod
    def still_in_doubt(
        cls, sub: Submission, actor: str, retry_in: float | None, note: str, *, again: bool = False
    ) -> Move:
        """Verify could not tell (or a person must): the row stays in doubt, checked
        again in `retry_in` seconds (None: only a person moves it). `again`: it was
        held in doubt in this state before, whose history line stands: none is added."""
        return cls(
            sub.id,
            sub.status,
            sub.status,
            actor,
            holder=sub.locked_by,
            event=None if again else "verify",
            lease=0 if sub.status is Status.REQUESTING else None,
            retry_in=retry_in,
            keep_error=True,
            detail=note,
            row=sub,
        )

    @classmethod
    def release(
        cls,
        submission_id: int,
        holder: str,
        detail: str,
        *,
        retry_in: float = 0,
        last_error: str | None = None,
    ) -> Move:
        """Give back a row held for an attempt whose call never started: due again at
        once (or in `retry_in` seconds), unlocked (held by `holder` until now), nothing
        counted; its last error kept, or `last_error` in its place."""
        return cls(
            submission_id,
            Status.REQUESTING,
            Status.REQUESTING,
            holder,
            holder=holder,
            event="released",
            retry_in=retry_in,
            keep_error=last_error is None,
            last_error=last_error,
            detail=detail,
        )

    @classmethod
    def release_to_doubt(cls, submission_id: int, status: Status, holder: str) -> Move:
        """Give back a row held only to be verified: in doubt again, due for the next
        reconciler (a `requesting` row keeps an expired lease, so it stays recognisable)."""
        doubtful = status is Status.REQUESTING
        return cls(
            submission_id,
            status,
            status,
            holder,
            holder=holder,
            lease=0 if doubtful else None,
            retry_in=0,
            keep_error=True,
        )

    # -- a person's moves (nobody may hold a live lease on the row) ----------------------

    @classmethod
    def retry(cls, sub: Submission, actor: str, note: str) -> Move:
        """A `failed` row due at once, its error kept."""
        return cls(
            sub.id,
            Status.FAILED,
            Status.FAILED,
            actor,
            event="retry",
            retry_in=0,
            keep_error=True,
            detail=note,
        )

    @classmethod
    def forced_retry(cls, sub: Submission, actor: str, note: str) -> Move:
        """An in-doubt row a person checked: sent again under its key, not verified
        again. A `failed` one becomes transient; a `requesting` one loses its lock, so
        that to the claim it is "never attempted", due now (what a crash after the
        commit leaves too)."""
        if sub.status is Status.FAILED:
            return cls(
                sub.id,
                Status.FAILED,
                Status.FAILED,
                actor,
                event="retry",
                retry_in=0,
                error_kind=ErrorKind.TRANSIENT,
                last_error=sub.last_error,
                detail=note,
            )
        return cls(
            sub.id,
            Status.REQUESTING,
            Status.REQUESTING,
            actor,
            event="retry",
            retry_in=0,
            keep_error=True,
            detail=note,
        )

    @classmethod
    def give_up(
        cls,
        sub: Submission,
        actor: str,
        event: str,
        resolution: str,
        note: str,
        failure: tuple[ErrorKind, str] | None = None,
    ) -> Move:
        """End all automatic work on a row and record a person's resolution. A
        `requesting` row becomes `failed` with `failure` (its kind and error)."""
        if failure is None:
            return cls(
                sub.id,
                sub.status,
                sub.status,
                actor,
                event=event,
                keep_error=True,
                resolution=resolution,
                detail=note,
            )
        kind, error = failure
        return cls(
            sub.id,
            sub.status,
            Status.FAILED,
            actor,
            event=event,
            error_kind=kind,
            last_error=error,
            resolution=resolution,
            detail=note,
        )

    @classmethod
    def adopted(cls, sub: Submission, actor: str, remote_id: str | None, note: str) -> Move:
        """The audit found at the provider a call the ledger had lost (a failover) and
        records it, in the transaction that inserted its row: `synced`, its one call
        counted."""
        return cls(
            sub.id,
            Status.REQUESTING,
            Status.SYNCED,
            actor,
            event="adopted",
            attempt_delta=1,
            remote_id=remote_id,
            detail=note,
            row=sub,
        )

    @classmethod
    def mark_synced(
        cls, sub: Submission, actor: str, remote_id: str, resolution: str, note: str
    ) -> Move:
        """A person found the call at the provider, under `remote_id`."""
        return cls(
            sub.id,
            sub.status,
            Status.SYNCED,
            actor,
            event="mark_synced",
            remote_id=remote_id,
            resolution=resolution,
            detail=f"remote id {remote_id}: {note}",
        )

    def __post_init__(self) -> None:
        # Keeping `failed` or `rejected` while rewriting other fields (a deferred
        # check, a person's note) is not a move; everything else must be allowed.
        if (self.from_status, self.to_status) not in ALLOWED_MOVES and not (
            self.from_status == self.to_status and self.from_status in KEEPABLE
        ):
            check_move(self.from_status, self.to_status)  # raises, and says why
        # Text from outside (an exception's message, a remote id, a verdict) must
        # not make the store refuse the move: the outcome would be lost with it.
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                kept = storable_text(value)
                if kept is not value:
                    object.__setattr__(self, name, kept)
        if self.row is not None and self.row.id != self.submission_id:
            # Its payload would be handed back as this row's.
            raise InvalidInput(
                f"a move of submission {self.submission_id} was given submission "
                f"{self.row.id} as its row"
            )


@dataclass(frozen=True, slots=True)
class Settle:
    """Record how an attempt ended, on the row its holder holds: `requesting`, held by
    `row.locked_by`, moves to `to_status`, unlocked, its `attempts` one more (the call
    started: it ended), with a `settle` event whose detail is its error or remote id.
    If the holder lost the row meanwhile, nothing changes.

    `row` is the row as held: the settled row takes from it everything a settle
    does not change, so the store sends back only what the statement computed.
    """

    event: ClassVar[str] = "settle"
    from_status: ClassVar[Status] = Status.REQUESTING

    row: Submission
    actor: str
    to_status: Status
    retry_in: float | None = None
    remote_id: str | None = None
    error_kind: ErrorKind | None = None
    last_error: str | None = None
    duration_ms: int | None = None

    @classmethod
    def of(
        cls, sub: Submission, actor: str, decided: AttemptDecision, duration_ms: int | None
    ) -> Settle:
        """The settle of an attempt on `sub` as the policy decided it."""
        return cls(
            sub,
            actor,
            decided.status,
            decided.retry_in,
            decided.remote_id,
            decided.error_kind,
            decided.last_error,
            duration_ms,
        )

    @property
    def submission_id(self) -> int:
        return self.row.id

    def as_move(self) -> Move:
        """The same change as a general `Move`: what the settle statements are
        checked against, in the tests and bench/."""
        return Move(
            self.submission_id,
            Status.REQUESTING,
            self.to_status,
            self.actor,
            holder=self.holder,
            event=self.event,
            attempt_delta=1,
            retry_in=self.retry_in,
            remote_id=self.remote_id,
            error_kind=self.error_kind,
            last_error=self.last_error,
            detail=self.detail,
            duration_ms=self.duration_ms,
            row=self.row,
        )

    def uncounted(self) -> Move:
        """The same settle with its call not counted against the row: it failed while
        the channel's provider was down (domain/channel_state.py). Rare, so written
        as a general move, which says so in its event."""
        return replace(
            self.as_move(),
            attempt_delta=0,
            detail=f"not counted, the provider is down: {self.detail}",
        )

    @property
    def holder(self) -> str | None:
        return self.row.locked_by

    @property
    def detail(self) -> str | None:
        return self.last_error or self.remote_id

    def __post_init__(self) -> None:
        if self.to_status not in _ENDS:
            raise InvalidInput(
                f"an attempt ends synced, failed or rejected, not {self.to_status.value}"
            )
        if self.row.locked_by is None:
            raise InvalidInput(f"submission {self.row.id}: only its holder settles an attempt")
        for name in ("remote_id", "last_error"):
            value = getattr(self, name)
            if value is not None:
                kept = storable_text(value)
                if kept is not value:
                    object.__setattr__(self, name, kept)


Change = Move | Settle
"""What `Store.move` applies: each a compare-and-set with its event."""


def event_attempt(event: str, attempts: int) -> int:
    """The attempt number an event records, from the row's `attempts` after its change:
    that count (calls started), except in an `attempt` event, where a hold to send
    begins: the number its call takes if it starts (each database's statements that
    write events follow this rule)."""
    return attempts + 1 if event == "attempt" else attempts
