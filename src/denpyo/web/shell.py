"""The dashboard's shell: who may see and do what (through `auth.Gate`), rendering
with the security headers, and the ledger's calls on the dashboard's own threads.
The pages (app.py) and the actions (actions.py) are built on it."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.errors import DenpyoError, SubmissionNotFound
from denpyo.web import present
from denpyo.web.auth import (
    CSRF_COOKIE,
    Access,
    Gate,
    new_csrf,
)

log = logging.getLogger("denpyo.web")

Handler = Callable[[Request], Awaitable[Response]]
DB_THREADS = 4
COUNTS_TTL = 2.0
CHALLENGE = {"www-authenticate": 'Bearer realm="denpyo"'}
WRONG_TOKEN_PAUSE = 1.0
"""Seconds a wrong token waits for its answer: guessing one is slow."""
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class Refused(Exception):
    """A request that may not do what it asks: answered with `status` and nothing done."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Shell:
    """What every page and action of the dashboard shares, over one ledger."""

    def __init__(
        self,
        ledger: Ledger,
        gate: Gate,
        redact: Sequence[str],
        refresh: float,
    ) -> None:
        self.ledger = ledger
        self.gate = gate
        self.redact = frozenset(name.lower() for name in redact)
        self.refresh = refresh
        folder = resources.files("denpyo.web")
        self.templates = Jinja2Templates(directory=str(folder / "templates"))
        self.templates.env.globals.update(age=present.age, when=present.when)
        self.static = StaticFiles(directory=str(folder / "static"))
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
                wants_page = "text/html" in request.headers.get("accept", "") and (
                    "hx-request" not in request.headers
                )
                if wants_page:
                    target = request.url_for("login").include_query_params(next=request.url.path)
                    return self._secure(
                        RedirectResponse(str(target.path) + "?" + target.query, status_code=303)
                    )
                return self._secure(
                    PlainTextResponse("sign in first", status_code=401, headers=CHALLENGE)
                )
            try:
                return await handler(request, access)
            except Refused as exc:
                return await self.error(request, access, exc.status, str(exc))

        return guarded

    def action(
        self,
        handler: Callable[[Request, Access, dict[str, str], list[str]], Awaitable[Response]],
        *,
        act: bool = True,
    ) -> Handler:
        """A POST: signed in, may act (unless `act` is False), same origin, and with the
        CSRF token (a Bearer request, which no browser sends by itself, needs none).
        Anything refused is refused before the form is even read."""

        async def guarded(request: Request) -> Response:
            access = await self.gate.identify(request)
            if access is None:
                return self._secure(
                    PlainTextResponse("sign in first", status_code=401, headers=CHALLENGE)
                )
            form = await request.form()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            ids = [v for v in form.getlist("ids") if isinstance(v, str)]
            if not self.gate.bearer(request) and (
                not self.gate.same_origin(request)
                or not self.gate.csrf_ok(request, fields.get("csrf_token"))
            ):
                return self._secure(
                    PlainTextResponse("refused: not from this dashboard's page", status_code=403)
                )
            if act and not access.can_act:
                return self._secure(PlainTextResponse("refused: read-only", status_code=403))
            try:
                return await handler(request, access, fields, ids)
            except Refused as exc:
                return await self.error(request, access, exc.status, str(exc))

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
        return self._secure(response)

    async def error(
        self, request: Request, access: Access | None, status: int, text: str
    ) -> Response:
        return await self.render(request, access, "error.html", status=status, message=text)

    def _secure(self, response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    def _path(self, request: Request) -> str:
        return request.scope.get("root_path") or "/"

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.db, functools.partial(fn, *args, **kwargs))

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking ledger call in a thread; its refusals become a 400 or 404."""
        try:
            return await self.run(fn, *args, **kwargs)
        except SubmissionNotFound as exc:
            raise Refused(404, str(exc)) from exc
        except DenpyoError as exc:
            raise Refused(400, str(exc)) from exc

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


def int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def yes_no(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(value or "")
