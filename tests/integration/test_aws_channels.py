"""The AWS channels with boto3 against moto's server (a real HTTP server speaking the
SQS, SNS and SES v2 APIs): a send is `synced` with the MessageId; a resend of the same
key within the window is dropped by SQS; a missing queue or topic and an unverified
sender are `rejected`, a stopped server `transient`; an answer lost after SQS accepted
is resent once and held once; SES carries the key as a tag and a row in doubt on SES
waits for a person. On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config

import denpyo
from denpyo import Status
from denpyo.channels.aws import FIFO_WINDOW, SesChannel, SnsFifoChannel, SqsFifoChannel
from denpyo.domain.status import ErrorKind
from denpyo.errors import ConfigurationError, SubmissionError
from moto_aws import Moto, moto_server
from waiting import wait_until

EMAIL = {
    "FromEmailAddress": "shop@example.com",
    "Destination": {"ToAddresses": ["customer@example.com"]},
    "Content": {
        "Simple": {"Subject": {"Data": "Your order"}, "Body": {"Text": {"Data": "Thanks"}}}
    },
}


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    with moto_server() as running:
        yield running


def answer_lost_once(client: Any, operation: str) -> None:
    """The first `operation` call reaches the server and is accepted, then its answer
    is lost (a read timeout): the call may have arrived, as far as the sender knows."""
    lost: list[bool] = []

    def lose(**_: Any) -> None:
        if not lost:
            lost.append(True)
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="moto")

    client.meta.events.register(f"after-call.{operation}", lose)


def submitted(ledger: denpyo.Ledger, channel: str, key: str, payload: Any) -> denpyo.Submission:
    """The row a submit ended with, whether it was synced or not."""
    try:
        return ledger.submit(channel, key, payload)
    except SubmissionError as ended:
        return ended.submission


# -- SQS FIFO ------------------------------------------------------------------------


def test_a_message_is_synced_with_its_message_id(moto: Moto, ledger: denpyo.Ledger) -> None:
    queue = SqsFifoChannel(moto.client("sqs"), moto.fifo_queue())
    ledger.add_channel("order-created", **queue.options)
    sent = ledger.submit("order-created", "order:1", {"order": 1, "total": "9.50"})
    [message] = moto.received(queue.queue_url)
    assert sent.status is Status.SYNCED and sent.remote_id == message["MessageId"]
    assert json.loads(message["Body"]) == {"order": 1, "total": "9.50"}
    attributes = message["Attributes"]
    assert attributes["MessageDeduplicationId"] == sent.idempotency_key
    assert attributes["MessageGroupId"] == "denpyo"
    assert message["MessageAttributes"]["denpyo_key"]["StringValue"] == sent.idempotency_key


def test_the_ordering_key_is_the_message_group(moto: Moto, ledger: denpyo.Ledger) -> None:
    queue = SqsFifoChannel(moto.client("sqs"), moto.fifo_queue(), group="orders")
    ledger.add_channel("order-created", **queue.options)
    ledger.submit("order-created", "order:1", {"n": 1}, ordering_key="customer:7")
    ledger.submit("order-created", "order:2", {"n": 2})
    ledger.submit("order-created", "order:3", {"n": 3}, ordering_key="customer 8")
    groups = {m["Attributes"]["MessageGroupId"] for m in moto.received(queue.queue_url)}
    # a key SQS refuses (a space) travels as its SHA-256, like a deduplication id
    assert groups == {"customer:7", "orders", hashlib.sha256(b"customer 8").hexdigest()}


def test_a_resend_of_the_same_key_within_the_window_is_dropped_by_sqs(
    moto: Moto, ledger: denpyo.Ledger
) -> None:
    queue = SqsFifoChannel(moto.client("sqs"), moto.fifo_queue())
    ledger.add_channel("order-created", **queue.options)
    sent = ledger.submit("order-created", "order:1", {"order": 1})
    assert queue.send(sent) and queue.send(sent)  # SQS accepts the copies...
    assert len(moto.received(queue.queue_url)) == 1  # ...and keeps one


def test_an_answer_lost_after_sqs_accepted_is_resent_and_held_once(
    moto: Moto, ledger: denpyo.Ledger
) -> None:
    client = moto.client("sqs")
    answer_lost_once(client, "sqs.SendMessage")
    queue = SqsFifoChannel(client, moto.fifo_queue())
    quick = denpyo.Backoff(initial=0.05, maximum=0.05)
    ledger.add_channel("order-created", **queue.options, backoff=quick)
    first = submitted(ledger, "order-created", "order:1", {"order": 1})
    assert first.status is Status.FAILED and first.in_doubt

    def synced() -> bool:
        ledger.reconcile()  # idempotent, within the window: resent under the same id
        sub = ledger.get("order-created", "order:1")
        return sub is not None and sub.status is Status.SYNCED

    wait_until(synced, "the row in doubt resent", every=0.05)
    [message] = moto.received(queue.queue_url)
    assert message["Attributes"]["MessageDeduplicationId"] == first.idempotency_key


def test_a_missing_queue_is_rejected(moto: Moto, ledger: denpyo.Ledger) -> None:
    gone = moto.fifo_queue()
    moto.client("sqs").delete_queue(QueueUrl=gone)
    queue = SqsFifoChannel(moto.client("sqs"), gone)
    ledger.add_channel("order-created", **queue.options)
    sent = submitted(ledger, "order-created", "order:1", {"order": 1})
    assert sent.status is Status.REJECTED
    assert sent.last_error is not None and "does not exist" in sent.last_error


def test_a_stopped_server_is_transient(ledger: denpyo.Ledger) -> None:
    with moto_server() as stopped:
        client, url = stopped.client("sqs"), stopped.fifo_queue()
    queue = SqsFifoChannel(client, url)
    ledger.add_channel("order-created", **queue.options)
    sent = submitted(ledger, "order-created", "order:1", {"order": 1})
    assert (sent.status, sent.error_kind, sent.in_doubt) == (
        Status.FAILED,
        ErrorKind.TRANSIENT,
        False,
    )


def test_the_options_say_idempotent_within_the_fifo_window() -> None:
    queue = SqsFifoChannel(object(), "https://sqs.example/1/q.fifo")
    assert queue.options == {
        "send": queue.send,
        "idempotent": True,
        "idempotency_window": 270.0,
    }
    assert FIFO_WINDOW < 300
    by_channel = SqsFifoChannel(object(), queue.queue_url, group=lambda sub: sub.channel)
    row = denpyo.Submission(1, "invoices", "k", "idem", {}, Status.REQUESTING)
    assert by_channel.ids(row) == {"MessageGroupId": "invoices", "MessageDeduplicationId": "idem"}
    with pytest.raises(ConfigurationError, match="FIFO queue"):
        SqsFifoChannel(object(), "https://sqs.example/1/q")
    with pytest.raises(ConfigurationError, match="at most the 300 s"):
        SqsFifoChannel(object(), "https://sqs.example/1/q.fifo", idempotency_window=600)


# -- SNS FIFO ------------------------------------------------------------------------


def fifo_topic_with_queue(moto: Moto) -> tuple[str, str]:
    """A FIFO topic and a FIFO queue subscribed to it (raw delivery)."""
    sns, queue_url = moto.client("sns"), moto.fifo_queue()
    topic = sns.create_topic(Name=queue_url.rsplit("/", 1)[1], Attributes={"FifoTopic": "true"})[
        "TopicArn"
    ]
    queue_arn = moto.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    return topic, queue_url


def test_sns_fifo_publishes_once_per_key(moto: Moto, ledger: denpyo.Ledger) -> None:
    topic_arn, queue_url = fifo_topic_with_queue(moto)
    topic = SnsFifoChannel(moto.client("sns"), topic_arn)
    ledger.add_channel("order-created", **topic.options)
    sent = ledger.submit("order-created", "order:1", {"order": 1})
    assert sent.status is Status.SYNCED and sent.remote_id
    topic.send(sent)  # a resend within the window: the subscriber gets one copy
    [message] = moto.received(queue_url)
    assert json.loads(message["Body"]) == {"order": 1}
    assert message["MessageAttributes"]["denpyo_key"]["StringValue"] == sent.idempotency_key


def test_a_missing_topic_is_rejected(moto: Moto, ledger: denpyo.Ledger) -> None:
    topic = SnsFifoChannel(moto.client("sns"), "arn:aws:sns:us-east-1:123456789012:none.fifo")
    ledger.add_channel("order-created", **topic.options)
    assert submitted(ledger, "order-created", "order:1", {"order": 1}).status is Status.REJECTED


# -- SES v2 --------------------------------------------------------------------------


def sent_bodies(client: Any) -> list[dict[str, Any]]:
    """The SendEmail requests as boto3 put them on the wire (moto's SES v2 keeps each
    message sent, but not its tags: the tag is checked in the request)."""
    bodies: list[dict[str, Any]] = []
    client.meta.events.register(
        "before-send.sesv2.SendEmail", lambda request, **_: bodies.append(json.loads(request.body))
    )
    return bodies


def sent_count(moto: Moto) -> int:
    return int(moto.client("ses").get_send_quota()["SentLast24Hours"])


def test_an_email_is_synced_with_its_message_id_and_tagged_with_its_key(
    moto: Moto, ledger: denpyo.Ledger
) -> None:
    moto.client("sesv2").create_email_identity(EmailIdentity="shop@example.com")
    client = moto.client("sesv2")
    bodies = sent_bodies(client)
    email = SesChannel(client, configuration_set="denpyo-events")
    ledger.add_channel("receipt", **email.options)
    before = sent_count(moto)
    sent = ledger.submit("receipt", "order:1", EMAIL)
    assert sent.status is Status.SYNCED and sent.remote_id
    assert sent_count(moto) == before + 1  # moto has it
    [body] = bodies
    assert body["EmailTags"] == [{"Name": "denpyo_key", "Value": sent.idempotency_key}]
    assert body["ConfigurationSetName"] == "denpyo-events"
    assert sent.payload == EMAIL  # the row keeps what was recorded


def test_an_unverified_sender_is_rejected(moto: Moto, ledger: denpyo.Ledger) -> None:
    email = SesChannel(moto.client("sesv2"), from_address="nobody@unverified.example")
    ledger.add_channel("receipt", **email.options)
    payload = {k: v for k, v in EMAIL.items() if k != "FromEmailAddress"}
    sent = submitted(ledger, "receipt", "order:1", payload)
    assert sent.status is Status.REJECTED
    assert sent.last_error is not None and "not verified" in sent.last_error


def test_an_email_in_doubt_waits_for_a_person_and_is_never_resent(
    moto: Moto, ledger: denpyo.Ledger
) -> None:
    moto.client("sesv2").create_email_identity(EmailIdentity="shop@example.com")
    client = moto.client("sesv2")
    answer_lost_once(client, "sesv2.SendEmail")
    email = SesChannel(client)
    alerts: list[denpyo.Alert] = []
    ledger.on_alert(alerts.append)
    ledger.add_channel("receipt", **email.options, lease=1.0)
    before = sent_count(moto)
    first = submitted(ledger, "receipt", "order:1", EMAIL)
    assert first.status is Status.FAILED and first.in_doubt
    for _ in range(2):
        ledger.reconcile()
        ledger.work(until_idle=True, poll_interval=0.01)
    sub = ledger.get("receipt", "order:1")
    assert sub is not None and sub.in_doubt and sub.status is Status.FAILED
    assert sent_count(moto) == before + 1  # one email, never a second
    assert "in_doubt" in [a.reason for a in alerts]


def test_ses_wants_a_client_that_does_not_retry(
    moto: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError, match="total_max_attempts"):
        SesChannel(moto.client("sesv2", Config()))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    SesChannel(moto.client("sesv2", Config()))  # boto3 reads the environment the same way
    email = SesChannel(moto.client("sesv2"))
    assert email.options == {"send": email.send, "idempotent": False}


def test_a_payload_that_is_not_an_object_is_rejected_unsent(
    moto: Moto, ledger: denpyo.Ledger
) -> None:
    email = SesChannel(moto.client("sesv2"))
    ledger.add_channel("receipt", **email.options)
    sent = submitted(ledger, "receipt", "order:1", ["not", "an", "object"])
    assert sent.status is Status.REJECTED and "nothing was sent" in (sent.last_error or "")
