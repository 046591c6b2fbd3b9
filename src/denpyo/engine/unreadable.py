"""A row whose payload this process cannot open (its key is not configured here, or
the ciphertext does not open for the row) is never sent: `Flows.attempt` gives it
back before its call, through `give_back_unreadable`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from denpyo.domain.alert import Alert
from denpyo.domain.moves import Move
from denpyo.domain.sealed import UNREADABLE_RETRY_IN, SealedPayload
from denpyo.domain.submission import Submission
from denpyo.domain.text import visible

if TYPE_CHECKING:
    from denpyo.engine.flows import Flow, Flows

log = logging.getLogger("denpyo.engine")

REASON = "payload_unreadable"
"""The alert's reason."""


def give_back_unreadable(flows: Flows, sub: Submission) -> Flow:
    """Give back a held row whose payload is a `SealedPayload`: unsent, its attempt not
    counted, unlocked, due again in `UNREADABLE_RETRY_IN` seconds (not at once: a
    backlog of such rows would spin), its last error saying why. The first time the
    row is found so (its last error said something else) there is one
    `payload_unreadable` alert, which is logged as a WARNING; each later look is an
    INFO line. A key configured again sends the row at its next look."""
    payload = sub.payload
    assert isinstance(payload, SealedPayload)
    why = f"not sent: {payload.why()}"
    first = sub.last_error != why
    move = Move.release(
        sub.id, sub.locked_by or "", why, retry_in=UNREADABLE_RETRY_IN, last_error=why
    )
    after = yield from flows._apply(move)
    if after is None:  # another sender took the row meanwhile: it is theirs
        return (yield from flows._reread(sub))
    minutes = round(UNREADABLE_RETRY_IN / 60)
    if first:
        flows.alerts.tell(
            Alert(REASON, f"{why}; a worker looks at it again every {minutes} minutes", after)
        )
    else:
        log.info(
            "%s:%s (id %s) not sent, again: %s; next look in %s minutes",
            visible(sub.channel), visible(sub.key), sub.id, why, minutes,
        )  # fmt: skip
    return after
