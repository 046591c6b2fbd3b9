"""moto's server (a real HTTP server speaking the AWS APIs) for the AWS channels'
tests, and boto3 clients pointed at it with dummy credentials."""

from __future__ import annotations

import socket
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
ONCE = Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Moto:
    """One moto server on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def client(self, service: str, config: Config = ONCE, region: str = REGION) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=region,
            config=config,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def fifo_queue(self) -> str:
        """A new FIFO queue's URL."""
        name = f"denpyo-{uuid.uuid4().hex[:12]}.fifo"
        made = self.client("sqs").create_queue(QueueName=name, Attributes={"FifoQueue": "true"})
        return str(made["QueueUrl"])

    def received(self, queue_url: str, region: str = REGION) -> list[dict[str, Any]]:
        """Every message the queue holds (received, so hidden for a while after)."""
        sqs, found = self.client("sqs", region=region), []
        while True:
            batch = sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                MessageAttributeNames=["All"],
                AttributeNames=["All"],
            ).get("Messages", [])
            if not batch:
                return found
            found.extend(batch)

    def reset(self) -> None:
        """Forget every queue, topic and email: moto keeps them per process, whichever
        of its servers made them."""
        with urllib.request.urlopen(f"{self.url}/moto-api/reset", data=b"") as answer:
            answer.read()


@contextmanager
def moto_server() -> Iterator[Moto]:
    moto = Moto()
    moto.server.start()
    try:
        yield moto
    finally:
        moto.server.stop()
