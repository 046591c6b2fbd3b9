"""A ledger with one row of every kind a person meets, for the dashboard's tests."""

from __future__ import annotations

from typing import Any

import denpyo

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
    for name, outcome in (("rejected", "rejected"), ("exhausted", "transient"),
                          ("doubt", "ambiguous"), ("rejected2", "rejected")):  # fmt: skip
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
