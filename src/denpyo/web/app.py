"""The dashboard: an ASGI app (Starlette) over the operator's functions.

Pages read through `denpyo.engine.operator`, and every action is one of its
functions (retry, abandon, resend, mark synced), with the person's name and
note, exactly as the CLI runs them: one place for each piece of logic.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from denpyo.domain.filters import parse_statuses
from denpyo.domain.status import Status
from denpyo.domain.submission import Submission
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.errors import ConfigurationError, DenpyoError, SubmissionNotFound
from denpyo.web import present
from denpyo.web.auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Access,
    AuthHook,
    Gate,
    clean_name,
    new_csrf,
)

log = logging.getLogger("denpyo.web")

Handler = Callable[[Request], Awaitable[Response]]
MAX_BULK = 500
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


class Dashboard:
    """The pages and actions over one ledger."""

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

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.page(self.overview), name="overview"),
            Route("/partials/overview", self.page(self.overview_part), name="overview_part"),
            Route("/submissions", self.page(self.submissions), name="submissions"),
            Route("/submissions/{id:int}", self.page(self.submission), name="submission"),
            Route("/attention", self.page(self.attention), name="attention"),
            Route("/partials/attention", self.page(self.attention_part), name="attention_part"),
            Route("/metrics", self.page(self.metrics_text), name="metrics"),
            Route("/login", self.login_page, name="login"),
            Route("/login", self.login, methods=["POST"], name="login_post"),
            Route("/logout", self.action(self.logout, act=False), methods=["POST"], name="logout"),
            *[
                Route(
                    f"/submissions/{{id:int}}/{verb}",
                    self.action(handler),
                    methods=["POST"],
                    name=verb.replace("-", "_"),
                )
                for verb, handler in (
                    ("retry", self.retry),
                    ("abandon", self.abandon),
                    ("resend", self.resend),
                    ("mark-synced", self.mark_synced),
                )
            ],
            Route("/bulk", self.action(self.bulk), methods=["POST"], name="bulk"),
            Mount("/static", app=self.static, name="static"),
        ]

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

    # -- sign in ------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        if self.gate.token is None:
            return await self.error(request, None, 404, "this dashboard signs in through its host")
        return await self.render(
            request, None, "login.html", next=_local(request.query_params.get("next"))
        )

    async def login(self, request: Request) -> Response:
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not self.gate.same_origin(request) or not self.gate.csrf_ok(
            request, fields.get("csrf_token")
        ):
            return self._secure(
                PlainTextResponse("refused: not from the sign-in page", status_code=403)
            )
        name = clean_name(fields.get("name"))
        if not self.gate.check_token(fields.get("token", "")) or not name:
            message = "wrong token" if name else "your name is needed, for the history"
            if name:
                log.warning("dashboard: a wrong token from %s", request.client)
                await asyncio.sleep(WRONG_TOKEN_PAUSE)
            return await self.render(
                request,
                None,
                "login.html",
                status=401,
                error=message,
                next=_local(fields.get("next")),
            )
        target = _local(fields.get("next")) or str(request.url_for("overview").path)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.gate.session(name),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            path=self._path(request),
            secure=request.url.scheme == "https",
        )
        return self._secure(response)

    async def logout(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        response = RedirectResponse(str(request.url_for("login").path), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=self._path(request))
        return self._secure(response)

    # -- pages ---------------------------------------------------------------------------

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

    async def overview_context(self) -> dict[str, Any]:
        report = await self.status()
        await self.run(self._fold)
        rows = await self.call(self.ledger.store.outcomes_per_minute, 24)
        return {
            "report": report,
            "statuses": list(Status),
            "chart": present.chart(rows, report.now),
            "totals": present.totals(rows),
        }

    def _fold(self) -> None:
        """Bring the chart up to date (bounded work); a database this dashboard may
        only read keeps the chart the workers fold."""
        try:
            self.ledger.store.fold_outcomes()
        except DenpyoError as exc:
            log.debug("cannot fold outcomes here: %s", exc)

    async def overview(self, request: Request, access: Access) -> Response:
        return await self.render(request, access, "overview.html", **await self.overview_context())

    async def overview_part(self, request: Request, access: Access) -> Response:
        return await self.render(request, access, "_overview.html", **await self.overview_context())

    async def submissions(self, request: Request, access: Access) -> Response:
        q = request.query_params
        channel = q.get("channel") or None
        search = (q.get("q") or "").strip()
        filters = {
            "status": q.get("status", ""),
            "channel": channel or "",
            "in_doubt": q.get("in_doubt", ""),
            "needs_attention": q.get("needs_attention", ""),
            "resolved": q.get("resolved", ""),
            "since": q.get("since", ""),
            "until": q.get("until", ""),
            "q": search,
        }
        if search:
            if channel is None:
                raise Refused(400, "choose the channel to search in")
            page = await self.call(op.search, self.ledger, channel, search, q.get("after") or None)
        else:
            flt = await self.call(
                op.make_filter,
                self.ledger,
                since=q.get("since") or None,
                until=q.get("until") or None,
                statuses=parse_statuses([q.get("status", "")]),
                channel=channel,
                in_doubt=_yes_no(q.get("in_doubt")),
                needs_attention=True if q.get("needs_attention") else None,
                resolved=_yes_no(q.get("resolved")),
            )
            page = await self.call(op.page, self.ledger, flt, _int(q.get("before")))
        older = None
        if page.older is not None:
            older = {k: v for k, v in filters.items() if v}
            older["after" if search else "before"] = str(page.older)
        return await self.render(
            request,
            access,
            "submissions.html",
            page=page,
            filters=filters,
            older=older,
            channels=await self.call(self.ledger.store.channels),
            statuses=list(Status),
            first=not (q.get("before") or q.get("after")),
            newest={k: v for k, v in filters.items() if v},
        )

    async def submission(self, request: Request, access: Access, **context: Any) -> Response:
        found: op.History = await self.call(op.history, self.ledger, request.path_params["id"])
        sub = found.submission
        chain_back: list[Submission] = []
        previous = sub.supersedes
        while previous is not None and len(chain_back) < 20:
            older = await self.call(self.ledger.store.get, previous)
            if older is None:
                break
            chain_back.append(older)
            previous = older.supersedes
        shown = present.redact(sub.payload, self.redact)
        return await self.render(
            request,
            access,
            "submission.html",
            status=context.pop("status", 200),
            h=found,
            sub=sub,
            payload=present.pretty(shown),
            chain_back=chain_back[::-1],
            redacted=shown != sub.payload,
            **context,
        )

    async def attention(self, request: Request, access: Access) -> Response:
        return await self.render(request, access, "attention.html", **await self.queue(request))

    async def attention_part(self, request: Request, access: Access) -> Response:
        return await self.render(request, access, "_attention.html", **await self.queue(request))

    async def queue(self, request: Request) -> dict[str, Any]:
        before = _int(request.query_params.get("before"))
        page = await self.call(op.attention, self.ledger, before)
        counts = await self.call(self.ledger.store.count_attention)
        return {"page": page, "counts": counts, "first": before is None}

    async def metrics_text(self, request: Request, access: Access) -> Response:
        body = await self.run(self.metrics.render)
        from denpyo.metrics import CONTENT_TYPE

        return self._secure(Response(body, media_type=CONTENT_TYPE))

    # -- actions -------------------------------------------------------------------------

    async def act(
        self, request: Request, access: Access, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Run an operator function for this person; a refusal re-renders the row's page
        with the reason (nothing was written)."""
        try:
            return await self.call(fn, self.ledger, *args, by=access.name, **kwargs)
        except Refused as exc:
            if exc.status == 404:
                raise
            self.counts = None
            raise Refused(409, str(exc)) from exc

    def done(self, request: Request, submission_id: int, what: str) -> Response:
        self.counts = None  # the next page shows the counts after the change
        target = request.url_for("submission", id=submission_id).include_query_params(done=what)
        return self._secure(RedirectResponse(f"{target.path}?{target.query}", status_code=303))

    async def retry(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        force = fields.get("force_in_doubt") == "yes"
        await self.act(
            request,
            access,
            op.retry,
            refs=[sid],
            note=fields.get("note") or "",
            force_in_doubt=force,
        )
        return self.done(request, sid, "retried")

    async def abandon(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        await self.act(request, access, op.resolve_abandon, sid, note=fields.get("note") or "")
        return self.done(request, sid, "abandoned")

    async def mark_synced(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        remote_id = fields.get("remote_id") or ""
        note = fields.get("note") or ""
        await self.act(request, access, op.resolve_mark_synced, sid, remote_id=remote_id, note=note)
        return self.done(request, sid, "marked synced")

    async def resend(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        payload: Any = op.SAME_PAYLOAD
        edited = (fields.get("payload") or "").strip()
        if edited:
            try:
                parsed = json.loads(edited)
            except ValueError as exc:
                raise Refused(400, f"the payload is not valid JSON: {exc}") from None
            original = await self.call(op.find, self.ledger, sid)
            payload = present.restore(parsed, original.payload, self.redact)
        force = fields.get("force_in_doubt") == "yes"
        note = fields.get("note") or ""
        done = await self.act(
            request,
            access,
            op.resolve_resend,
            sid,
            note=note,
            payload=payload,
            force_in_doubt=force,
        )
        assert done.created is not None
        return self.done(request, done.created.id, f"created as the resend of #{sid}")

    async def bulk(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        """Acts on the rows the person saw and ticked (their ids, frozen in the form),
        never on "whatever matches now"; first a dry run that shows what would happen to
        each, then, with a note, the action on the rows the dry run accepted."""
        action = fields.get("action", "")
        if action not in ("retry", "abandon"):
            raise Refused(400, "choose retry or abandon")
        numbers = [_int(i) for i in ids]
        chosen = list(dict.fromkeys(n for n in numbers if n is not None))[:MAX_BULK]
        if not chosen:
            raise Refused(400, "tick the rows to act on")
        note = (fields.get("note") or "").strip()
        confirmed = fields.get("confirm") == "yes"
        plan: list[tuple[int, str | None]] = []
        for sid in chosen:
            try:
                await self._one(action, sid, note or "dry run", access, dry_run=True)
                plan.append((sid, None))
            except Refused as exc:
                plan.append((sid, str(exc)))
        results: list[tuple[int, str | None]] = []
        if confirmed:
            await self.call(op.check_note, note, f"a bulk {action}")
            for sid, reason in plan:
                if reason is not None:
                    continue
                try:
                    await self._one(action, sid, note, access, dry_run=False)
                    results.append((sid, None))
                except Refused as exc:
                    results.append((sid, str(exc)))
            self.counts = None
        return await self.render(
            request,
            access,
            "bulk.html",
            action=action,
            plan=plan,
            results=results,
            confirmed=confirmed,
            ok=[sid for sid, reason in plan if reason is None],
            note=note,
        )

    async def _one(
        self, action: str, sid: int, note: str, access: Access, *, dry_run: bool
    ) -> None:
        if action == "retry":
            await self.call(
                op.retry, self.ledger, refs=[sid], note=note, by=access.name, dry_run=dry_run
            )
        else:
            await self.call(
                op.resolve_abandon, self.ledger, sid, note=note, by=access.name, dry_run=dry_run
            )


def create_app(
    ledger: Ledger,
    *,
    token: str | None = None,
    read_only: bool = False,
    auth: AuthHook | None = None,
    redact: Sequence[str] = present.DEFAULT_REDACT,
    refresh: float = 5.0,
) -> Starlette:
    """The dashboard as an ASGI app, to serve with uvicorn or mount in your own app.

    Give a `token` (people sign in with it at /login; scripts send
    `Authorization: Bearer TOKEN`), or `auth`, your own check: a callable given the
    request that returns `Access.admin(name)`, `Access.read_only(name)` or None
    (refused), or both. `read_only` hides and refuses every action. `redact`: payload
    fields shown as "[redacted]" (at any depth, any case). `refresh`: seconds between
    the overview's and the queue's refreshes.
    """
    if token is None and auth is None:
        raise ConfigurationError("the dashboard needs a token or an auth hook: it is never open")
    if token is not None and len(token) < 8:
        raise ConfigurationError("the dashboard's token must be at least 8 characters")
    dashboard = Dashboard(ledger, Gate(token, auth, read_only), redact, refresh)
    app = Starlette(routes=dashboard.routes())
    app.state.dashboard = dashboard
    return app


def _local(target: str | None) -> str | None:
    """A redirect target only within this site (a path, never another host)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return None
    return target


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _yes_no(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(value or "")
