"""The webhooks page (docs/providers/webhooks.md) run as printed: the app mounted in
FastAPI, in Starlette and beside Django, each answering a signed event by settling a
row in doubt, and the library call for another provider's events; on every backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import denpyo
from denpyo import Status, Submission
from denpyo.channels._keys import ses_tag_value
from denpyo.domain.moves import Move
from denpyo.webhooks import _sns
from doc_pages import named
from webhook_signing import (
    SNS_TOPIC,
    STRIPE_SECRET,
    TWILIO_TOKEN,
    SendGridKey,
    SnsSigner,
    stripe_request,
    twilio_request,
)

PAGE = "providers/webhooks.md"
BLOCKS = named(PAGE, "webhooks")


def _in_doubt(ledger: denpyo.Ledger, key: str) -> Submission:
    ledger.enqueue("c", key, {})
    [held] = ledger.store.claim("c", holder="crashed", limit=1, lease=60)
    [moved] = ledger.store.move(
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
    assert moved is not None
    return moved


def _run(block: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(block, f"{PAGE}:{block[:20]}", "exec"), namespace)
    namespace["ledger"].channel("c")(lambda sub: "never-called")
    return namespace


def _synced(ledger: denpyo.Ledger, key: str, remote_id: str) -> None:
    sub = ledger.get("c", key)
    assert sub is not None and sub.status is Status.SYNCED and sub.remote_id == remote_id
    ledger.close()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, db_url: str) -> pytest.MonkeyPatch:
    monkeypatch.setenv("DATABASE_URL", db_url)
    return monkeypatch


def test_mounted_in_fastapi(env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    env.setenv("STRIPE_WEBHOOK_SECRET", STRIPE_SECRET)
    page = _run(BLOCKS["fastapi"])
    sub = _in_doubt(page["ledger"], "order:1")
    obj = {
        "id": "pi_1",
        "object": "payment_intent",
        "metadata": {"denpyo_key": sub.idempotency_key},
    }
    body, headers = stripe_request("evt_1", "payment_intent.succeeded", obj)
    with TestClient(page["app"]) as client:
        assert client.post("/webhooks/stripe", content=body, headers=headers).status_code == 200
    _synced(page["ledger"], "order:1", "pi_1")


def test_mounted_in_starlette(env: pytest.MonkeyPatch) -> None:
    key = SendGridKey()
    env.setenv("SENDGRID_WEBHOOK_KEY", key.public)
    env.setenv("TWILIO_AUTH_TOKEN", TWILIO_TOKEN)
    page = _run(BLOCKS["starlette"])
    sub = _in_doubt(page["ledger"], "mail:1")
    event = {
        "sg_event_id": "sg-1",
        "event": "processed",
        "denpyo_key": sub.idempotency_key,
        "sg_message_id": "abc.filter1",
    }
    with TestClient(page["app"]) as client:
        body, headers = key.request([event])
        assert client.post("/webhooks/sendgrid", content=body, headers=headers).status_code == 200
        sms = {"MessageSid": "SM1", "MessageStatus": "sent"}
        body, headers = twilio_request(sms, url="https://your.host/webhooks/twilio")
        assert client.post("/webhooks/twilio", content=body, headers=headers).status_code == 200
    _synced(page["ledger"], "mail:1", "abc")


def test_beside_django(env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("django")
    # The example shop's settings, as tests/integration/test_django.py sets Django up.
    shop = Path(__file__).resolve().parents[2] / "examples" / "django_shop"
    env.syspath_prepend(str(shop))
    env.setenv("DJANGO_SETTINGS_MODULE", "shop_site.settings")
    signer = SnsSigner()
    env.setattr(_sns, "fetch", signer.fetch)  # no network: the test's certificate
    env.setenv("SES_EVENTS_TOPIC_ARN", SNS_TOPIC)
    page = _run(BLOCKS["django"])
    sub = _in_doubt(page["ledger"], "ses:1")
    client = TestClient(page["application"])  # no lifespan: Django serves HTTP only
    confirm = signer.message("sub-1", "confirm", kind="SubscriptionConfirmation")
    assert client.post("/webhooks/sns", content=json.dumps(confirm)).status_code == 200
    assert any("ConfirmSubscription" in url for url in signer.fetched)
    body, headers = signer.ses_request(
        "sns-1", "Send", ses_id="ses-1", tag=ses_tag_value(sub.idempotency_key)
    )
    assert client.post("/webhooks/sns", content=body, headers=headers).status_code == 200
    _synced(page["ledger"], "ses:1", "ses-1")


def test_another_providers_events(
    ledger: denpyo.Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger.channel("c")(lambda sub: "never-called")
    sub = _in_doubt(ledger, "queue:1")
    exec(BLOCKS["library"], {"ledger": ledger, "sub": sub})
    assert capsys.readouterr().out == "True synced\n"
