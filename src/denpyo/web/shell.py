"""The dashboard's shell: who may see and do what (through `auth.Gate`), rendering,
the answers to errors (one handler per kind, as Starlette's `exception_handlers`),
the security headers on every answer (one middleware), and the ledger's calls on the
dashboard's own threads. The pages (app.py) and the actions (actions.py) are built
on it."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, ExceptionHandler, Message, Receive, Scope, Send

from denpyo.domain.actions import Approval
from denpyo.domain.limits import MAX_ID
from denpyo.domain.redaction import Redaction
from denpyo.domain.text import visible
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.errors import (
    DenpyoError,
    InvalidInput,
    SchemaError,
    StoreError,
    SubmissionNotFound,
)
from denpyo.web import present
from denpyo.web.auth import (
    CSRF_COOKIE,
    Access,
    Gate,
    NotLetIn,
    new_csrf,
)

log = logging.getLogger("denpyo.web")

Handler = Callable[[Request], Awaitable[Response]]
DB_THREADS = 4
COUNTS_TTL = 2.0
CHALLENGE = {"www-authenticate": 'Bearer realm="denpyo"'}
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}
"""Sent with every answer, error pages and static files included (`SecurityHeaders`)."""
NOT_STORED = "no-store"
"""The cache policy of every answer that sets none: pages show live rows and names."""
OUTAGE = (StoreError, SchemaError)
"""The database is unreachable, refused, or has no denpyo tables: not the request's fault."""


class Refused(Exception):
    """A request that may not do what it asks: answered with `status` and nothing done."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP answer, whoever made it (a page, a static
    file, Starlette's 404 and 405, the 500 page): the one place they are set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if "cache-control" not in headers:
                    headers["cache-control"] = NOT_STORED
            await send(message)

        await self.app(scope, receive, send_secured)


class HostCheck:
    """Answers only a `Host` the dashboard may be reached by (`Gate.known_host`), else
    400 and nothing else: a page loaded under another name (DNS rebinding) cannot
    pass the origin check by forging the Host its Origin is compared with."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            if not self.gate.known_host(host):
                refused = PlainTextResponse(
                    f"refused: this dashboard is not served as {visible(host)[:100]!r}",
                    status_code=400,
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Static(StaticFiles):
    """The dashboard's own script and styles: a browser keeps them and asks again by
    ETag (pages, by contrast, are never stored)."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["cache-control"] = "no-cache"
        return response


class Shell:
    """What every page and action of the dashboard shares, over one ledger."""

    approval: Approval | None = None
    """The dashboard's two-person rule for the actions taken here (else the ledger's)."""

    def __init__(
        self,
        ledger: Ledger,
        gate: Gate,
        redaction: Redaction,
        refresh: float,
    ) -> None:
        self.ledger = ledger
        self.gate = gate
        self.redaction = redaction
        self.refresh = refresh
        folder = resources.files("denpyo.web")
        self.templates = Jinja2Templates(directory=str(folder / "templates"))
        self.templates.env.globals.update(age=present.age, when=present.when)
        self.templates.env.filters["num"] = present.num
        self.static = Static(directory=str(folder / "static"))
        self.counts: tuple[float, op.StatusReport] | None = None  # (fresh until, counts)
        # The ledger's calls run on a few threads of their own: each thread keeps its
        # database connection, so the dashboard holds at most this many, all warm.
        self.db = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="denpyo-web")
        from denpyo.metrics import Metrics

        self.metrics = Metrics(ledger).attach()

    # -- guards -----------------------------------------------------------------------

    def page(self, handler: Callable[[Request, Access], Awaitable[Response]]) -> Handler:
        """A GET that needs a signed-in viewer: others are sent to the sign-in page
        (a browser) or refused with 401 (a script, a partial, /metrics)."""

        async def guarded(request: Request) -> Response:
            access = await self.gate.identify(request)
            if access is None:
                # A wrong Bearer token is a script's mistake: 401, never the sign-in page.
                wants_page = (
                    "text/html" in request.headers.get("accept", "")
                    and "hx-request" not in request.headers
                    and not self.gate.bearer(request)
                )
                if wants_page:
                    target = request.url_for("login").include_query_params(next=request.url.path)
                    return RedirectResponse(str(target.path) + "?" + target.query, status_code=303)
                return PlainTextResponse("sign in first", status_code=401, headers=CHALLENGE)
            request.state.access = access  # for the error page, should the handler fail
            return await handler(request, access)

        return guarded

    def action(
        self,
        handler: Callable[[Request, Access, dict[str, str], list[str]], Awaitable[Response]],
        *,
        act: bool = True,
    ) -> Handler:
        """A POST: signed in, with a role that may act (unless `act` is False: signing
        out), same origin, and with the CSRF token (a Bearer request, which no browser
        sends by itself, needs none). A viewer is refused before the form is read."""

        async def guarded(request: Request) -> Response:
            access = await self.gate.identify(request)
            if access is None:
                return PlainTextResponse("sign in first", status_code=401, headers=CHALLENGE)
            request.state.access = access
            if act and not access.can_act:
                why = (
                    "this dashboard is read-only" if self.gate.read_only else "a viewer only looks"
                )
                return PlainTextResponse(f"refused: {why}", status_code=403)
            form = await request.form()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            ids = [v for v in form.getlist("ids") if isinstance(v, str)]
            if not self.gate.bearer(request) and (
                not self.gate.same_origin(request)
                or not self.gate.csrf_ok(request, fields.get("csrf_token"))
            ):
                return PlainTextResponse("refused: not from this dashboard's page", status_code=403)
            return await handler(request, access, fields, ids)

        return guarded

    # -- rendering ----------------------------------------------------------------------

    async def render(
        self, request: Request, access: Access | None, name: str, status: int = 200, **context: Any
    ) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE) or new_csrf()
        response = self.templates.TemplateResponse(
            request,
            name,
            {
                "access": access,
                "read_only": self.gate.read_only,
                "standby": await self.standby(),
                "csrf_token": csrf,
                "refresh": self.refresh,
                "link": lambda route, **params: request.url_for(route, **params).path,
                **context,
            },
            status_code=status,
        )
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(
                CSRF_COOKIE,
                csrf,
                httponly=True,
                samesite="strict",
                path=self._path(request),
                secure=request.url.scheme == "https",
            )
        return response

    async def standby(self) -> str | None:
        """What the pages say when they read from a standby (`read_url`): how far
        behind the primary it is. None: they read the primary."""
        if not self.ledger.reads_standby:
            return None
        try:
            lag = await self.call(self.ledger.replica_lag)
        except DenpyoError:
            lag = None
        return "standby, lag unknown" if lag is None else f"standby, {lag:.1f} s behind"

    async def error(
        self,
        request: Request,
        access: Access | None,
        status: int,
        text: str,
        *,
        unchanged: bool = True,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """The page of a refusal or a failure, with its reason; `unchanged` says that
        nothing was written (not known after a failure)."""
        response = await self.render(
            request, access, "error.html", status=status, message=text, unchanged=unchanged
        )
        response.headers.update(headers or {})
        return response

    # -- errors: each kind answered once, wherever it is raised ---------------------------

    def exception_handlers(self) -> dict[Any, ExceptionHandler]:
        """Starlette's `exception_handlers`: the most specific class of an error
        decides its answer."""
        return {
            Refused: self._refused,
            NotLetIn: self._not_let_in,
            HTTPException: self._http_error,
            SubmissionNotFound: self._not_found,
            InvalidInput: self._invalid,
            StoreError: self._outage,
            SchemaError: self._outage,
            DenpyoError: self._invalid,
            Exception: self._failed,
        }

    def _viewer(self, request: Request) -> Access | None:
        access: Access | None = getattr(request.state, "access", None)
        return access

    async def _refused(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return await self.error(request, self._viewer(request), exc.status, str(exc))

    async def _not_let_in(self, request: Request, exc: Exception) -> Response:
        """A credential refused with a reason (a back-off, a name the shared token may
        not take): said at once, with when to come back."""
        assert isinstance(exc, NotLetIn)
        return PlainTextResponse(str(exc), status_code=exc.status, headers=exc.headers)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own answers (no such page, a method a route does not take) as
        the dashboard's page, with their headers (405's Allow)."""
        assert isinstance(exc, HTTPException)
        if exc.status_code in (204, 304):  # answers without a body
            return Response(status_code=exc.status_code, headers=exc.headers)
        return await self.error(
            request,
            self._viewer(request),
            exc.status_code,
            str(exc.detail),
            headers=dict(exc.headers or {}),
        )

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return await self.error(request, self._viewer(request), 404, str(exc))

    async def _invalid(self, request: Request, exc: Exception) -> Response:
        """Input the ledger refused (an unknown status, a time out of range, a row id
        that cannot be one): the person's to fix, so 400 with the reason."""
        return await self.error(request, self._viewer(request), 400, str(exc))

    async def _outage(self, request: Request, exc: Exception) -> Response:
        """The database did not answer (unreachable, refused, or without the denpyo
        tables): 503, never a 400, since the request was fine. The driver's words go
        to the log, not the page; missing tables say so (the fix is `migrate`)."""
        log.warning("dashboard: the database failed: %s", exc)
        text = "the database did not answer this request; try again in a moment"
        return await self.error(
            request,
            self._viewer(request),
            503,
            str(exc) if isinstance(exc, SchemaError) else text,
            unchanged=False,
            headers={"retry-after": "5"},
        )

    async def _failed(self, request: Request, exc: Exception) -> Response:
        """Anything else is a fault of the dashboard: 500, the error page, no details
        (Starlette raises the error on, so the server logs it)."""
        text = "the dashboard failed on this request; its log says why"
        try:
            return await self.error(request, None, 500, text, unchanged=False)
        except Exception:  # the page itself cannot be made: still answer
            return PlainTextResponse(text, status_code=500)

    def _path(self, request: Request) -> str:
        return request.scope.get("root_path") or "/"

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking ledger call on the dashboard's threads, off the event loop;
        its errors reach `exception_handlers` as they are."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.db, functools.partial(fn, *args, **kwargs))

    async def status(self) -> op.StatusReport:
        """The counts, read at most every COUNTS_TTL seconds however many people look,
        and never more than a tenth of the time (SQLite and MariaDB count by reading
        the table: at a million rows that takes a good part of a second)."""
        started = time.monotonic()
        if self.counts is None or started >= self.counts[0]:
            report = await self.call(op.status, self.ledger)
            took = time.monotonic() - started
            self.counts = (time.monotonic() + max(COUNTS_TTL, 10 * took), report)
        return self.counts[1]


def local_path(target: str | None) -> str | None:
    """A redirect target only within this site (a path, never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return None
    return target


def row_id(value: str, what: str) -> int:
    """A row id a request names (`before=`, a ticked row): digits, 1 to MAX_ID, else
    refused; a database would overflow or read it as no row at all."""
    text = value.strip()
    if text.isascii() and text.isdigit() and len(text) <= len(str(MAX_ID)):
        number = int(text)
        if 1 <= number <= MAX_ID:
            return number
    raise InvalidInput(f"{what} must be a row id (a whole number, 1 to {MAX_ID}), not {value!r}")


def optional_id(value: str | None, what: str) -> int | None:
    """`row_id`, where an empty or absent value means none (the first page)."""
    return row_id(value, what) if value else None


def yes_no(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(value or "")
