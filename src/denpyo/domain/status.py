"""The four statuses of a submission and the moves between them."""

from __future__ import annotations

from enum import StrEnum

from denpyo.errors import TransitionNotAllowed


class Status(StrEnum):
    """Where a submission stands. The same set is a CHECK constraint in every schema.

    - ``requesting``: decided to send, arrival not yet known. In: created by
      submit/enqueue; a retry of a `failed` row; an in-doubt row resent. Out: the
      sender settles it. A crash here leaves the row `requesting` with a lease
      that runs out: it is then *in doubt* and the reconciler verifies it.
    - ``synced``: the provider accepted and the ledger recorded its id. Final.
    - ``failed``: a transient or ambiguous failure. In: the sender's settle.
      Out: a worker retries after back-off (an ambiguous failure is verified
      first), or verify finds it arrived (`synced`). After `max_attempts` it stays
      here with no next attempt and an alert. A crash leaves nothing half-done:
      the settle is one atomic update.
    - ``rejected``: refused on business grounds. Final for the engine; a person
      abandons it with a note or resends it as a new, linked submission.
    """

    REQUESTING = "requesting"
    SYNCED = "synced"
    FAILED = "failed"
    REJECTED = "rejected"


STATUSES: dict[str, Status] = {status.value: status for status in Status}
"""A status by its stored text: a dict lookup, where `Status(text)` runs the enum's
machinery (rows are read on the hot path)."""


class ErrorKind(StrEnum):
    """Why the last attempt did not end `synced`."""

    TRANSIENT = "transient"  # the provider did not act; safe to resend
    AMBIGUOUS = "ambiguous"  # the request may have arrived; verify before any resend
    REJECTED = "rejected"  # a business refusal


ERROR_KINDS: dict[str, ErrorKind] = {kind.value: kind for kind in ErrorKind}
"""An error kind by its stored text (as `STATUSES`)."""


ALLOWED_MOVES: frozenset[tuple[Status, Status]] = frozenset(
    {
        (Status.REQUESTING, Status.SYNCED),
        (Status.REQUESTING, Status.FAILED),
        (Status.REQUESTING, Status.REJECTED),
        (Status.REQUESTING, Status.REQUESTING),  # in doubt, never arrived: attempted again
        (Status.FAILED, Status.REQUESTING),  # a retry
        (Status.FAILED, Status.SYNCED),  # verify or a person found the call arrived
    }
)

FINAL = frozenset({Status.SYNCED, Status.REJECTED})


def check_move(current: Status | str, target: Status | str) -> None:
    """Raise `TransitionNotAllowed` unless `ALLOWED_MOVES` has `current -> target`."""
    move = (Status(current), Status(target))
    if move not in ALLOWED_MOVES:
        raise TransitionNotAllowed(f"a submission cannot move from {move[0]} to {move[1]}")
