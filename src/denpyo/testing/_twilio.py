"""The fake provider speaking Twilio's API shape, for the `twilio` SDK pointed at it.

``POST /2010-04-01/Accounts/{sid}/Messages.json`` (a form, as the SDK sends it)
answers 201 with the message (``sid`` ``SM…``, status ``queued``), and ``GET`` on
the same path lists the messages, newest first, filtered by ``To``, ``From``,
``DateSent>``/``DateSent<`` (Twilio's own parameters). Twilio takes no
idempotency key: every request is an effect. Faults (`FakeProvider.fail_next`, or
the rates): ``decline`` 400 (code 21211, an invalid ``To``), ``throttle`` 429
(code 20429), ``error`` 500, ``unavailable`` 503, ``drop`` and ``slow``.
``lookup_unknown_rate``: the list answers 503.
"""

from __future__ import annotations

import operator
import os
import time
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl

from denpyo.testing._core import Handler, Headers, ProviderCore, Query, Reply

_REFUSALS = {
    "decline": (400, 21211, "The 'To' number is not a valid phone number."),
    "throttle": (429, 20429, "Too Many Requests"),
    "error": (500, 20500, "Internal Server Error"),
    "unavailable": (503, 20503, "Service Unavailable"),
}


def _error(status: int, code: int, message: str) -> Reply:
    return Reply(
        status,
        {
            "code": code,
            "message": message,
            "status": status,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
        },
    )


def _create(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    form = dict(parse_qsl(body.decode(), keep_blank_values=True))
    with core._lock:
        core._counts["requests"] += 1
        sender = form.get("From") or form.get("MessagingServiceSid")
        if not form.get("To") or not sender or not form.get("Body"):
            core._counts["rejected"] += 1
            return _error(
                400, 21604, "A 'To', a 'From' (or 'MessagingServiceSid') and a 'Body' are required."
            )
        fault = core.shaped_fault(core.options)
        if fault in _REFUSALS:
            core._counts["rejected" if fault == "decline" else "failed"] += 1
            return _error(*_REFUSALS[fault])
        now = time.time()
        message: dict[str, Any] = {
            "sid": "SM" + os.urandom(16).hex(),
            "account_sid": query["account"],
            "to": form["To"],
            "from": form.get("From"),
            "messaging_service_sid": form.get("MessagingServiceSid"),
            "body": form["Body"],
            "status": "queued",
            "direction": "outbound-api",
            "num_segments": "1",
            "date_created": formatdate(now, usegmt=True),
            "date_updated": formatdate(now, usegmt=True),
            "date_sent": formatdate(now, usegmt=True),
            "error_code": None,
            "error_message": None,
            "price": None,
            "api_version": "2010-04-01",
            "uri": f"/2010-04-01/Accounts/{query['account']}/Messages/SM.json",
            "status_callback": form.get("StatusCallback"),
        }
        message["uri"] = message["uri"].replace("SM.json", message["sid"] + ".json")
        core._record(None, message["sid"], message, now)
        then = core.after_effect(fault)
    return Reply(201, message, {}, then)


def _list(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    if core.lookup_fails():
        return _error(503, 20503, "Service Unavailable")
    found = [e for e in core.accepted() if isinstance(e["payload"], dict) and "sid" in e["payload"]]
    for name, field in (("To", "to"), ("From", "from")):
        if name in query:
            found = [e for e in found if e["payload"][field] == query[name]]
    for name, keep in (("DateSent>", operator.ge), ("DateSent<", operator.lt)):
        if name in query:
            bound = _day_or_date(query[name])
            found = [e for e in found if keep(e["at"], bound)]
    found.sort(key=lambda e: e["at"], reverse=True)
    size = int(query.get("PageSize", "50"))
    page = [e["payload"] for e in found[:size]]
    uri = f"/2010-04-01/Accounts/{query['account']}/Messages.json"
    return Reply(
        200,
        {
            "messages": page,
            "uri": uri,
            "first_page_uri": uri,
            "next_page_uri": None,
            "previous_page_uri": None,
            "page": 0,
            "page_size": size,
            "start": 0,
            "end": max(len(page) - 1, 0),
        },
    )


def _day_or_date(value: str) -> float:
    """Twilio's date filters: ``YYYY-MM-DD`` or an RFC 2822 / ISO 8601 time."""
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        pass
    when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/2010-04-01/Accounts/{account}/Messages.json"): _create,
    ("GET", "/2010-04-01/Accounts/{account}/Messages.json"): _list,
}
