"""How the AWS channels classify what boto3 raises: never "did not arrive" unless
that is certain."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any, NoReturn

import botocore.exceptions
import pytest

from denpyo.channels.aws import call
from denpyo.errors import Rejected, Transient


def answered(code: str, status: int) -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "SendMessage")


def raising(exc: Exception) -> Any:
    def operation(**_: Any) -> NoReturn:
        raise exc

    return operation


@pytest.mark.parametrize("code", ["ThrottlingException", "TooManyRequestsException", "Throttling"])
def test_throttling_is_transient_and_says_so(code: str) -> None:
    with pytest.raises(Transient) as caught:
        call("SQS q", raising(answered(code, 400)))
    assert caught.value.throttled


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ServiceUnavailable", 503),
        ("Whatever", 503),
        ("RequestTimeout", 400),
        ("ExpiredToken", 403),
    ],
)
def test_a_service_that_did_not_act_is_transient(code: str, status: int) -> None:
    with pytest.raises(Transient) as caught:
        call("SQS q", raising(answered(code, status)))
    assert not caught.value.throttled


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AWS.SimpleQueueService.NonExistentQueue", 400),
        ("InvalidParameterValue", 400),
        ("MessageRejected", 400),
        ("AccessDenied", 403),
        ("NotFound", 404),
    ],
)
def test_any_other_answer_is_rejected(code: str, status: int) -> None:
    with pytest.raises(Rejected, match=code):
        call("SQS q", raising(answered(code, status)))


@pytest.mark.parametrize(
    "exc",
    [
        botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"),
        botocore.exceptions.ConnectTimeoutError(endpoint_url="http://x"),
        botocore.exceptions.NoCredentialsError(),
    ],
)
def test_nothing_sent_is_transient(exc: Exception) -> None:
    with pytest.raises(Transient):
        call("SQS q", raising(exc))


def test_parameters_boto3_refuses_are_rejected_unsent() -> None:
    exc = botocore.exceptions.ParamValidationError(report="MessageBody is missing")
    with pytest.raises(Rejected, match="nothing was sent"):
        call("SQS q", raising(exc))


@pytest.mark.parametrize(
    ("code", "status"), [("InternalFailure", 500), ("InternalError", 500), ("", 502), ("", 504)]
)
def test_a_service_that_failed_while_acting_is_ambiguous(code: str, status: int) -> None:
    """An SES 500 may come after the email left: resent blind, it could be a second."""
    with pytest.raises(ConnectionError, match="may have acted") as caught:
        call("SES send_email", raising(answered(code, status)))
    assert not isinstance(caught.value, Transient | Rejected)


def test_no_answer_after_the_request_left_is_ambiguous() -> None:
    with pytest.raises(TimeoutError, match="may have arrived"):
        call("SQS q", raising(botocore.exceptions.ReadTimeoutError(endpoint_url="http://x")))
    closed = botocore.exceptions.ConnectionClosedError(endpoint_url="http://x")
    with pytest.raises(ConnectionError, match="may have arrived") as caught:
        call("SQS q", raising(closed))
    assert not isinstance(caught.value, Transient | Rejected)


def test_an_answer_is_returned() -> None:
    assert call("SQS q", lambda **params: {"MessageId": "m-1", **params}, A=1) == {
        "MessageId": "m-1",
        "A": 1,
    }


def test_without_the_extra_the_channels_say_which_to_install() -> None:
    """The key helpers, which the webhooks use, need no boto3."""
    code = textwrap.dedent("""
        import sys
        sys.modules["botocore"] = sys.modules["boto3"] = None
        import denpyo.channels._keys
        try:
            import denpyo.channels.aws
        except denpyo.ConfigurationError as exc:
            print(exc)
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install 'denpyo[aws]'" in done.stdout
