"""A `Move`: one compare-and-set update of a submission, as the store performs it."""

from __future__ import annotations

from dataclasses import dataclass, field

from denpyo.domain.status import ErrorKind, Status, check_move
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput

KEEPABLE = frozenset({Status.FAILED, Status.REJECTED})


@dataclass(frozen=True, slots=True)
class Move:
    """Change one row from (`from_status`, held by `expect_locked_by`) to a new state.

    The store applies it as a single UPDATE guarded by the expected status and
    lock holder, and writes the event row in the same transaction: if another
    process moved the row first, nothing changes and the caller learns it lost.
    `expect_locked_by=None` means "nobody holds a live lease on the row".

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
    expect_locked_by: str | None = None
    event: str | None = None  # the event kind to write; None writes none
    locked_by: str | None = None
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

    @classmethod
    def release(cls, submission_id: int, token: str, detail: str) -> Move:
        """Give back a row held for an attempt whose call never started: due again at
        once, its attempt undone, unlocked (held by `token` until now)."""
        return cls(
            submission_id, Status.REQUESTING, Status.REQUESTING, token, expect_locked_by=token,
            event="released", attempt_delta=-1, retry_in=0, keep_error=True, detail=detail,
        )  # fmt: skip

    @classmethod
    def unhold(cls, submission_id: int, status: Status, token: str) -> Move:
        """Give back a row held only to be verified: in doubt again, due for the next
        reconciler (a `requesting` row keeps an expired lease, so it stays recognisable)."""
        doubtful = status is Status.REQUESTING
        return cls(
            submission_id, status, status, token, expect_locked_by=token,
            lease=0 if doubtful else None, retry_in=0, keep_error=True,
        )  # fmt: skip

    def __post_init__(self) -> None:
        # Keeping `failed` or `rejected` while rewriting other fields (a deferred
        # check, a person's note) is not a move; everything else must be allowed.
        if not (self.from_status == self.to_status and self.from_status in KEEPABLE):
            check_move(self.from_status, self.to_status)
        if self.row is not None and self.row.id != self.submission_id:
            # Its payload would be handed back as this row's.
            raise InvalidInput(
                f"a move of submission {self.submission_id} was given submission "
                f"{self.row.id} as its row"
            )
