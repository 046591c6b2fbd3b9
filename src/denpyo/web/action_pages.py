"""The dashboard's action log, its two-person requests and its bulk actions over a
whole filtered set: pages and POSTs over `denpyo.engine.operator`'s actions, as
the CLI's `actions`, `approvals`, `approve`, `decline` and `bulk` run them.

A bulk action runs on the dashboard's own threads (`BulkThreads`), a batch per
transaction; its page reads its progress from the database, so it survives a
reload, and an action in progress nobody carries on (the dashboard restarted) is
taken up again when its page is looked at, once its holder's lease has ended.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from denpyo.domain.actions import (
    BULK_KINDS,
    ROW_KINDS,
    ActionKind,
    ActionRecord,
    ActionState,
)
from denpyo.domain.filters import parse_when
from denpyo.domain.people import same_name
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.errors import InvalidInput
from denpyo.web.auth import Access
from denpyo.web.shell import Refused, Shell, optional_id, yes_no

log = logging.getLogger("denpyo.web")

PAGE = 50
RUN_THREADS = 2
MAX_EXPORT = 100_000


class BulkThreads:
    """The bulk actions this dashboard carries out, each on a thread of its own pool
    (never the pages' database threads), at most once at a time per action here; the
    holder's lease keeps two dashboards from both carrying one out."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.pool = ThreadPoolExecutor(RUN_THREADS, thread_name_prefix="denpyo-bulk")
        self.active: set[int] = set()
        self.lock = threading.Lock()

    def start(self, action_id: int) -> None:
        with self.lock:
            if action_id in self.active:
                return
            self.active.add(action_id)
        self.pool.submit(self._run, action_id)

    def _run(self, action_id: int) -> None:
        try:
            op.carry_out(self.ledger, action_id)
        except Exception:
            log.exception("dashboard: bulk action #%d stopped on an error", action_id)
        finally:
            with self.lock:
                self.active.discard(action_id)


class ActionPages(Shell):
    """The action log, the requests, and bulk actions."""

    _bulk_threads: BulkThreads | None = None

    @property
    def bulk_threads(self) -> BulkThreads:
        if self._bulk_threads is None:
            self._bulk_threads = BulkThreads(self.ledger)
        return self._bulk_threads

    # -- pages ----------------------------------------------------------------------------

    async def actions_page(self, request: Request, access: Access) -> Response:
        q = request.query_params
        before = optional_id(q.get("before"), "before")
        records = await self.call(self._log, q, before, PAGE + 1)
        filters = {k: q.get(k, "") for k in ("by", "kind", "state", "since")}
        older = None
        if len(records) > PAGE:
            records = records[:PAGE]
            older = {**{k: v for k, v in filters.items() if v}, "before": str(records[-1].id)}
        return await self.render(
            request,
            access,
            "actions.html",
            records=records,
            filters=filters,
            older=older,
            first=before is None,
            kinds=list(ActionKind),
            states=list(ActionState),
            export={k: v for k, v in filters.items() if v},
        )

    async def actions_export(self, request: Request, access: Access) -> Response:
        """The filtered log as CSV, for an auditor's spreadsheet."""
        records = await self.call(self._log, request.query_params, None, MAX_EXPORT)
        body = op.actions_csv(records)
        stamp = datetime.now().strftime("%Y%m%d-%H%M")
        return Response(
            body,
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": f'attachment; filename="denpyo-actions-{stamp}.csv"'},
        )

    def _log(self, q: QueryParams, before: int | None, limit: int) -> list[ActionRecord]:
        since = (q.get("since") or "").strip()
        return op.action_log(
            self.ledger,
            by=(q.get("by") or "").strip() or None,
            kind=q.get("kind") or None,
            state=q.get("state") or None,
            since=parse_when(since, self.ledger.now()) if since else None,
            before=before,
            limit=limit,
        )

    async def action_page(self, request: Request, access: Access) -> Response:
        return await self.render(
            request, access, "action.html", **await self._action_context(request, access)
        )

    async def action_part(self, request: Request, access: Access) -> Response:
        return await self.render(
            request, access, "_action.html", **await self._action_context(request, access)
        )

    async def _action_context(self, request: Request, access: Access) -> dict[str, Any]:
        action_id = request.path_params["id"]
        q = request.query_params
        outcome = q.get("outcome") or None
        after = optional_id(q.get("after"), "after") or 0
        record, rows = await self.call(
            op.action_detail, self.ledger, action_id, after=after, outcome=outcome, limit=PAGE
        )
        now = await self.call(self.ledger.now)
        if (
            record.kind in ROW_KINDS
            and record.state is ActionState.IN_PROGRESS
            and (record.locked_until is None or record.locked_until < now)
        ):
            self.bulk_threads.start(record.id)  # nobody carries it on: this dashboard does
        mine = same_name(record.person, access.name)
        return {
            "r": record,
            "rows": rows,
            "outcome": outcome or "",
            "more": rows[-1].submission_id if len(rows) == PAGE else None,
            "percent": 100 * (record.done + record.skipped) // record.total if record.total else 0,
            "may_confirm": mine and access.can_act and record.state is ActionState.PLANNED,
            "may_decide": access.can_approve
            and not mine
            and record.state is ActionState.AWAITING_APPROVAL,
            "may_steer": access.can_act and (mine or access.can_manage),
            "flash": _flash(q.get("done") or "", record.state),
        }

    async def approvals_page(self, request: Request, access: Access) -> Response:
        waiting = await self.call(
            op.action_log, self.ledger, state=ActionState.AWAITING_APPROVAL.value, limit=500
        )
        return await self.render(request, access, "approvals.html", records=waiting[::-1])

    # -- POSTs ----------------------------------------------------------------------------

    async def bulk_plan(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        """The dry run of a bulk action over every row the list's filter finds now: the
        set frozen, nothing else written; the person confirms it on its page."""
        kind = _bulk_kind(fields.get("action", ""))
        flt = await self.call(self._filter, fields)
        plan: op.DryRun = await self.call(
            op.plan_bulk,
            self.ledger,
            kind,
            flt,
            note=fields.get("note") or "",
            by=access.name,
            force_in_doubt=False,
            target=flt.describe(),
        )
        return self._to_action(request, plan.action.id, "planned")

    def _filter(self, fields: dict[str, str]) -> Any:
        from denpyo.domain.filters import parse_statuses

        channel = fields.get("channel") or None
        if channel is not None:
            op.check_channel(channel)
        return op.make_filter(
            self.ledger,
            since=fields.get("since") or None,
            until=fields.get("until") or None,
            statuses=parse_statuses([fields.get("status", "")]),
            channel=channel,
            in_doubt=yes_no(fields.get("in_doubt")),
            needs_person=True if fields.get("needs_person") else None,
            resolved=yes_no(fields.get("resolved")),
            key_prefix=fields.get("key_prefix") or None,
            error_text=fields.get("error_text") or None,
        )

    async def confirm(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        action_id = request.path_params["id"]
        started = await self.call(
            op.confirm_bulk, self.ledger, action_id, by=access.name, approval=self.approval
        )
        if isinstance(started, op.Requested):
            return self._to_action(request, action_id, "awaiting_approval")
        self.bulk_threads.start(action_id)
        return self._to_action(request, action_id, "in_progress")

    async def approve(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        return await self._decide(request, access, fields, approve=True)

    async def decline(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        return await self._decide(request, access, fields, approve=False)

    async def _decide(
        self, request: Request, access: Access, fields: dict[str, str], *, approve: bool
    ) -> Response:
        """An approver's decision on another person's request. An approved request is
        carried out on this dashboard's threads (a bulk action) or at once (a row)."""
        if access.typed:
            raise Refused(
                403,
                "a name typed with the shared token is not a second person: "
                "sign in with your own token (denpyo users) to decide requests",
            )
        if not access.can_approve:
            raise Refused(403, "only an approver decides requests")
        action_id = request.path_params["id"]
        note = fields.get("note") or ""
        if approve:
            await self.call(self._approve_then_run, action_id, note, access.name)
        else:
            await self.call(op.decline, self.ledger, action_id, note=note, by=access.name)
        self.counts = None
        return self._to_action(request, action_id, "approved" if approve else "declined")

    def _approve_then_run(self, action_id: int, note: str, by: str) -> None:
        """Approve; a request on a few rows is carried out now (`approve` does), a large
        one goes on in the background once its first batch is done."""
        record = op.action_detail(self.ledger, action_id, limit=1)[0]
        if record.total > op.BATCH:
            op.decide(self.ledger, action_id, note=note, by=by, approve=True)
            self.bulk_threads.start(action_id)
        else:
            op.approve(self.ledger, action_id, note=note, by=by)

    async def steer(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        """Pause, resume or cancel an action: its person, or an admin."""
        action_id = request.path_params["id"]
        verb = request.path_params["verb"]
        record: ActionRecord = (await self.call(op.action_detail, self.ledger, action_id, limit=1))[
            0
        ]
        if not same_name(record.person, access.name) and not access.can_manage:
            raise Refused(403, f"action #{action_id} is {record.person}'s: an admin may steer it")
        change = {"pause": op.pause_action, "resume": op.resume_action, "cancel": op.cancel_action}
        if verb not in change:
            raise Refused(404, "pause, resume or cancel")
        if not await self.call(change[verb], self.ledger, action_id):
            raise Refused(409, f"action #{action_id} is {record.state}: it cannot {verb}")
        if verb == "resume":
            self.bulk_threads.start(action_id)
        return self._to_action(
            request,
            action_id,
            {"pause": "paused", "resume": "in_progress", "cancel": "cancelled"}[verb],
        )

    def _to_action(self, request: Request, action_id: int, code: str) -> Response:
        target = request.url_for("action", id=action_id).include_query_params(done=code)
        return RedirectResponse(f"{target.path}?{target.query}", status_code=303)


_FLASH = {
    "planned": ("Dry run ready: nothing has changed yet.", {ActionState.PLANNED}),
    "awaiting_approval": (
        "Sent for approval: nothing happens until a second person approves.",
        {ActionState.AWAITING_APPROVAL},
    ),
    "in_progress": (
        "Started: the rows are being worked through, a batch at a time.",
        {ActionState.IN_PROGRESS},
    ),
    "approved": ("Approved.", {ActionState.IN_PROGRESS, ActionState.DONE}),
    "declined": ("Declined: nothing was done.", {ActionState.DECLINED}),
    "paused": ("Paused after its current batch.", {ActionState.PAUSED}),
    "cancelled": (
        "Cancelled: the rows it had not reached stay as they are.",
        {ActionState.CANCELLED},
    ),
}
"""What an action's redirect may announce (`?done=CODE`), and while the action is in
which states: only these texts are shown, and none once the action moved on (a
reload of "Started" after it is done)."""


def _flash(code: str, state: ActionState) -> str | None:
    text, states = _FLASH.get(code, ("", set()))
    return text if state in states else None


def _bulk_kind(value: str) -> ActionKind:
    try:
        kind = ActionKind(value)
    except ValueError:
        kind = None
    if kind not in BULK_KINDS:
        raise InvalidInput("choose retry, abandon or resend")
    assert kind is not None
    return kind
