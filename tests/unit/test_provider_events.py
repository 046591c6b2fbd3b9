"""domain/provider_events.py: what a provider's event does to a row, decided without
a database."""

from __future__ import annotations

import pytest

from denpyo import Status, Submission
from denpyo.domain.provider_events import EVENT_ID_MAX, ProviderEvent, Received, confirming_move


def _row(status: Status, **fields: object) -> Submission:
    return Submission(7, "c", "k", "idem-7", {}, status, **fields)  # type: ignore[arg-type]


EVENT = ProviderEvent("stripe", "evt_1", "payment_intent.succeeded", remote_id="pi_1")


@pytest.mark.parametrize(
    ("row", "moves"),
    [
        (_row(Status.REQUESTING, attempts=1, locked_by="w/1", in_doubt=True), True),
        (_row(Status.REQUESTING, attempts=0), True),
        (_row(Status.FAILED, attempts=2), True),
        (_row(Status.FAILED, attempts=2, resolution="abandoned"), False),
        (_row(Status.SYNCED, attempts=1), False),
        (_row(Status.REJECTED, attempts=1), False),
    ],
)
def test_only_a_row_in_doubt_or_failed_and_unresolved_is_confirmed(
    row: Submission, moves: bool
) -> None:
    move = confirming_move(row, EVENT, "webhook:stripe")
    assert (move is not None) is moves
    if move is not None:  # a verify's Delivered, guarded by the holder read
        assert (move.to_status, move.event, move.holder, move.remote_id) == (
            Status.SYNCED,
            "verify",
            row.locked_by,
            "pi_1",
        )
        assert move.attempt_delta == (1 if row.status is Status.REQUESTING else 0)
        assert move.detail == (
            "confirmed by the provider's webhook (stripe event evt_1: "
            "payment_intent.succeeded), remote id pi_1"
        )


@pytest.mark.parametrize(
    ("kind", "alarming"),
    [
        ("Bounce", True),
        ("Complaint", True),
        ("charge.dispute.created", True),
        ("undelivered", True),
        ("failed", True),
        ("dropped", True),
        ("payment_intent.payment_failed", True),
        ("Delivery", False),
        ("open", False),
        ("charge.refunded", False),
        ("delivered", False),
    ],
)
def test_trouble_raises_an_alert(kind: str, alarming: bool) -> None:
    event = ProviderEvent("ses", "e", kind)
    assert event.alarming is alarming
    row = _row(Status.SYNCED)
    assert Received(event, row).alert is alarming
    assert not Received(event, row, duplicate=True).alert
    assert not Received(event, None).alert


def test_an_event_is_checked_and_cut_to_its_columns() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        ProviderEvent("paypal", "e", "k")
    with pytest.raises(ValueError, match="its id and its kind"):
        ProviderEvent("stripe", "", "k")
    long = ProviderEvent("stripe", "e" * 400, "k", idempotency_key="x" * 65)
    assert len(long.event_id) == EVENT_ID_MAX and long.idempotency_key is None


def test_the_history_line_names_the_event() -> None:
    assert EVENT.history_line(None) == (
        "payment_intent.succeeded, told by the provider's webhook (stripe event evt_1)"
    )
    assert EVENT.history_line("card declined").endswith(": card declined")
