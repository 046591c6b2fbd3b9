"""The fake provider speaking Stripe's API shape, for the `stripe` SDK pointed at it.

Enough of ``/v1`` for `denpyo.channels.stripe`: create, retrieve, list (by
``created``, newest first, paged by ``starting_after``) and search (by
``metadata['…']:'…'``) payment intents; create and list refunds. Requests are
form-encoded as the SDK sends them; replies are Stripe's JSON objects and errors.

Every object created is one effect of the provider (`FakeProvider.accepted()`,
its payload the object, its key the ``Idempotency-Key``), so the provider's
counters and `accepted_ids_for` work as for ``/send``. As Stripe does, a request
with a key already used answers the first object again (``Idempotent-Replayed``),
or 400 ``idempotency_error`` when its parameters differ; `key_ttl` is how long a
key is kept (Stripe: 24 h). Faults (`FakeProvider.fail_next`, or the rates):
``decline`` answers 402 ``card_declined`` (as does a confirmed payment with the
test payment method ``pm_card_chargeDeclined``), ``throttle`` 429, ``error`` 500,
``unavailable`` 503, ``drop`` and ``slow`` record the object and then drop the
connection or answer late. Search finds an object at once (Stripe's may take
up to a minute).
"""

from __future__ import annotations

import operator
import os
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from denpyo.testing._core import Handler, Headers, ProviderCore, Query, Reply

DECLINED_CARDS = ("pm_card_chargeDeclined", "pm_card_visa_chargeDeclined")
"""Stripe's test payment methods that decline."""

_SEARCH = re.compile(r"^\s*metadata\['([^']+)'\]\s*:\s*'((?:[^'\\]|\\.)*)'\s*$")


def _error(status: int, kind: str, message: str, **more: Any) -> Reply:
    return Reply(status, {"error": {"type": kind, "message": message, **more}})


def form(body: bytes) -> dict[str, Any]:
    """A form body (``a[b]=1&c=2``) as nested objects: ``{"a": {"b": "1"}, "c": "2"}``."""
    result: dict[str, Any] = {}
    for name, value in parse_qsl(body.decode(), keep_blank_values=True):
        parts = name.replace("]", "").split("[")
        node = result
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return result


def _objects(core: ProviderCore, kind: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in core.accepted() if e["payload"].get("object") == kind]


def _fault_reply(fault: str) -> Reply | None:
    """The error a fault answers with before anything is recorded (None: go on)."""
    if fault == "decline":
        return _error(
            402,
            "card_error",
            "Your card was declined.",
            code="card_declined",
            decline_code="generic_decline",
        )
    if fault == "throttle":
        return _error(429, "invalid_request_error", "Too many requests.", code="rate_limit")
    if fault == "error":
        return _error(500, "api_error", "Something went wrong on Stripe's end.")
    if fault == "unavailable":
        return _error(503, "api_error", "Stripe is unavailable.")
    return None


def _create(kind: str, build: Callable[[ProviderCore, dict[str, Any]], Any]) -> Any:
    """A create endpoint of `kind`: keys, faults, then `build(core, params)` (an
    object, or a Reply refusing the request)."""

    def handler(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
        params = form(body)
        key = headers.get("Idempotency-Key")
        options = core.options
        with core._lock:
            core._counts["requests"] += 1
            if key and core._remembers(key, options, time.time()):
                first = next(e for e in core._effects if e["id"] == core._ids_by_key[key][-1])
                if first.get("request") != (kind, params):
                    return _error(
                        400,
                        "idempotency_error",
                        f"Keys for idempotent requests can only be used with the same "
                        f"parameters they were first used with. Try using a key other "
                        f"than '{key}' if you meant to execute a different request.",
                    )
                core._counts["replayed"] += 1
                return Reply(200, first["payload"], {"Idempotent-Replayed": "true"})
            fault = core.shaped_fault(options)
            refused = _fault_reply(fault)
            if refused is not None:
                core._counts["rejected" if fault == "decline" else "failed"] += 1
                return refused
            made = build(core, params)
            if isinstance(made, Reply):
                core._counts["rejected"] += 1
                return made
            core._record(key or None, made["id"], made, made["created"])
            core._effects[-1]["request"] = (kind, params)
            then = core.after_effect(fault)
        return Reply(200, made, {}, then)

    return handler


def _amount(params: dict[str, Any]) -> int | None:
    try:
        return int(params["amount"])
    except (KeyError, ValueError):
        return None


def _payment_intent(core: ProviderCore, params: dict[str, Any]) -> Any:
    amount = _amount(params)
    if amount is None or amount < 1 or not params.get("currency"):
        return _error(
            400,
            "invalid_request_error",
            "amount (a positive integer) and currency are required",
            param="amount",
        )
    confirm = params.get("confirm") == "true"
    if confirm and params.get("payment_method") in DECLINED_CARDS:
        return _fault_reply("decline")
    return {
        "id": "pi_" + os.urandom(12).hex(),
        "object": "payment_intent",
        "amount": amount,
        "currency": params["currency"],
        "status": "succeeded" if confirm else "requires_payment_method",
        "payment_method": params.get("payment_method"),
        "description": params.get("description"),
        "metadata": params.get("metadata", {}),
        "created": int(time.time()),
        "livemode": False,
    }


def _refund(core: ProviderCore, params: dict[str, Any]) -> Any:
    target = params.get("payment_intent")
    intent = next((e["payload"] for e in core._effects if e["id"] == target and target), None)
    if intent is None:
        return _error(
            404,
            "invalid_request_error",
            f"No such payment_intent: '{target}'",
            code="resource_missing",
            param="payment_intent",
        )
    amount = _amount(params) or intent["amount"]
    return {
        "id": "re_" + os.urandom(12).hex(),
        "object": "refund",
        "amount": amount,
        "currency": intent["currency"],
        "payment_intent": target,
        "status": "succeeded",
        "metadata": params.get("metadata", {}),
        "created": int(time.time()),
    }


def _listed(core: ProviderCore, kind: str, query: Query, url: str) -> Reply:
    """Stripe's list: newest first, ``created[gte|gt|lt|lte]``, ``limit``, ``starting_after``."""
    found = _objects(core, kind)
    bounds = {
        "gte": operator.ge,
        "gt": operator.gt,
        "lt": operator.lt,
        "lte": operator.le,
    }
    for op, test in bounds.items():
        value = query.get(f"created[{op}]")
        if value is not None:
            found = [o for o in found if test(o["created"], int(value))]
    if "payment_intent" in query:
        found = [o for o in found if o.get("payment_intent") == query["payment_intent"]]
    found.sort(key=lambda o: (o["created"], o["id"]), reverse=True)
    after = query.get("starting_after")
    if after:
        ids = [o["id"] for o in found]
        found = found[ids.index(after) + 1 :] if after in ids else []
    limit = int(query.get("limit", "10"))
    return Reply(
        200,
        {"object": "list", "url": url, "data": found[:limit], "has_more": len(found) > limit},
    )


def _list_intents(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    return _listed(core, "payment_intent", query, "/v1/payment_intents")


def _list_refunds(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    return _listed(core, "refund", query, "/v1/refunds")


def _search_intents(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    """Stripe's search, for one clause: ``metadata['name']:'value'``."""
    match = _SEARCH.match(query.get("query", ""))
    if match is None:
        return _error(400, "invalid_request_error", "this fake searches metadata['k']:'v' only")
    name, value = match.group(1), re.sub(r"\\(.)", r"\1", match.group(2))
    if core.lookup_fails():
        return _error(503, "api_error", "search is unavailable")
    found = [o for o in _objects(core, "payment_intent") if o["metadata"].get(name) == value]
    found.sort(key=lambda o: (o["created"], o["id"]), reverse=True)
    return Reply(
        200,
        {
            "object": "search_result",
            "url": "/v1/payment_intents/search",
            "data": found,
            "has_more": False,
            "next_page": None,
        },
    )


def _retrieve_intent(core: ProviderCore, query: Query, headers: Headers, body: bytes) -> Reply:
    found = [o for o in _objects(core, "payment_intent") if o["id"] == query["id"]]
    if not found:
        return _error(
            404,
            "invalid_request_error",
            f"No such payment_intent: '{query['id']}'",
            code="resource_missing",
        )
    return Reply(200, found[0])


ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/v1/payment_intents"): _create("payment_intent", _payment_intent),
    ("GET", "/v1/payment_intents"): _list_intents,
    ("GET", "/v1/payment_intents/search"): _search_intents,
    ("GET", "/v1/payment_intents/{id}"): _retrieve_intent,
    ("POST", "/v1/refunds"): _create("refund", _refund),
    ("GET", "/v1/refunds"): _list_refunds,
}
