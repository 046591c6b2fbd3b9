"""Commands over the action log: what people did (`actions`, `action`), the requests
waiting for a second person (`approvals`, `approve`, `decline`), and bulk actions
on every row a filter finds (`bulk retry|abandon|resend`, `bulk continue|pause|cancel`)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from denpyo.cli import render
from denpyo.cli.actions import by_option, note_option
from denpyo.cli.app import Env, fail, json_option, main, pass_env
from denpyo.cli.rows import RowFilters, row_filters
from denpyo.domain.actions import (
    ROW_KINDS,
    ActionKind,
    ActionRecord,
    ActionRow,
    ActionState,
    person_of,
)
from denpyo.domain.filters import parse_when
from denpyo.domain.text import visible
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger

F = TypeVar("F", bound=Callable[..., Any])


@main.command()
@click.option("--by", "person", metavar="NAME", help="Only this person's actions.")
@click.option("--kind", metavar="KIND", help="retry, abandon, resend, mark_synced, pause, resume.")
@click.option(
    "--state",
    metavar="STATE",
    help="planned, awaiting_approval, declined, lapsed, in_progress, paused, done, cancelled.",
)
@click.option("--since", metavar="WHEN", help="At or after: 2h, 3d, today, 2026-05-01.")
@click.option("--until", metavar="WHEN", help="Before (same forms as --since).")
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    help="At most this many actions.",
)
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (for an auditor's spreadsheet).")
@json_option
@pass_env
def actions(
    env: Env,
    person: str | None,
    kind: str | None,
    state: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    as_csv: bool,
    as_json: bool,
) -> None:
    """Every action by a person, newest first: who, when, what, why, on how many
    rows, and who approved it. A bulk action is one entry: `denpyo action ID`
    shows its rows.

    \b
    Example: denpyo actions --by alice --since 7d
    Example: denpyo actions --kind mark_synced --since 2026-11-01 --csv > actions.csv
    """
    if as_csv and as_json:
        fail("choose --csv or --json, not both")
    ledger = env.ledger
    now = ledger.now() if (since or until) else None
    records = op.action_log(
        ledger,
        by=person,
        kind=kind,
        state=state,
        since=parse_when(since, now) if since and now else None,
        until=parse_when(until, now) if until and now else None,
        limit=limit,
    )
    if as_json:
        render.emit_json([op.action_json(r) for r in records])
    elif as_csv:
        sys.stdout.write(op.actions_csv(records))
    else:
        show_log(records, ledger.now())


def show_log(records: Sequence[ActionRecord], now: Any) -> None:
    """One line per action; the counts, times and states are never cut (the action
    and the note wrap), and "approved by" only when some action has a second person."""
    if not records:
        render.out.print("no actions")
        return
    table = Table(title=f"{len(records)} actions, newest first", title_justify="left")
    for name in ("id", "when", "by", "state", "rows"):
        table.add_column(name, no_wrap=True)
    table.add_column("action", ratio=2)
    table.add_column("note", ratio=2)
    approvals = any(r.approver for r in records)
    if approvals:
        table.add_column("decided by", no_wrap=True)
    for r in records:
        rows = "" if r.total == 0 else f"{r.done}/{r.total}"
        if r.skipped:
            rows += f" ({r.skipped} skipped)"
        cells: list[str | Text] = [
            str(r.id),
            render.ago(r.created_at, now),
            render.plain(r.person),
            r.state.value,
            rows,
            render.plain(f"{r.kind} {r.target}"),
            render.plain(render.short(r.note, 80)),
        ]
        if approvals:
            cells.append(render.plain(r.decided_by or ""))
        table.add_row(*cells)
    render.out.print(table)


@main.command()
@click.argument("action_id", type=click.IntRange(1), metavar="ID")
@click.option(
    "--outcome", type=click.Choice(["done", "skipped", "pending"]), help="Only these rows."
)
@click.option(
    "--limit", type=click.IntRange(1, 100_000), default=50, show_default=True, help="Rows shown."
)
@json_option
@pass_env
def action(env: Env, action_id: int, outcome: str | None, limit: int, as_json: bool) -> None:
    """One action: who, why, its dry run, where it stands, and its rows with what
    happened to each (skipped: why).

    \b
    Example: denpyo action 12 --outcome skipped
    """
    record, rows = op.action_detail(env.ledger, action_id, outcome=outcome, limit=limit)
    if as_json:
        render.emit_json({**op.action_json(record), "row_outcomes": [row_json(r) for r in rows]})
        return
    show_record(record)
    show_rows(rows)


def row_json(row: ActionRow) -> dict[str, Any]:
    return {
        "submission_id": row.submission_id,
        "outcome": row.outcome.value if row.outcome else "pending",
        "reason": row.reason,
    }


def show_record(r: ActionRecord) -> None:
    lines = [
        f"action #{r.id}: {r.kind} {r.target}",
        f"state: {r.describe().split(': ', 1)[1]}",
        f"by {r.person} at {r.created_at:%Y-%m-%d %H:%M:%S} UTC: {r.note}",
    ]
    if r.approver:
        verb = "declined" if r.state is ActionState.DECLINED else "approved"
        who = person_of(r.approver)
        lines.append(f"{verb} by {who}: {r.decision_note or ''}")
    elif r.state is ActionState.AWAITING_APPROVAL and r.lapses_at is not None:
        lines.append(f"waits for a second person until {r.lapses_at:%Y-%m-%d %H:%M} UTC")
    if r.plan and r.plan.get("counts"):
        counts = ", ".join(f"{n} {what}" for what, n in r.plan["counts"].items())
        lines.append(f"dry run: {counts}")
    for line in lines:
        render.out.print(render.plain(line))


def show_rows(rows: Sequence[ActionRow]) -> None:
    if not rows:
        return
    table = Table(title="rows", title_justify="left")
    for name in ("id", "outcome", "why"):
        table.add_column(name)
    for row in rows:
        outcome = row.outcome.value if row.outcome else "pending"
        table.add_row(str(row.submission_id), outcome, render.plain(row.reason or ""))
    render.out.print(table)


# -- two-person rules -------------------------------------------------------------------


@main.command()
@json_option
@pass_env
def approvals(env: Env, as_json: bool) -> None:
    """The requests waiting for a second person, oldest first: what each would do
    (its dry run), who asked and why. `denpyo approve ID` or `denpyo decline ID`.

    \b
    Example: denpyo approvals
    """
    waiting = op.action_log(env.ledger, state=ActionState.AWAITING_APPROVAL.value, limit=1000)[::-1]
    if as_json:
        render.emit_json([op.action_json(r) for r in waiting])
        return
    if not waiting:
        render.out.print("no request waits for a second person")
        return
    for record in waiting:
        show_record(record)
        render.out.print("")


@main.command()
@click.argument("action_id", type=click.IntRange(1), metavar="ID")
@note_option
@by_option
@json_option
@pass_env
def approve(env: Env, action_id: int, note: str | None, by: str | None, as_json: bool) -> None:
    """Approve another person's request: it is carried out now, and each row's
    history names you both. You cannot approve your own.

    \b
    Example: denpyo approve 12 --note "checked the provider's console" --by bob
    """
    record = op.approve(env.ledger, action_id, note=note or "", by=by)
    _decided(record, as_json)


@main.command()
@click.argument("action_id", type=click.IntRange(1), metavar="ID")
@note_option
@by_option
@json_option
@pass_env
def decline(env: Env, action_id: int, note: str | None, by: str | None, as_json: bool) -> None:
    """Decline another person's request, with a note: nothing is done.

    \b
    Example: denpyo decline 12 --note "not in the provider's console" --by bob
    """
    record = op.decline(env.ledger, action_id, note=note or "", by=by)
    _decided(record, as_json)


def _decided(record: ActionRecord, as_json: bool) -> None:
    if as_json:
        render.emit_json(op.action_json(record))
    else:
        show_record(record)


# -- bulk actions -----------------------------------------------------------------------


def carry_out_options(fn: F) -> F:
    """`--batch` and `--lease`: how a command carries a bulk action out."""
    batch = click.option(
        "--batch",
        type=click.IntRange(1, 10_000),
        default=op.BATCH,
        show_default=True,
        help="Rows per transaction.",
    )
    lease = click.option(
        "--lease",
        type=click.FloatRange(min=0.1),
        default=op.LEASE,
        show_default=True,
        help="Seconds after which `bulk continue` may take over, should this command stop.",
    )
    return batch(lease(fn))


@main.group()
def bulk() -> None:
    """Retry, abandon or resend every row a filter finds: a dry run over the whole
    set, the set frozen as its ids, then batches with progress, which can be
    paused, continued and cancelled from here or the dashboard.

    \b
    Example: denpyo bulk retry --status failed --channel sms --since 1d --note "INC-12 over"
    Example: denpyo bulk continue 12
    """


def _bulk_command(kind: ActionKind) -> None:
    @bulk.command(name=kind.value)
    @row_filters(limit=1000, limit_help="Refused: a bulk action takes every row found.")
    @click.option(
        "--force-in-doubt", is_flag=True, help="Also rows in doubt (their call may have arrived)."
    )
    @note_option
    @by_option
    @click.option("--dry-run", is_flag=True, help="Show what it would do; change nothing.")
    @click.option("--yes", is_flag=True, help="Do not ask before acting.")
    @carry_out_options
    @json_option
    @pass_env
    def command(
        env: Env,
        rows: RowFilters,
        force_in_doubt: bool,
        note: str | None,
        by: str | None,
        dry_run: bool,
        yes: bool,
        batch: int,
        lease: float,
        as_json: bool,
    ) -> None:
        if not rows.given:
            fail(f"select the rows to {kind} (--status, --channel, --since, ...)")
        source = click.get_current_context().get_parameter_source("limit")
        if source is click.core.ParameterSource.COMMANDLINE:
            fail("a bulk action takes every row the filters find: narrow the filters, not --limit")
        ledger = env.ledger
        flt = rows.to_filter(ledger)
        plan = op.plan_bulk(
            ledger,
            kind,
            flt,
            note=note or "",
            by=by,
            force_in_doubt=force_in_doubt,
            target=flt.describe(),
            batch=batch,
        )
        if dry_run or not plan.acting:
            op.cancel_action(ledger, plan.action.id)
            _show_plan(plan, as_json, dry_run=True)
            return
        if not as_json:
            _show_plan(plan, as_json, dry_run=False)
            if not yes and not click.confirm(f"{kind} {plan.acting} rows?", err=True):
                op.cancel_action(ledger, plan.action.id)
                render.err.print("nothing done")
                return
        started = op.confirm_bulk(ledger, plan.action.id, by=by)
        if isinstance(started, op.Requested):
            render.show_requested(started.action.id, started.reason, as_json)
            return
        _carry_on(ledger, started, batch, lease, as_json)

    command.__doc__ = (
        f"{kind.value.capitalize()} every row the filters find now.\n\n"
        "First a dry run over the whole set (how many rows each outcome), then, after\n"
        "you confirm (or with --yes), the rows frozen at the dry run, in batches.\n\n"
        f"\b\nExample: denpyo bulk {kind.value} --status failed --channel sms --since 1d "
        '--note "provider outage INC-12"'
    )


for _kind in (ActionKind.RETRY, ActionKind.ABANDON, ActionKind.RESEND):
    _bulk_command(_kind)


def _show_plan(plan: op.DryRun, as_json: bool, *, dry_run: bool) -> None:
    if as_json:
        render.emit_json({**plan.to_json(), "dry_run": dry_run, "rows": plan.action.total})
        return
    render.out.print(
        render.plain(f"{plan.action.kind} {plan.action.target}: {plan.action.total} rows")
    )
    for what, n in sorted(plan.counts.items(), key=lambda item: -item[1]):
        samples = ", ".join(f"#{i}" for i in plan.samples.get(what, []))
        render.out.print(render.plain(f"  {n:>7}  {what}  (e.g. {samples})"))


def _carry_on(
    ledger: Ledger, record: ActionRecord, batch: int, lease: float, as_json: bool
) -> None:
    """Run the action to its end with a progress bar (stderr); Ctrl-C leaves it in progress
    for `bulk continue`."""
    with Progress(
        TextColumn(f"action #{record.id}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=render.err,
        disable=as_json,
    ) as bar:
        task = bar.add_task("rows", total=record.total, completed=record.done + record.skipped)

        def moved(now: ActionRecord) -> None:
            bar.update(task, completed=now.done + now.skipped)

        final = op.carry_out(ledger, record.id, batch=batch, lease=lease, progress=moved)
    if as_json:
        render.emit_json(op.action_json(final))
    else:
        show_record(final)


@bulk.command(name="continue")
@click.argument("action_id", type=click.IntRange(1), metavar="ID")
@carry_out_options
@json_option
@pass_env
def bulk_continue(env: Env, action_id: int, batch: int, lease: float, as_json: bool) -> None:
    """Carry a bulk action on to its end: a paused one is resumed, one whose holder
    stopped (a closed terminal, a dead process) is taken over after its lease
    (before that, refused with the time it can be).

    \b
    Example: denpyo bulk continue 12
    """
    ledger = env.ledger
    op.resume_action(ledger, action_id)
    record, _ = op.action_detail(ledger, action_id, limit=1)
    if record.state is not ActionState.IN_PROGRESS:
        fail(f"action #{action_id} is {record.state}: nothing to carry on")
    now = ledger.now()
    held = record.locked_by and record.locked_until is not None and record.locked_until > now
    if held and record.kind in ROW_KINDS:  # a forget, a prune: refused for what they are
        assert record.locked_by is not None and record.locked_until is not None
        left = math.ceil((record.locked_until - now).total_seconds())
        fail(
            f"action #{action_id} is held by {visible(record.locked_by)} until "
            f"{record.locked_until:%Y-%m-%d %H:%M:%S} UTC: if that holder is gone, "
            f"`denpyo bulk continue {action_id}` takes it over then, in {left} s"
        )
    _carry_on(ledger, record, batch, lease, as_json)


@bulk.command(name="pause")
@click.argument("action_id", type=click.IntRange(1), metavar="ID")
@pass_env
def bulk_pause(env: Env, action_id: int) -> None:
    """Stop a bulk action in progress after its current batch (`bulk continue` goes on)."""
    if not op.pause_action(env.ledger, action_id):
        fail(f"action #{action_id} is not in progress")
    render.out.print(f"action #{action_id} paused: `denpyo bulk continue {action_id}` goes on")


@bulk.command(name="cancel")
@click.argument("action_id", type=click.IntRange(1), metavar="ID")
@pass_env
def bulk_cancel(env: Env, action_id: int) -> None:
    """End a bulk action (or withdraw a request) before its remaining rows: they stay as
    they are; what it did stays done."""
    if not op.cancel_action(env.ledger, action_id):
        fail(f"action #{action_id} has ended already")
    render.out.print(f"action #{action_id} cancelled")
