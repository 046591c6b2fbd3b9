"""What the channels built on a provider's SDK share: how a network failure and an
HTTP status are read, and the options they hand to `Ledger.channel`."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from denpyo.errors import Rejected, Transient

_NEVER_LEFT = (ConnectionRefusedError, socket.gaierror)
_NEVER_LEFT_NAMES = frozenset(
    {"NewConnectionError", "ConnectTimeout", "ConnectTimeoutError", "NameResolutionError"}
)
"""Errors of the SDKs' HTTP clients (requests, urllib3, httpx) raised before a
connection was made, named so that none of those clients is imported here."""


def never_left(exc: BaseException) -> bool:
    """Did the call fail before a connection existed (refused, DNS, a connect
    timeout)? Then nothing reached the provider. Looks down the chain of causes, as
    the SDKs wrap their HTTP client's error in their own."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _NEVER_LEFT) or type(current).__name__ in _NEVER_LEFT_NAMES:
            return True
        reason = getattr(current, "reason", None)  # urllib's URLError
        if isinstance(reason, _NEVER_LEFT):
            return True
        current = current.__cause__ or current.__context__
    return False


def by_status(
    status: int | None, what: str, *, retry_after: float | None = None
) -> Exception | None:
    """The signal an HTTP status is, for a provider whose answer says it did not act
    (429, 503: `Transient`) or will not (other 4xx: `Rejected`). None for the rest
    (500, 502, 504, none): the call may have been carried out, so the caller raises
    it as ambiguous."""
    if status == 429:
        return Transient(what, retry_after=retry_after, throttled=True)
    if status == 503:
        return Transient(what, retry_after=retry_after)
    if status is not None and 400 <= status < 500 and status != 408:
        return Rejected(what)
    if status == 408:
        return Transient(what, retry_after=retry_after)
    return None


def in_doubt(what: str) -> ConnectionError:
    """An ambiguous failure: the engine verifies before any resend."""
    return ConnectionError(f"{what}; the call may have been carried out")


def channel_options(
    send: Callable[..., Any],
    verify: Callable[..., Any] | None,
    list_remote: Callable[..., Any] | None,
    *,
    idempotent: bool,
    idempotency_window: float | None,
) -> dict[str, Any]:
    """What a ready-made channel fixes, for ``ledger.add_channel(name, **options)``:
    its `send` and the keyword arguments of `Ledger.channel` it knows."""
    options: dict[str, Any] = {"send": send, "idempotent": idempotent}
    if verify is not None:
        options["verify"] = verify
    if list_remote is not None:
        options["list_remote"] = list_remote
    if idempotency_window is not None:
        options["idempotency_window"] = idempotency_window
    return options
