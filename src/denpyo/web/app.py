"""The dashboard: an ASGI app (Starlette) over the operator's functions.

Pages read through `denpyo.engine.operator`, and every action is one of its
functions (retry, abandon, resend, mark synced; pause and resume a channel), with
the person's name and note, exactly as the CLI runs them: one place for each
piece of logic.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from denpyo.domain.actions import Approval
from denpyo.domain.filters import Filter, parse_statuses
from denpyo.domain.people import Role, clean_name, parse_role
from denpyo.domain.rules import allowed_actions
from denpyo.domain.sealed import SealedPayload
from denpyo.domain.status import Status
from denpyo.domain.text import visible
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.engine.people import Directory
from denpyo.errors import ConfigurationError, InvalidInput
from denpyo.web import present
from denpyo.web.action_pages import ActionPages
from denpyo.web.actions import Actions, done_text
from denpyo.web.auth import (
    DEVICE_COOKIE,
    DEVICE_SECONDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Access,
    AuthHook,
    Gate,
    NotLetIn,
    parse_proxies,
    strong_token,
)
from denpyo.web.shell import (
    HostCheck,
    Refused,
    SecurityHeaders,
    local_path,
    log,
    optional_id,
    yes_no,
)

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
"""The times a filter may name: every database compares them, and no row is older."""


class Dashboard(ActionPages, Actions):
    """The routes, the sign-in, and the pages over one ledger."""

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.page(self.overview), name="overview"),
            Route("/partials/overview", self.page(self.overview_part), name="overview_part"),
            Route("/submissions", self.page(self.submissions), name="submissions"),
            Route("/submissions/{id:int}", self.page(self.submission), name="submission"),
            Route("/channels/{name}", self.page(self.channel), name="channel"),
            *[
                Route(
                    f"/channels/{{name}}/{verb}",
                    self.action(handler),
                    methods=["POST"],
                    name=f"{verb}_channel",
                )
                for verb, handler in (("pause", self.pause), ("resume", self.resume))
            ],
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
            Route("/bulk/plan", self.action(self.bulk_plan), methods=["POST"], name="bulk_plan"),
            Route("/actions", self.page(self.actions_page), name="actions"),
            Route("/actions.csv", self.page(self.actions_export), name="actions_export"),
            Route("/actions/{id:int}", self.page(self.action_page), name="action"),
            Route("/partials/actions/{id:int}", self.page(self.action_part), name="action_part"),
            Route("/approvals", self.page(self.approvals_page), name="approvals"),
            *[
                Route(
                    f"/actions/{{id:int}}/{verb}",
                    self.action(handler),
                    methods=["POST"],
                    name=f"action_{verb}",
                )
                for verb, handler in (
                    ("confirm", self.confirm),
                    ("approve", self.approve),
                    ("decline", self.decline),
                )
            ],
            Route(
                "/actions/{id:int}/do/{verb}",
                self.action(self.steer),
                methods=["POST"],
                name="action_steer",
            ),
            Mount("/static", app=self.static, name="static"),
        ]

    # -- sign in ------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        if not self.gate.has_form:
            return await self.error(request, None, 404, "this dashboard signs in through its host")
        return await self.render(
            request,
            None,
            "login.html",
            next=local_path(request.query_params.get("next")),
            users=self.gate.users is not None,
        )

    async def login(self, request: Request) -> Response:
        """The sign-in form: a name and a token (the dashboard's, or the person's own of
        the users file, whose name must then be theirs). A wrong one is logged and
        puts the address in a back-off (the throttle), which the page then names; a
        right one starts a session on this server."""
        if not self.gate.has_form:
            return await self.error(request, None, 404, "this dashboard signs in through its host")
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not self.gate.same_origin(request) or not self.gate.csrf_ok(
            request, fields.get("csrf_token")
        ):
            return PlainTextResponse("refused: not from the sign-in page", status_code=403)
        name = clean_name(fields.get("name"))
        status, headers, error = 401, {}, "your name is needed, for the history"
        signed = None
        if name:
            try:
                signed = await self.gate.check(request, "form", fields.get("token", ""), name)
                error = "wrong name or token" if self.gate.users is not None else "wrong token"
            except NotLetIn as refused:
                status, headers, error = refused.status, refused.headers, str(refused)
        if signed is None:
            page = await self.render(
                request,
                None,
                "login.html",
                status=status,
                error=error,
                next=local_path(fields.get("next")),
                users=self.gate.users is not None,
            )
            page.headers.update(headers)
            return page
        target = local_path(fields.get("next")) or str(request.url_for("overview").path)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.gate.sessions.start(signed),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            path=self._path(request),
            secure=request.url.scheme == "https",
        )
        if self.gate.sessions.device(request.cookies.get(DEVICE_COOKIE)) is None:
            response.set_cookie(
                DEVICE_COOKIE,
                self.gate.sessions.new_device(),
                max_age=DEVICE_SECONDS,
                httponly=True,
                samesite="strict",
                path=self._path(request),
                secure=request.url.scheme == "https",
            )
        return response

    async def logout(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        """Ends the session here, on the server: its cookie, replayed, is refused."""
        self.gate.sessions.end(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse(str(request.url_for("login").path), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=self._path(request))
        return response

    # -- pages ---------------------------------------------------------------------------

    async def overview_context(self) -> dict[str, Any]:
        report = await self.status()
        rows = await self.call(op.outcomes, self.ledger, 24)
        return {
            "report": report,
            "channel_rows": present.channel_rows(report.channel_states),
            "statuses": list(Status),
            "chart": present.chart(rows, report.now),
            "totals": present.totals(rows),
        }

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
            "needs_person": q.get("needs_person", ""),
            "resolved": q.get("resolved", ""),
            "since": q.get("since", ""),
            "until": q.get("until", ""),
            "key_prefix": q.get("key_prefix", ""),
            "error_text": q.get("error_text", ""),
            "q": search,
        }
        if search:
            if channel is None:
                raise Refused(400, "choose the channel to search in")
            page = await self.call(op.search, self.ledger, channel, search, q.get("after") or None)
        else:
            before = optional_id(q.get("before"), "before")
            flt = await self.filter(q, channel)
            page = await self.call(op.page, self.ledger, flt, before)
        page = self.scrubbed(page)  # the list shows each row's last error
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
            channels=await self.call(op.channels_with_rows, self.ledger),
            statuses=list(Status),
            first=not (q.get("before") or q.get("after")),
            newest={k: v for k, v in filters.items() if v},
            bulk_filter={} if search else {k: v for k, v in filters.items() if v and k != "q"},
        )

    def scrubbed(self, page: op.Page) -> op.Page:
        """A list's rows as a person sees them: their errors and notes scrubbed of the
        rows' hidden values (a list shows no payload)."""
        return op.Page([self.redaction.submission(sub) for sub in page.rows], page.older)

    async def filter(self, q: QueryParams, channel: str | None) -> Filter:
        """The list's filter from the query; a time Python cannot shift, or one
        outside EARLIEST..LATEST, is the person's to fix (400), not a fault."""
        since, until = q.get("since") or None, q.get("until") or None
        try:
            flt: Filter = await self.call(
                op.make_filter,
                self.ledger,
                since=since,
                until=until,
                statuses=parse_statuses([q.get("status", "")]),
                channel=channel,
                in_doubt=yes_no(q.get("in_doubt")),
                needs_person=True if q.get("needs_person") else None,
                resolved=yes_no(q.get("resolved")),
                key_prefix=q.get("key_prefix") or None,
                error_text=q.get("error_text") or None,
            )
        except InvalidInput:
            raise
        except (OverflowError, ValueError) as exc:
            given = " and ".join(f"{n} {v!r}" for n, v in (("since", since), ("until", until)) if v)
            raise InvalidInput(f"{given}: not a time that can be used ({exc})") from None
        for name, value in (("since", flt.since), ("until", flt.until)):
            if value is not None and not EARLIEST <= value <= LATEST:
                raise InvalidInput(
                    f"{name} {q.get(name)!r} is out of range: use a time from "
                    f"{EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d}"
                )
        return flt

    async def submission(self, request: Request, access: Access, **context: Any) -> Response:
        """A row, its payload redacted; `?full=1` shows it whole to an admin (each time
        logged with their name), and is refused to anyone else."""
        full = request.query_params.get("full") == "1"
        if full and not access.can_see_full:
            raise Refused(403, "only an admin may see a row's full payload")
        found: op.History = await self.call(op.history, self.ledger, request.path_params["id"])
        if full:
            log.info(
                "dashboard: full payload of #%d (%s:%s) shown to %s",
                found.submission.id,
                visible(found.submission.channel),
                visible(found.submission.key),
                visible(access.name),
            )
        shown = found if full else found.redacted(self.redaction)
        sub = shown.submission
        chain_back = await self.call(op.replaced, self.ledger, sub)
        return await self.render(
            request,
            access,
            "submission.html",
            status=context.pop("status", 200),
            h=shown,
            sub=sub,
            actions=allowed_actions(found.submission, superseded_by=found.superseded_by),
            payload="" if sub.removed_at else present.pretty(sub.payload),
            sealed=isinstance(sub.payload, SealedPayload),
            chain_back=chain_back[::-1],
            redacted=shown != found,
            full=full,
            done=done_text(request.query_params.get("done"), sub.supersedes),
            **context,
        )

    async def channel(self, request: Request, access: Access) -> Response:
        """A channel: its mode, who changed it and why, its pause or resume, and its
        latest changes."""
        name = self.known_channel(request.path_params["name"])
        view: op.ChannelView = await self.call(op.channel_view, self.ledger, name, 50)
        return await self.render(
            request,
            access,
            "channel.html",
            ch=present.channel_row(name, view.state),
            history=view.history,
            flash=present.CHANNEL_DONE.get(request.query_params.get("done") or ""),
        )

    async def attention(self, request: Request, access: Access) -> Response:
        return await self.render(request, access, "attention.html", **await self.queue(request))

    async def attention_part(self, request: Request, access: Access) -> Response:
        return await self.render(request, access, "_attention.html", **await self.queue(request))

    async def queue(self, request: Request) -> dict[str, Any]:
        before = optional_id(request.query_params.get("before"), "before")
        page = self.scrubbed(await self.call(op.attention, self.ledger, before))
        counts = await self.call(op.attention_counts, self.ledger)
        return {"page": page, "counts": counts, "first": before is None}

    async def metrics_text(self, request: Request, access: Access) -> Response:
        body = await self.call(self.metrics.render)
        from denpyo.metrics import CONTENT_TYPE

        return Response(body, media_type=CONTENT_TYPE)


def create_app(
    ledger: Ledger,
    *,
    token: str | None = None,
    users: str | os.PathLike[str] | None = None,
    trusted_header: str | None = None,
    trusted_proxies: Sequence[str] = (),
    proxy_role: Role | str = Role.VIEWER,
    auth: AuthHook | None = None,
    read_only: bool = False,
    session_key: bytes | None = None,
    approval: Approval | None = None,
    redact: Iterable[str] = (),
    refresh: float = 5.0,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The dashboard as an ASGI app, to serve with uvicorn or mount in your own app.

    It is never open: give at least one way in.

    - `token`: one token for one person or a small team, who sign in with it at
      /login (typing their name, for the history) as admins; scripts send
      `Authorization: Bearer TOKEN`. At least 16 characters, 8 of them different.
    - `users`: the path of a users file (`denpyo users add NAME --role ROLE`): each
      person signs in with their name and their own token, with their own role;
      the file is read again when it changes.
    - `trusted_header` (`"X-Forwarded-User"`) with `trusted_proxies` (networks,
      `["10.0.0.0/8", "127.0.0.1"]`): a proxy in front signs people in and names
      them in the header, believed only from those addresses; their role is the
      users file's when they are listed there, else `proxy_role` (a viewer).
    - `auth`: your own check, a callable given the request that returns an
      `Access` (`Access.admin(name)`, `Access.operator(name)`, `Access.read_only(name)`)
      or None (refused); it may be async.

    `read_only` makes every person a viewer on this server: it hides and refuses
    every action. `session_key` (bytes, at least 16) signs the session cookies;
    without it a random one is made at start. `approval`: a two-person rule for the
    actions taken here (`Approval()`: marking synced, forced actions on rows in
    doubt, and bulk actions over 100 rows wait for a second person with the
    `approver` role); without it, the ledger's. `redact`: more payload fields shown
    as "[redacted]", added to the ledger's rule (`Ledger(redact=...)`: the defaults,
    or the ledger's own `Redaction`, and $DENPYO_REDACT). An admin may see a row
    whole (`?full=1`, logged). `refresh`: seconds between the overview's and the
    queue's refreshes. `allowed_hosts`: the names it is served as (`Host`), besides
    IP addresses and `localhost`; another Host is answered 400 (`["*"]`: any; None,
    the default: not checked here, as when mounted in an app that checks it).
    """
    if token is None and users is None and trusted_header is None and auth is None:
        raise ConfigurationError(
            "the dashboard needs a token, a users file, a trusted header or an auth hook: "
            "it is never open"
        )
    if trusted_header is not None and not trusted_proxies:
        raise ConfigurationError(
            f"trusted header {trusted_header!r} needs the addresses of the proxies that set "
            "it (trusted_proxies, --trusted-proxy): from anywhere else anyone could send it"
        )
    if trusted_header is not None and not trusted_header.strip():
        raise ConfigurationError("the trusted header needs a name (X-Forwarded-User)")
    if session_key is not None and len(session_key) < 16:
        raise ConfigurationError(
            f"the session key is {len(session_key)} bytes: at least 16 are needed"
        )
    gate = Gate(
        token=strong_token(token) if token is not None else None,
        auth=auth,
        read_only=read_only,
        users=Directory(users) if users is not None else None,
        trusted_header=trusted_header.strip() if trusted_header else None,
        trusted_proxies=parse_proxies(trusted_proxies),
        proxy_role=_role(proxy_role),
        session_key=session_key,
        allowed_hosts=_hosts(allowed_hosts),
    )
    if approval is not None and not isinstance(approval, Approval):
        raise ConfigurationError(f"approval is an Approval or None, not {approval!r}")
    if approval is not None and users is None and trusted_header is None and auth is None:
        raise ConfigurationError(
            "a two-person rule needs people who sign in as themselves (a users file, a "
            "trusted proxy's header or an auth hook): with one shared token anyone may "
            "type any name"
        )
    if isinstance(redact, str):
        raise ConfigurationError(f"redact is a list of field names, not the string {redact!r}")
    try:
        redaction = ledger.redaction.adding(redact)
    except InvalidInput as exc:
        raise ConfigurationError(f"redact: {exc}") from None
    dashboard = Dashboard(ledger, gate, redaction, refresh)
    dashboard.approval = approval
    app = DashboardApp(routes=dashboard.routes(), exception_handlers=dashboard.exception_handlers())
    app.state.dashboard = dashboard
    return app


def _hosts(hosts: Sequence[str] | None) -> list[str] | None:
    if hosts is None:
        return None
    if isinstance(hosts, str):
        raise ConfigurationError(f"allowed_hosts is a list of names, not the string {hosts!r}")
    found = [h.strip() for h in hosts]
    if not all(found):
        raise ConfigurationError("allowed_hosts: a name cannot be empty")
    return found


def _role(role: Role | str) -> Role:
    try:
        return parse_role(role)
    except InvalidInput as exc:
        raise ConfigurationError(f"proxy_role: {exc}") from None


class DashboardApp(Starlette):
    """Starlette with `SecurityHeaders` outside everything, its error middleware
    included: the 500 page is sent from there, and carries the headers too; then
    `HostCheck`, before anything reads the request."""

    def build_middleware_stack(self) -> ASGIApp:
        inner = HostCheck(super().build_middleware_stack(), self.state.dashboard.gate)
        return SecurityHeaders(inner)
