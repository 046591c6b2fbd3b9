"""The fake provider speaking SendGrid's API shape, for the `sendgrid` SDK pointed at it.

``POST /v3/mail/send`` (JSON, as the SDK sends it) answers 202 with an
``X-Message-Id``, and ``GET /v3/messages?query=unique_args['…']="…"`` (the Email
Activity API) finds the messages by a custom argument. SendGrid takes no
idempotency key: every request is an effect (its key, for the counters, the
``custom_args.denpyo_key`` it carries), so a resend is a second email
(`stats().duplicates`). Faults (`FakeProvider.fail_next`, or the rates): ``decline``
400 (a bad address), ``throttle`` 429, ``error`` 500, ``unavailable`` 503, ``drop``
and ``slow``. ``lookup_unknown_rate``: the Activity API answers 503.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from denpyo.testing._core import Handler, Headers, ProviderCore, Query, Reply

_QUERY = re.compile(r"""^\s*\(?\s*unique_args\['([^']+)'\]\s*=\s*"((?:[^"\\]|\\.)*)"\s*\)?\s*$""")
_REFUSALS = {
    "decline": (400, "The to email does not contain a valid address."),
    "throttle": (429, "too many requests"),
    "error": (500, "internal error"),
    "unavailable": (503, "service unavailable"),
}


def _errors(status: int, message: str, field: str | None = None) -> Reply:
    return Reply(status, {"errors": [{"message": message, "field": field, "help": None}]})


def _send(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    try:
        mail: Any = json.loads(body)
    except ValueError:
        mail = None
    with core._lock:
        core._counts["requests"] += 1
        if not isinstance(mail, dict) or not mail.get("personalizations") or not mail.get("from"):
            core._counts["rejected"] += 1
            return _errors(400, "personalizations and from are required", "personalizations")
        fault = core.shaped_fault(core.options)
        if fault in _REFUSALS:
            core._counts["rejected" if fault == "decline" else "failed"] += 1
            return _errors(*_REFUSALS[fault])
        message_id = os.urandom(11).hex()
        args = mail.get("custom_args")
        args = args if isinstance(args, dict) else {}
        key = args.get("denpyo_key") if isinstance(args.get("denpyo_key"), str) else None
        core._record(key, message_id, mail, time.time())
        then = core.after_effect(fault)
    return Reply(202, "", {"X-Message-Id": message_id}, then)


def _messages(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    """The Email Activity API, for one clause: ``unique_args['name']="value"``."""
    match = _QUERY.match(query.get("query", ""))
    if match is None:
        return _errors(400, "this fake filters by unique_args['k']=\"v\" only", "query")
    if core.lookup_fails():
        return _errors(503, "the activity feed is unavailable")
    name, value = match.group(1), re.sub(r"\\(.)", r"\1", match.group(2))
    found: list[dict[str, Any]] = []
    for effect in core.accepted():
        mail = effect["payload"]
        if not isinstance(mail, dict) or (mail.get("custom_args") or {}).get(name) != value:
            continue
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(effect["at"]))
        for n, person in enumerate(mail["personalizations"]):
            for to in person.get("to", []):
                found.append(
                    {
                        "msg_id": f"{effect['id']}.filter{n:04d}.{int(effect['at'])}.0",
                        "from_email": (mail.get("from") or {}).get("email"),
                        "subject": mail.get("subject"),
                        "to_email": to.get("email"),
                        "status": "delivered",
                        "opens_count": 0,
                        "clicks_count": 0,
                        "last_event_time": when,
                    }
                )
    return Reply(200, {"messages": found[: int(query.get("limit", "10"))]})


ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/v3/mail/send"): _send,
    ("GET", "/v3/messages"): _messages,
}
