"""What the channels on the providers' SDKs share (channels/_sdk.py): whether a
failure happened before anything left, and what an HTTP status signals."""

from __future__ import annotations

import socket
import urllib.error

import pytest

from denpyo.channels._sdk import by_status, channel_options, in_doubt, never_left
from denpyo.errors import Rejected, Transient


class NewConnectionError(Exception):
    """Named as urllib3's: a connection that was never made."""


class ReadTimeout(Exception):
    """Named as requests': the request had left."""


def wrapped(cause: BaseException) -> Exception:
    """An SDK's own error raised from its HTTP client's, as the SDKs do."""
    try:
        raise cause
    except BaseException as exc:
        try:
            raise RuntimeError("the SDK's error") from exc
        except RuntimeError as outer:
            return outer


@pytest.mark.parametrize(
    "cause",
    [
        ConnectionRefusedError(111, "refused"),
        socket.gaierror(-2, "Name or service not known"),
        urllib.error.URLError(ConnectionRefusedError(111, "refused")),
        NewConnectionError("failed to establish a new connection"),
    ],
)
def test_a_connection_never_made_is_seen_through_the_sdks_wrapping(cause: Exception) -> None:
    assert never_left(wrapped(cause))


@pytest.mark.parametrize(
    "cause", [TimeoutError("read timed out"), ConnectionResetError(104, "reset"), ReadTimeout()]
)
def test_a_failure_once_the_request_may_have_left_is_not_never_left(cause: Exception) -> None:
    assert not never_left(wrapped(cause))


def test_statuses_the_provider_did_not_act_on_are_transient_429_throttled() -> None:
    throttled = by_status(429, "slow down", retry_after=3)
    assert isinstance(throttled, Transient) and throttled.throttled
    assert throttled.retry_after == 3
    for status in (408, 503):
        signal = by_status(status, "later")
        assert isinstance(signal, Transient) and not signal.throttled


def test_other_4xx_are_rejected_and_the_other_5xx_are_left_in_doubt() -> None:
    for status in (400, 401, 402, 403, 404, 413, 422):
        assert isinstance(by_status(status, "no"), Rejected)
    for status in (500, 502, 504, None):
        assert by_status(status, "?") is None
    assert "may have been carried out" in str(in_doubt("HTTP 500"))


def test_options_carry_send_and_leave_out_what_the_channel_has_not() -> None:
    def send(sub: object) -> None: ...

    assert channel_options(send, None, None, idempotent=False, idempotency_window=None) == {
        "send": send,
        "idempotent": False,
    }
