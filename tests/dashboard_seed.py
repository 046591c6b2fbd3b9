"""A ledger with one row of every kind a person meets, for the dashboard's tests."""

from __future__ import annotations

import json
from typing import Any

import denpyo
from denpyo.domain.moves import Move, Settle
from denpyo.domain.policy import AttemptDecision
from denpyo.engine import operator as op
from denpyo.store import NewSubmission

CHANNEL = "invoice-email"
SCRIPT = "<script>alert('pwned')</script>"
CARD = "4242 4242 4242 4242"


def payload(n: int, **extra: Any) -> dict[str, Any]:
    return {"to": f"customer{n}@example.com", "amount": 100 + n, **extra}


def seed(ledger: denpyo.Ledger, synced: int = 12) -> dict[str, int]:
    """Rows through the real engine: synced, rejected, exhausted, in doubt (an
    ambiguous failure), waiting, and one whose payload holds a script and a card
    number. Returns their ids by name."""

    @ledger.channel(CHANNEL, max_attempts=1)
    def send(sub: denpyo.Submission) -> str:
        outcome = sub.payload.get("outcome")
        if outcome == "rejected":
            raise denpyo.Rejected("550 no such mailbox")
        if outcome == "transient":
            raise denpyo.Transient("503 service unavailable")
        if outcome == "ambiguous":
            raise TimeoutError("read timed out after the request was sent")
        return f"msg_{sub.id:04}"

    ledger.channel("sms")(lambda sub: "sms-1")
    ids: dict[str, int] = {}
    for i in range(synced):
        ids[f"synced{i}"] = ledger.submit(CHANNEL, f"order:{100 + i}", payload(i)).id
    for name, outcome in (
        ("rejected", "rejected"),
        ("exhausted", "transient"),
        ("doubt", "ambiguous"),
        ("rejected2", "rejected"),
    ):
        try:
            extra = {"card_number": CARD} if name == "rejected" else {}
            ledger.submit(CHANNEL, f"order:{name}", payload(0, outcome=outcome, **extra))
        except denpyo.DenpyoError as exc:
            sub = getattr(exc, "submission", None)
            assert sub is not None
            ids[name] = sub.id
    ids["secret"] = ledger.submit(
        CHANNEL, "order:42", payload(42, note=SCRIPT, card_number=CARD)
    ).id
    ids["waiting"] = ledger.enqueue("sms", "user:7", {"text": "your code is 1234"}).id
    ledger.store.fold_outcomes(lag=0)
    return ids


STATES_CHANNEL = "states"
S, E = denpyo.Status, denpyo.ErrorKind
SETTLED = {
    "failed-due": AttemptDecision(S.FAILED, E.TRANSIENT, "503 try later", retry_in=3600),
    "failed-exhausted": AttemptDecision(S.FAILED, E.TRANSIENT, "503 try later", retry_in=None),
    "failed-ambiguous": AttemptDecision(S.FAILED, E.AMBIGUOUS, "read timed out", retry_in=3600),
    "rejected": AttemptDecision(S.REJECTED, E.REJECTED, "550 no such mailbox"),
    "synced": AttemptDecision(S.SYNCED, remote_id="msg_1"),
}
STATES = (
    "never-attempted",
    "in-flight",
    "in-doubt-requesting",
    "failed-due",
    "failed-exhausted",
    "failed-ambiguous",
    "rejected",
    "synced",
    "abandoned",
    "resent",
)


def row_in_state(ledger: denpyo.Ledger, state: str, key: str) -> int:
    """A new row (on a channel nobody sends) in one of STATES, as a sender, a crash or
    a person leaves it. Returns its id."""
    store = ledger.store
    body = json.dumps({"to": f"{key}@example.com"})
    new = NewSubmission(STATES_CHANNEL, key, f"idem-{key}", body)
    if state == "never-attempted":
        return store.record(new, actor="app")[0].id
    sub, _ = store.record(new, actor="worker/1", lease=3600)  # its first attempt, held
    if state == "in-flight":
        return sub.id
    if state == "in-doubt-requesting":  # the sender died: its lease has run out
        [moved] = store.move([Move.still_in_doubt(sub, "worker/1", 3600, "sender gone")])
        assert moved is not None and moved.in_doubt
        return moved.id
    base = {"abandoned": "failed-exhausted", "resent": "rejected"}.get(state, state)
    [moved] = store.move([Settle.of(sub, "worker/1", SETTLED[base], 5)])
    assert moved is not None
    if state == "abandoned":
        op.resolve_abandon(ledger, moved.id, note="the order was cancelled", by="bob")
    elif state == "resent":
        op.resolve_resend(ledger, moved.id, note="address fixed", by="bob")
    return moved.id
