"""The dashboard's actions: each one of the operator's functions (retry, abandon,
resend, mark synced; pause and resume a channel), run with the person's name and
note exactly as the CLI runs them, and bulk actions over the rows a person ticked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from denpyo.domain.actions import ActionKind, RowOutcome
from denpyo.domain.limits import decode_payload, encode_payload
from denpyo.domain.sealed import SealedPayload
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.errors import DenpyoError, SubmissionNotFound
from denpyo.web import present
from denpyo.web.auth import Access
from denpyo.web.shell import OUTAGE, Refused, Shell, row_id

MAX_BULK = 500
DONE = {
    "retried": "retried",
    "abandoned": "abandoned",
    "marked-synced": "marked synced",
    "resent": "created as a resend",
}
"""What an action's redirect may announce (`?done=CODE`) and the words shown for it:
the page shows only these texts, never one the link carries."""


def done_text(code: str | None, supersedes: int | None) -> str | None:
    """The flash for `?done=CODE`: a known outcome's fixed text, else nothing."""
    text = DONE.get(code or "")
    if text is not None and code == "resent" and supersedes is not None:
        text = f"created as the resend of #{supersedes}"
    return text


class Actions(Shell):
    """The POST handlers."""

    async def act(
        self, request: Request, access: Access, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Run an operator function for this person; what the row's state refuses is a
        409 with the reason (nothing was written). A missing row and an outage keep
        their own answers."""
        try:
            return await self.call(fn, self.ledger, *args, by=access.name, **kwargs)
        except (SubmissionNotFound, *OUTAGE):
            raise
        except DenpyoError as exc:
            self.counts = None
            raise Refused(409, str(exc)) from exc

    def done(
        self, request: Request, submission_id: int, code: str, requested: op.Requested | None = None
    ) -> Response:
        """The redirect to the row's page after an action, naming its outcome by code;
        an action a two-person rule kept for a second person goes to its request."""
        if requested is not None:
            target = request.url_for("action", id=requested.action.id)
            return RedirectResponse(f"{target.path}?done=awaiting_approval", status_code=303)
        assert code in DONE, code
        self.counts = None  # the next page shows the counts after the change
        target = request.url_for("submission", id=submission_id).include_query_params(done=code)
        return RedirectResponse(f"{target.path}?{target.query}", status_code=303)

    async def retry(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        force = fields.get("force_in_doubt") == "yes"
        done = await self.act(
            request,
            access,
            op.retry,
            refs=[sid],
            note=fields.get("note") or "",
            force_in_doubt=force,
            approval=self.approval,
        )
        return self.done(request, sid, "retried", done.requested)

    async def abandon(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        note = fields.get("note") or ""
        done = await self.act(
            request, access, op.resolve_abandon, sid, note=note, approval=self.approval
        )
        return self.done(request, sid, "abandoned", done.requested)

    async def mark_synced(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        remote_id = fields.get("remote_id") or ""
        note = fields.get("note") or ""
        done = await self.act(
            request,
            access,
            op.resolve_mark_synced,
            sid,
            remote_id=remote_id,
            note=note,
            approval=self.approval,
        )
        return self.done(request, sid, "marked-synced", done.requested)

    async def resend(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        sid = request.path_params["id"]
        payload: Any = op.SAME_PAYLOAD
        edited = (fields.get("payload") or "").strip()
        if edited:
            parsed = decode_payload(edited)
            # The ledger's own checks (depth, size, text) before anything walks it.
            encode_payload(parsed, self.ledger.max_payload_bytes)
            original = await self.call(op.find, self.ledger, sid)
            payload = self.redaction.restore(parsed, original.payload)
            if isinstance(original.payload, SealedPayload) and parsed == original.payload:
                payload = op.SAME_PAYLOAD  # left as shown: the row's own, refused with why
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
            approval=self.approval,
        )
        if done.requested is not None:
            return self.done(request, sid, "resent", done.requested)
        assert done.created is not None
        return self.done(request, done.created.id, "resent")

    async def pause(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        return await self.switch(request, access, fields, Ledger.pause, "paused", "already-paused")

    async def resume(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        return await self.switch(request, access, fields, Ledger.resume, "resumed", "not-paused")

    async def switch(
        self,
        request: Request,
        access: Access,
        fields: dict[str, str],
        change: Callable[..., bool],
        done: str,
        already: str,
    ) -> Response:
        """A pause or a resume of the channel the path names, with the person's note."""
        name = self.known_channel(request.path_params["name"])
        changed = await self.act(request, access, change, name, note=fields.get("note") or "")
        return self.channel_done(request, name, done if changed else already)

    def known_channel(self, name: str) -> str:
        """A channel a request names: a name a channel can have (else 400), and, when
        the application registers its channels, one of them (else 404, nothing
        written): the CLI's rule for `pause`."""
        op.check_channel(name)
        if not self.ledger.channels or name in self.ledger.channels:
            return name
        registered = ", ".join(sorted(self.ledger.channels))
        raise Refused(404, f"no channel named {name!r}: the application registers {registered}")

    def channel_done(self, request: Request, name: str, code: str) -> Response:
        """The redirect to the channel's page after a pause or a resume, naming its outcome."""
        assert code in present.CHANNEL_DONE, code
        self.counts = None  # the overview shows the channel's new state
        target = request.url_for("channel", name=name).include_query_params(done=code)
        return RedirectResponse(f"{target.path}?{target.query}", status_code=303)

    async def bulk(
        self, request: Request, access: Access, fields: dict[str, str], ids: list[str]
    ) -> Response:
        """Acts on the rows the person saw and ticked (their ids, frozen in the form),
        never on "whatever matches now"; first a dry run that shows what would happen to
        each, then, with a note, the action on the rows the dry run accepted."""
        action = fields.get("action", "")
        if action not in ("retry", "abandon"):
            raise Refused(400, "choose retry or abandon")
        numbers = [row_id(i, "a ticked row") for i in ids]
        chosen = list(dict.fromkeys(numbers))[:MAX_BULK]
        if not chosen:
            raise Refused(400, "tick the rows to act on")
        note = (fields.get("note") or "").strip()
        confirmed = fields.get("confirm") == "yes"
        plan: list[tuple[int, str | None]] = []
        for sid in chosen:
            try:
                await self._dry_run(action, sid, note or "dry run", access)
                plan.append((sid, None))
            except OUTAGE:
                raise
            except DenpyoError as exc:
                plan.append((sid, str(exc)))
        results: list[tuple[int, str | None]] = []
        if confirmed:
            await self.call(op.check_note, note, f"a bulk {action}")
            ok = [sid for sid, reason in plan if reason is None]
            done = await self.call(
                op.act,
                self.ledger,
                ActionKind(action),
                ok,
                target=f"{len(ok)} ticked rows" if len(ok) != 1 else f"#{ok[0]}",
                note=note,
                by=access.name,
                bulk=True,
                approval=self.approval,
            )
            self.counts = None
            if isinstance(done, op.Requested):
                target = request.url_for("action", id=done.action.id)
                return RedirectResponse(f"{target.path}?done=awaiting_approval", status_code=303)
            _, rows = await self.call(op.action_detail, self.ledger, done.id, limit=MAX_BULK)
            results = [
                (
                    row.submission_id,
                    row.reason if row.reason and row.outcome is RowOutcome.SKIPPED else None,
                )
                for row in rows
            ]
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

    async def _dry_run(self, action: str, sid: int, note: str, access: Access) -> None:
        """Every check the action makes on the row, nothing written: raises the refusal."""
        if action == "retry":
            await self.call(
                op.retry, self.ledger, refs=[sid], note=note, by=access.name, dry_run=True
            )
        else:
            await self.call(
                op.resolve_abandon, self.ledger, sid, note=note, by=access.name, dry_run=True
            )
