"""The webhooks app (denpyo.webhooks) on every backend: each provider's event, signed
as the provider signs it, settles the row it names before the answer; a synced row
gets the event in its history (and an alert for a bounce or a dispute); an event
naming no row is listed by the audit; a second delivery is recorded once; anything
forged, unsigned, stale or unparseable is refused with 400 and every table is left
as it was."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

import denpyo
from denpyo import Status, Submission
from denpyo.channels._keys import ses_tag_value
from denpyo.domain.moves import Move
from denpyo.webhooks import create_app
from webhook_signing import (
    SNS_TOPIC,
    STRIPE_SECRET,
    TWILIO_TOKEN,
    TWILIO_URL,
    SendGridKey,
    SnsSigner,
    stripe_request,
    twilio_request,
)

SQL = Callable[[str], list[tuple[Any, ...]]]
TABLES = (
    "denpyo_submissions",
    "denpyo_events",
    "denpyo_provider_events",
    "denpyo_keys",
    "denpyo_channels",
    "denpyo_channel_events",
    "denpyo_actions",
    "denpyo_action_rows",
)


class Hooks:
    """A ledger with a channel `c`, the webhooks app over it, and the signers."""

    def __init__(self, ledger: denpyo.Ledger) -> None:
        self.ledger = ledger
        self.alerts: list[denpyo.Alert] = []
        ledger.on_alert(self.alerts.append)
        ledger.channel("c", list_remote=lambda since, until: [])(lambda sub: f"sent-{sub.key}")
        self.sendgrid = SendGridKey()
        self.sns = SnsSigner()
        app = create_app(
            ledger,
            stripe_secret=STRIPE_SECRET,
            sendgrid_public_key=self.sendgrid.public,
            twilio_auth_token=TWILIO_TOKEN,
            twilio_url=TWILIO_URL,
            sns_topics=[SNS_TOPIC],
            sns_fetcher=self.sns.fetch,
        )
        self.client = TestClient(app)

    def post(self, route: str, request: tuple[bytes, dict[str, str]]) -> int:
        body, headers = request
        return self.client.post(route, content=body, headers=headers).status_code

    def in_doubt(self, key: str) -> Submission:
        """A row a crash left `requesting`, its lease run out."""
        self.ledger.enqueue("c", key, {"email": "ann@example.com"})
        [held] = self.ledger.store.claim("c", holder="crashed", limit=1, lease=60)
        [moved] = self.ledger.store.move(
            [
                Move(
                    held.id,
                    Status.REQUESTING,
                    Status.REQUESTING,
                    "dead",
                    holder="crashed",
                    new_holder="crashed",
                    lease=0,
                    retry_in=0,
                    keep_error=True,
                )
            ]
        )
        assert moved is not None and moved.in_doubt
        return moved

    def now(self, key: str) -> Submission:
        sub = self.ledger.get("c", key)
        assert sub is not None
        return sub


@pytest.fixture
def hooks(ledger: denpyo.Ledger) -> Iterator[Hooks]:
    made = Hooks(ledger)
    with made.client:
        yield made


def _confirmed(hooks: Hooks, sub: Submission, remote_id: str, said: str) -> None:
    """Right after the 200: synced with the provider's id, by a verify-like move."""
    after = hooks.now(sub.key)
    assert after.status is Status.SYNCED and after.remote_id == remote_id
    last = hooks.ledger.events(sub.id)[-1]
    assert (last.kind, last.from_status, last.to_status) == (
        "verify",
        Status.REQUESTING,
        Status.SYNCED,
    )
    assert last.detail is not None
    assert last.detail.startswith(f"confirmed by the provider's webhook ({said}")


# -- a row in doubt becomes synced, by each provider ------------------------------------


def test_stripe_settles_a_row_in_doubt_by_its_key(hooks: Hooks) -> None:
    sub = hooks.in_doubt("order:1")
    obj = {
        "id": "pi_1",
        "object": "payment_intent",
        "metadata": {"denpyo_key": sub.idempotency_key},
    }
    assert hooks.post("/stripe", stripe_request("evt_1", "payment_intent.succeeded", obj)) == 200
    _confirmed(hooks, sub, "pi_1", "stripe event evt_1")


def test_sendgrid_settles_a_row_in_doubt_by_its_key(hooks: Hooks) -> None:
    sub = hooks.in_doubt("mail:1")
    event = {
        "sg_event_id": "sg-1",
        "event": "delivered",
        "denpyo_key": sub.idempotency_key,
        "sg_message_id": "msg14.filter0001.16648.5515E0B88.0",
        "email": "ann@example.com",
    }
    assert hooks.post("/sendgrid", hooks.sendgrid.request([event])) == 200
    _confirmed(hooks, sub, "msg14", "sendgrid event sg-1")


def test_twilio_settles_a_failed_row_by_its_sid(hooks: Hooks) -> None:
    hooks.ledger.channel("sms", max_attempts=1)(lambda sub: "SMabc")
    hooks.ledger.enqueue("sms", "k", {})
    [held] = hooks.ledger.store.claim("sms", holder="w", limit=1, lease=60)
    from denpyo.domain.moves import Settle

    [failed] = hooks.ledger.store.move(
        [Settle(held, "w", Status.FAILED, remote_id="SMabc", last_error="timed out")]
    )
    assert failed is not None and failed.status is Status.FAILED
    params = {"MessageSid": "SMabc", "MessageStatus": "delivered", "AccountSid": "AC1"}
    assert hooks.post("/twilio", twilio_request(params)) == 200
    after = hooks.ledger.get("sms", "k")
    assert after is not None and after.status is Status.SYNCED and after.remote_id == "SMabc"


@pytest.mark.parametrize("version", ["1", "2"])
def test_ses_by_sns_settles_a_row_in_doubt_by_its_tag(hooks: Hooks, version: str) -> None:
    sub = hooks.in_doubt("ses:1")
    request = hooks.sns.ses_request(
        "sns-1",
        "Delivery",
        ses_id="ses-msg-1",
        tag=ses_tag_value(sub.idempotency_key),
        version=version,
    )
    assert hooks.post("/sns", request) == 200
    _confirmed(hooks, sub, "ses-msg-1", "ses event sns-1")


def test_an_sns_notification_of_a_published_message_settles_its_row(hooks: Hooks) -> None:
    sub = hooks.in_doubt("sns:1")
    attributes = {"denpyo_key": {"Type": "String", "Value": sub.idempotency_key}}
    message = hooks.sns.message("sns-pub-1", "hello", extra={"MessageAttributes": attributes})
    assert hooks.post("/sns", (json.dumps(message).encode(), {})) == 200
    _confirmed(hooks, sub, "sns-pub-1", "sns event sns-pub-1")


# -- a synced row: history, and an alert for trouble -------------------------------------


def test_a_bounce_on_a_synced_row_is_in_its_history_and_alerts(hooks: Hooks) -> None:
    sub = hooks.ledger.submit("c", "mail:2", {"email": "bob@example.com"})
    assert sub.status is Status.SYNCED and sub.remote_id == "sent-mail:2"
    bounce = {"bounce": {"bounceType": "Permanent", "bounceSubType": "General"}}
    request = hooks.sns.ses_request("sns-2", "Bounce", ses_id="sent-mail:2", detail=bounce)
    assert hooks.post("/sns", request) == 200
    after = hooks.now("mail:2")
    assert after.status is Status.SYNCED
    last = hooks.ledger.events(sub.id)[-1]
    assert (last.kind, last.to_status, last.actor) == ("provider", Status.SYNCED, "webhook:ses")
    assert last.detail == (
        "Bounce, told by the provider's webhook (ses event sns-2): Permanent: General"
    )
    assert [a.reason for a in hooks.alerts] == ["provider_reported"]


def test_a_dispute_on_a_synced_charge_alerts(hooks: Hooks) -> None:
    hooks.ledger.channel("charge")(lambda sub: "pi_9")
    sub = hooks.ledger.submit("charge", "order:9", {"amount": 100})
    dispute = {"id": "dp_1", "object": "dispute", "payment_intent": "pi_9", "reason": "fraudulent"}
    assert hooks.post("/stripe", stripe_request("evt_9", "charge.dispute.created", dispute)) == 200
    after = hooks.ledger.get("charge", "order:9")
    assert after is not None and after.status is Status.SYNCED
    assert hooks.ledger.events(sub.id)[-1].detail == (
        "charge.dispute.created, told by the provider's webhook (stripe event evt_9): fraudulent"
    )
    assert [a.reason for a in hooks.alerts] == ["provider_reported"]


def test_a_delivery_on_a_synced_row_raises_no_alert(hooks: Hooks) -> None:
    sub = hooks.ledger.submit("c", "mail:3", {})
    params = {"MessageSid": "sent-mail:3", "MessageStatus": "delivered"}
    assert hooks.post("/twilio", twilio_request(params)) == 200
    assert hooks.ledger.events(sub.id)[-1].kind == "provider" and not hooks.alerts


# -- an unknown event, a second delivery -------------------------------------------------


def test_an_event_naming_no_row_is_listed_by_the_audit(hooks: Hooks) -> None:
    obj = {"id": "re_404", "object": "refund", "metadata": {"denpyo_key": "not-ours"}}
    assert hooks.post("/stripe", stripe_request("evt_404", "refund.created", obj)) == 200
    now = hooks.ledger.store.now()
    report = hooks.ledger.audit("c", since=now - timedelta(hours=1), until=now)
    [unknown] = report.unknown_events
    assert (unknown.provider, unknown.event_id, unknown.remote_id) == (
        "stripe",
        "evt_404",
        "re_404",
    )


def test_the_same_event_delivered_twice_is_recorded_once(hooks: Hooks, sql: SQL) -> None:
    sub = hooks.in_doubt("order:2")
    obj = {
        "id": "pi_2",
        "object": "payment_intent",
        "metadata": {"denpyo_key": sub.idempotency_key},
    }
    for _ in range(2):  # signed anew each time, as Stripe does
        request = stripe_request("evt_2", "payment_intent.succeeded", obj)
        assert hooks.post("/stripe", request) == 200
    assert sql("SELECT COUNT(*) FROM denpyo_provider_events")[0][0] == 1
    moves = [e for e in hooks.ledger.events(sub.id) if e.to_status is Status.SYNCED]
    assert len(moves) == 1


# -- refused: 400 and nothing written ----------------------------------------------------


def _dump(sql: SQL) -> list[list[tuple[Any, ...]]]:
    return [sorted(map(repr, sql(f"SELECT * FROM {table}"))) for table in TABLES]  # type: ignore[misc]


def _refusals(hooks: Hooks, sub: Submission) -> list[tuple[str, tuple[bytes, dict[str, str]]]]:
    key = sub.idempotency_key
    pi = {"id": "pi_x", "object": "payment_intent", "metadata": {"denpyo_key": key}}
    good_body, good_headers = stripe_request("evt_x", "payment_intent.succeeded", pi)
    other = SendGridKey()
    sg_event = [{"sg_event_id": "sg-x", "event": "delivered", "denpyo_key": key}]
    sg_body, sg_headers = hooks.sendgrid.request(sg_event)
    sms = {"MessageSid": "SMx", "MessageStatus": "delivered"}
    ses = hooks.sns.ses_request("sns-x", "Delivery", ses_id="x", tag=key)
    ses_message = json.loads(ses[0])
    an_hour_ago = int(time.time()) - 3600
    forged_cert = {**ses_message, "SigningCertURL": "https://evil.example.com/c.pem"}
    return [
        ("/stripe", (good_body, {})),  # unsigned
        ("/stripe", stripe_request("evt_x", "payment_intent.succeeded", pi, secret="whsec_other")),
        ("/stripe", stripe_request("evt_x", "payment_intent.succeeded", pi, at=an_hour_ago)),
        ("/stripe", (good_body.replace(b"pi_x", b"pi_y"), good_headers)),  # altered
        ("/stripe", (b"not json", {"Stripe-Signature": "t=1,v1=00"})),
        ("/sendgrid", other.request(sg_event)),  # another key
        ("/sendgrid", hooks.sendgrid.request(sg_event, at=an_hour_ago)),  # stale
        ("/sendgrid", (sg_body, {})),  # unsigned
        ("/sendgrid", (sg_body + b" ", sg_headers)),  # altered
        ("/twilio", twilio_request(sms, token="another-token")),
        ("/twilio", twilio_request(sms, url="https://elsewhere.example.com/twilio")),
        ("/twilio", (b"MessageSid=SMx&MessageStatus=delivered", {})),  # unsigned
        ("/sns", (json.dumps({**ses_message, "Message": "{}"}).encode(), {})),  # altered
        ("/sns", (json.dumps({**ses_message, "TopicArn": "arn:aws:sns:x:1:other"}).encode(), {})),
        ("/sns", (json.dumps(forged_cert).encode(), {})),
        ("/sns", (json.dumps({**ses_message, "SignatureVersion": "3"}).encode(), {})),
        ("/sns", (b"[1, 2", {})),
    ]


def test_anything_not_signed_by_the_provider_is_refused_and_changes_nothing(
    hooks: Hooks, sql: SQL
) -> None:
    sub = hooks.in_doubt("order:x")
    before = _dump(sql)
    for route, request in _refusals(hooks, sub):
        assert hooks.post(route, request) == 400, route
    assert _dump(sql) == before
    assert hooks.now("order:x").status is Status.REQUESTING
    assert hooks.sns.fetched == [
        "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-test.pem"
    ]  # never the forged certificate URL


def test_an_sns_subscription_is_confirmed_only_when_asked(ledger: denpyo.Ledger) -> None:
    signer = SnsSigner()
    for confirm in (False, True):
        app = create_app(
            ledger, sns_topics=[SNS_TOPIC], sns_fetcher=signer.fetch, sns_confirm=confirm
        )
        signer.fetched.clear()
        message = signer.message("sub-1", "confirm me", kind="SubscriptionConfirmation")
        with TestClient(app) as client:
            assert client.post("/sns", content=json.dumps(message)).status_code == 200
        confirmed = [url for url in signer.fetched if "ConfirmSubscription" in url]
        assert bool(confirmed) is confirm


def test_no_provider_configured_is_refused(ledger: denpyo.Ledger) -> None:
    with pytest.raises(denpyo.ConfigurationError, match="at least one provider"):
        create_app(ledger)
