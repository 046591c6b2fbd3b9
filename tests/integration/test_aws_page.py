"""docs/providers/aws.md: each block runs as printed, with boto3 pointed at moto's
server by the environment (AWS_ENDPOINT_URL, dummy credentials), on every database."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import denpyo
from denpyo import Status
from doc_pages import named
from moto_aws import Moto, moto_server

PAGE = "providers/aws.md"
REGION = "eu-west-1"  # the page's


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    with moto_server() as running:
        running.reset()
        monkeypatch.setenv("AWS_ENDPOINT_URL", running.url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        yield running


def orders_queue(moto: Moto) -> str:
    made = moto.client("sqs", region=REGION).create_queue(
        QueueName="orders.fifo", Attributes={"FifoQueue": "true"}
    )
    return str(made["QueueUrl"])


def test_the_sqs_block(moto: Moto, ledger: denpyo.Ledger) -> None:
    queue_url = orders_queue(moto)
    exec(named(PAGE, "aws")["sqs"], {"ledger": ledger})
    sub = ledger.get("order-created", "order:42")
    [message] = moto.received(queue_url, REGION)
    assert sub is not None and sub.status is Status.SYNCED
    assert sub.remote_id == message["MessageId"]
    assert json.loads(message["Body"]) == {"order": 42, "total": "99.00"}


def test_the_sns_block(moto: Moto, ledger: denpyo.Ledger) -> None:
    queue_url = orders_queue(moto)
    sns, sqs = moto.client("sns", region=REGION), moto.client("sqs", region=REGION)
    topic = sns.create_topic(Name="orders.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=arn["Attributes"]["QueueArn"],
        Attributes={"RawMessageDelivery": "true"},
    )
    exec(named(PAGE, "aws")["sns"], {"ledger": ledger})
    sub = ledger.get("order-published", "order:42")
    assert sub is not None and sub.status is Status.SYNCED and sub.remote_id
    [message] = moto.received(queue_url, REGION)
    assert message["MessageAttributes"]["denpyo_key"]["StringValue"] == sub.idempotency_key


def test_the_ses_block(moto: Moto, ledger: denpyo.Ledger) -> None:
    moto.client("sesv2", region=REGION).create_email_identity(EmailIdentity="shop@example.com")
    exec(named(PAGE, "aws")["ses"], {"ledger": ledger})
    sub = ledger.get("receipt", "order:42")
    assert sub is not None and sub.status is Status.SYNCED and sub.remote_id
    assert moto.client("ses", region=REGION).get_send_quota()["SentLast24Hours"] == 1
