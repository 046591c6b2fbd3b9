"""The providers' webhooks as an ASGI app (Starlette): each provider's signed events
settle the rows they name (`Ledger.receive_provider_event`).

`create_app(ledger, stripe_secret=…, sendgrid_public_key=…, twilio_auth_token=…,
sns_topics=…)` serves one route per provider configured: ``POST /stripe``,
``/sendgrid``, ``/twilio``, ``/sns`` (SES's events come by SNS). Each checks the
provider's signature with the provider's own SDK (SNS: with `cryptography`, as SNS
documents) and answers:

- 400, and nothing written, to anything unsigned, badly signed, stale or
  unparseable;
- 200 once every event of the request is recorded and applied: a row in doubt is
  `synced` before the provider hears the answer;
- 500 when the database failed: the provider delivers again later, and an event
  recorded before is recorded once.

Mount it in FastAPI or Starlette (``app.mount("/webhooks", create_app(ledger,
…))``), beside Django in an ASGI router, or run it alone (`denpyo webhooks`).
Needs the `webhooks` extra, and each provider's own (`stripe`, `sendgrid`,
`twilio`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from denpyo.domain.provider_events import ProviderEvent
from denpyo.engine.provider_events import receive as receive_event
from denpyo.errors import ConfigurationError
from denpyo.extras import missing
from denpyo.webhooks import _sendgrid, _sns, _stripe, _twilio
from denpyo.webhooks._common import Refused
from denpyo.webhooks._sns import Fetcher

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from denpyo.engine.ledger import Ledger

__all__ = ["MAX_BODY", "Refused", "create_app"]

log = logging.getLogger("denpyo.webhooks")

MAX_BODY = 1024 * 1024
"""The largest request read (bytes): a provider's batch is far smaller."""

DB_THREADS = 4
"""The threads (each with its database connection) that record the events: as many
as the dashboard holds (web/shell.py), however many requests arrive at once."""

Reader = Callable[["Request", bytes], list[ProviderEvent]]


def create_app(
    ledger: Ledger,
    *,
    stripe_secret: str | None = None,
    sendgrid_public_key: str | None = None,
    twilio_auth_token: str | None = None,
    twilio_url: str | None = None,
    sns_topics: Collection[str] = (),
    sns_confirm: bool = False,
    sns_fetcher: Fetcher | None = None,
) -> Starlette:
    """The webhooks' ASGI app for `ledger`, a route for each provider configured:
    `stripe_secret` (the endpoint's ``whsec_…``), `sendgrid_public_key` (the signed
    event webhook's verification key), `twilio_auth_token` (with `twilio_url`, the
    URL Twilio calls, when a proxy stands between), `sns_topics` (the topic ARNs
    whose messages are read; `sns_confirm`: confirm their subscriptions;
    `sns_fetcher(url) -> bytes`: how SNS's certificates and confirmation URLs are
    fetched, an HTTPS GET by default). `ConfigurationError` with none configured."""
    try:
        from starlette.applications import Starlette
        from starlette.routing import Route
    except ImportError as exc:
        raise missing("webhooks", "the webhooks", exc) from exc
    readers: dict[str, Reader] = {}
    for given, provider in (
        (stripe_secret, _stripe),
        (sendgrid_public_key, _sendgrid),
        (twilio_auth_token, _twilio),
    ):
        if given:
            provider.sdk()  # a missing extra is said now, not at the first event
    if stripe_secret:
        secret = stripe_secret
        readers["stripe"] = lambda request, body: _stripe.events(
            body, request.headers.get("Stripe-Signature"), secret
        )
    if sendgrid_public_key:
        key = sendgrid_public_key
        readers["sendgrid"] = lambda request, body: _sendgrid.events(
            body,
            request.headers.get(_sendgrid.SIGNATURE),
            request.headers.get(_sendgrid.TIMESTAMP),
            key,
        )
    if twilio_auth_token:
        token, url = twilio_auth_token, twilio_url
        readers["twilio"] = lambda request, body: _twilio.events(
            body, request.headers.get(_twilio.SIGNATURE), url or str(request.url), token
        )
    if sns_topics:
        if isinstance(sns_topics, str):
            raise ConfigurationError("sns_topics is a list of topic ARNs, not one string")
        verifier = _sns.Verifier(sns_topics, sns_fetcher or _sns.fetch, confirm=sns_confirm)
        readers["sns"] = lambda request, body: verifier.events(body)
    if not readers:
        raise ConfigurationError(
            "the webhooks need at least one provider: a Stripe secret, a SendGrid public "
            "key, a Twilio auth token or SNS topics"
        )
    db = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="denpyo-webhooks")
    routes = [
        Route(f"/{name}", _route(ledger, db, reader), methods=["POST"])
        for name, reader in readers.items()
    ]
    app = Starlette(routes=routes)
    app.state.providers = sorted(readers)
    return app


def _route(
    ledger: Ledger, db: ThreadPoolExecutor, reader: Reader
) -> Callable[[Request], Awaitable[Response]]:
    from starlette.responses import PlainTextResponse

    async def route(request: Request) -> Response:
        body = await _body(request)
        if body is None:
            return PlainTextResponse("request too large\n", status_code=413)
        loop = asyncio.get_running_loop()
        try:
            # Checking a signature may fetch SNS's certificate: off the event loop.
            events = await loop.run_in_executor(db, reader, request, body)
        except Refused as exc:
            log.warning("%s refused: %s", request.url.path, exc)
            return PlainTextResponse(f"refused: {exc}\n", status_code=400)
        for event in events:
            await loop.run_in_executor(db, receive_event, ledger, event)
        return PlainTextResponse(f"{len(events)} events\n")

    return route


async def _body(request: Request) -> bytes | None:
    """The request's body, None past `MAX_BODY`."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
