"""End to end, SES: an email sent by `SesChannel` to moto's server whose answer is lost
after SES accepted it is left in doubt; SES's event notification, signed by SNS and
posted to the webhooks app, names it by the ``denpyo_key`` tag the channel sent, and
right after the 200 the row is synced with SES's MessageId. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from test_aws_channels import EMAIL, answer_lost_once, sent_bodies

import denpyo
from denpyo import Status
from denpyo.channels._keys import FIELD, key_from_ses_tag, ses_tag_value
from denpyo.channels.aws import SesChannel
from denpyo.errors import SubmissionError
from denpyo.webhooks import create_app
from moto_aws import Moto, moto_server
from webhook_signing import SNS_TOPIC, SnsSigner


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The webhooks and the channel are the same code on every database; the store's
    part is run on every backend by tests/integration/store."""
    return str(request.param)


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    with moto_server() as running:
        yield running


def answered_ids(client: Any) -> list[str]:
    """The MessageId each SendEmail was answered with, as SES gave it (before the
    answer may be lost on its way to the channel)."""
    ids: list[str] = []
    client.meta.events.register(
        "after-call.sesv2.SendEmail", lambda parsed, **_: ids.append(parsed["MessageId"])
    )
    return ids


def test_an_email_in_doubt_is_synced_by_the_ses_event_that_names_its_tag(
    moto: Moto, ledger: denpyo.Ledger
) -> None:
    moto.client("sesv2").create_email_identity(EmailIdentity="shop@example.com")
    client = moto.client("sesv2")
    bodies = sent_bodies(client)
    answered = answered_ids(client)  # registered first: it sees the answer before it is lost
    answer_lost_once(client, "sesv2.SendEmail")
    ledger.add_channel("receipt", **SesChannel(client).options)
    with pytest.raises(SubmissionError) as raised:
        ledger.submit("receipt", "order:1", EMAIL)
    sub = raised.value.submission
    assert sub.status is Status.FAILED and sub.in_doubt and sub.remote_id is None
    [ses_id] = answered  # SES has the email, the channel never heard its id
    [body] = bodies
    [tag] = body["EmailTags"]
    assert tag["Name"] == FIELD and tag["Value"] == ses_tag_value(sub.idempotency_key)
    assert key_from_ses_tag(tag["Value"]) == sub.idempotency_key

    signer = SnsSigner()
    app = create_app(ledger, sns_topics=[SNS_TOPIC], sns_fetcher=signer.fetch)
    request_body, headers = signer.ses_request(
        "sns-delivery-1", "Delivery", ses_id=ses_id, tag=tag["Value"]
    )
    assert json.loads(json.loads(request_body)["Message"])["mail"]["tags"] == {
        FIELD: [tag["Value"]]
    }
    with TestClient(app) as web:
        answer = web.post("/sns", content=request_body, headers=headers)
        assert answer.status_code == 200, answer.text
        after = ledger.get("receipt", "order:1")  # right after the 200
    assert after is not None and after.status is Status.SYNCED and after.remote_id == ses_id
    assert not after.in_doubt and after.locked_by is None
    last = ledger.events(sub.id)[-1]
    assert (last.kind, last.from_status, last.to_status, last.actor) == (
        "verify",
        Status.FAILED,
        Status.SYNCED,
        "webhook:ses",
    )
    assert last.detail is not None and last.detail.startswith(
        "confirmed by the provider's webhook (ses event sns-delivery-1: Delivery)"
    )
    [told] = ledger.store.provider_events_of(sub.id)
    assert (told.provider, told.event_id, told.remote_id) == ("ses", "sns-delivery-1", ses_id)
