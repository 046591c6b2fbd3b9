"""A sender really killed (SIGKILL) after AWS accepted its call and before the ledger
recorded it, with boto3 against moto's server. SQS FIFO: the recovering ledger resends
under the same deduplication id, inside the window, and the queue holds the message
once. SES (no key, no lookup): the row waits for a person and no second email leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import denpyo
from denpyo.channels.aws import SesChannel, SqsFifoChannel
from moto_aws import Moto, moto_server
from waiting import wait_until

LEASE = 1.0

CHILD = textwrap.dedent(
    """
    import sys, time, pathlib
    import boto3
    from botocore.config import Config
    import denpyo
    from denpyo.channels.aws import SesChannel, SqsFifoChannel

    db, endpoint, where, marker, lease = sys.argv[1:]
    ledger = denpyo.Ledger(db)
    config = Config(retries={"total_max_attempts": 1})
    def client(service):
        return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            config=config)
    if where.endswith(".fifo"):
        channel, payload = SqsFifoChannel(client("sqs"), where), {"order": 42}
    else:
        channel, payload = SesChannel(client("sesv2"), from_address=where), {
            "Destination": {"ToAddresses": ["customer@example.com"]},
            "Content": {"Simple": {"Subject": {"Data": "Receipt"},
                                   "Body": {"Text": {"Data": "Thanks"}}}},
        }

    def send(sub):
        remote_id = channel.send(sub)
        pathlib.Path(marker).write_text(remote_id)
        time.sleep(120)  # killed here: AWS accepted, the ledger has not recorded it
        return remote_id

    ledger.add_channel("aws", **{**channel.options, "send": send}, lease=float(lease))
    ledger.submit("aws", "order:42", payload)
    """
)


def crash_child(tmp_path: Path, db_url: str, moto: Moto, where: str) -> str:
    """Run the sender until AWS accepted, kill it there; the remote id it got."""
    script, marker = tmp_path / "sender.py", tmp_path / "marker"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), db_url, moto.url, where, str(marker), str(LEASE)]
    )
    try:
        wait_until(
            marker.exists,
            "the sender reaching the dangerous instant",
            alive=lambda: child.poll() is None,
            every=0.02,
        )
        wait_until(lambda: bool(marker.read_text()), "the remote id written", every=0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return marker.read_text()


def in_doubt(ledger: denpyo.Ledger) -> denpyo.Submission:
    def doubted() -> bool:
        sub = ledger.get("aws", "order:42")
        return sub is not None and sub.in_doubt

    wait_until(doubted, "the lease running out", every=0.1)
    sub = ledger.get("aws", "order:42")
    assert sub is not None and sub.status is denpyo.Status.REQUESTING and sub.remote_id is None
    return sub


def test_sqs_fifo_after_a_crash_holds_the_message_once(
    tmp_path: Path, db_url: str, moto: Moto
) -> None:
    queue_url = moto.fifo_queue()
    first_id = crash_child(tmp_path, db_url, moto, queue_url)
    queue = SqsFifoChannel(moto.client("sqs"), queue_url)
    with denpyo.Ledger(db_url) as ledger:
        ledger.add_channel("aws", **queue.options, lease=LEASE)
        doubted = in_doubt(ledger)

        def synced() -> bool:
            ledger.reconcile()  # inside the window: resent under the same id
            sub = ledger.get("aws", "order:42")
            return sub is not None and sub.status is denpyo.Status.SYNCED

        wait_until(synced, "the row in doubt resent", every=0.1)
    [message] = moto.received(queue_url)
    assert message["MessageId"] == first_id  # the copy the killed sender sent
    assert message["Attributes"]["MessageDeduplicationId"] == doubted.idempotency_key


def test_ses_after_a_crash_waits_for_a_person_and_sends_no_second_email(
    tmp_path: Path, db_url: str, moto: Moto
) -> None:
    moto.client("sesv2").create_email_identity(EmailIdentity="shop@example.com")
    quota = moto.client("ses").get_send_quota
    before = quota()["SentLast24Hours"]
    crash_child(tmp_path, db_url, moto, "shop@example.com")
    assert quota()["SentLast24Hours"] == before + 1
    email = SesChannel(moto.client("sesv2"), from_address="shop@example.com")
    alerts: list[denpyo.Alert] = []
    with denpyo.Ledger(db_url) as ledger:
        ledger.on_alert(alerts.append)
        ledger.add_channel("aws", **email.options, lease=LEASE)
        in_doubt(ledger)
        for _ in range(3):
            ledger.reconcile()
            ledger.work(until_idle=True, poll_interval=0.01)
        sub = ledger.get("aws", "order:42")
    assert sub is not None and sub.status is denpyo.Status.REQUESTING and sub.in_doubt
    assert [a.reason for a in alerts] == ["in_doubt"]
    assert quota()["SentLast24Hours"] == before + 1


@pytest.fixture(scope="module")
def moto() -> Iterator[Moto]:
    with moto_server() as running:
        yield running
