"""The rows: `list` and `show`, their tables, and the row filters, defined once for
every command that selects rows (`list`, `retry`, `bulk`), so that a filter a person
learnt on one command means the same on the others."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import click
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from denpyo.cli import redacting, render
from denpyo.cli.app import Env, F, fail, full_option, json_option, main, pass_env
from denpyo.domain.actions import ActionKind
from denpyo.domain.filters import DEFAULT_LIMIT, Filter, parse_statuses
from denpyo.domain.holders import actor_of
from denpyo.domain.rules import RowActions, allowed_actions
from denpyo.domain.sealed import SealedPayload
from denpyo.domain.submission import Submission
from denpyo.domain.text import visible
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger
from denpyo.engine.operator import History, clip_text, label
from denpyo.engine.processes import EXIT_ATTENTION

channel_option = click.option("--channel", metavar="NAME", help="Only this channel.")


@dataclass(frozen=True, slots=True)
class RowFilters:
    """What a person typed to select rows, before it is read against the database clock."""

    statuses: tuple[str, ...]
    channel: str | None
    in_doubt: bool | None
    needs_person: bool | None
    resolved: bool | None
    since: str | None
    until: str | None
    key_prefix: str | None
    error_text: str | None
    limit: int

    @property
    def given(self) -> bool:
        """Any condition at all (the limit aside)."""
        return bool(self.statuses) or any(getattr(self, name) is not None for name in _CONDITIONS)

    def to_filter(self, ledger: Ledger) -> Filter:
        """The `Filter`; relative times count back from the database's clock."""
        check_filter_channel(ledger, self.channel)
        return op.make_filter(
            ledger,
            since=self.since,
            until=self.until,
            statuses=parse_statuses(self.statuses),
            channel=self.channel,
            in_doubt=self.in_doubt,
            needs_person=self.needs_person,
            resolved=self.resolved,
            key_prefix=self.key_prefix,
            error_text=self.error_text,
            limit=self.limit,
        )


def check_filter_channel(
    ledger: Ledger, channel: str | None, *, registered_only: bool = False
) -> None:
    """A channel named in a filter that has no rows is most often a typo, which must
    not read as "nothing to see": refused when the application (--app) does not
    register it either, else said on stderr (a channel may have no rows yet). With
    `registered_only` (a change, not a filter), the application's channels are the
    only ones it may name."""
    if channel is None or channel in ledger.channels:
        return
    op.check_channel(channel)  # a name no channel can have: that error, first and alone
    known = op.channels_with_rows(ledger)
    if channel in known and not (registered_only and ledger.channels):
        return
    with_rows = visible(", ".join(known)) or "none"
    if ledger.channels:
        registered = ", ".join(sorted(ledger.channels))
        fail(
            f"no channel named {channel!r}: the application registers {registered}; "
            f"channels with rows: {with_rows}"
        )
    render.err.print(
        f"note: channel {channel!r} has no rows (channels with rows: {with_rows})",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


_NAMES = tuple(f.name for f in fields(RowFilters))
_CONDITIONS = tuple(name for name in _NAMES if name not in ("statuses", "limit"))


def row_filters(*, limit: int, limit_help: str) -> Callable[[F], F]:
    """Add the row filters to a command, which receives them as `rows: RowFilters`."""
    options = [
        click.option(
            "--status",
            "statuses",
            multiple=True,
            metavar="STATUS",
            help="requesting, synced, failed or rejected; repeat or separate by commas.",
        ),
        channel_option,
        click.option(
            "--in-doubt/--not-in-doubt", default=None, help="Only rows in doubt (or not)."
        ),
        click.option(
            "--needs-person", is_flag=True, default=None, help="Only rows a person must see."
        ),
        click.option(
            "--resolved/--unresolved", default=None, help="Only rows a person resolved (or not)."
        ),
        click.option(
            "--since",
            metavar="WHEN",
            help="Created at or after: 2h, 3d, 1w, today, 2024-05-01, 2024-05-01T09:00Z.",
        ),
        click.option("--until", metavar="WHEN", help="Created before (same forms as --since)."),
        click.option("--key-prefix", metavar="TEXT", help="Business key starts with TEXT."),
        click.option(
            "--error-text", metavar="TEXT", help="Last error contains TEXT (case-sensitive)."
        ),
        click.option("--limit", type=int, default=limit, show_default=True, help=limit_help),
    ]

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            rows = RowFilters(**{name: kwargs.pop(name) for name in _NAMES})
            return fn(*args, rows=rows, **kwargs)

        for option in reversed(options):
            command = option(command)
        return command  # type: ignore[return-value]

    return decorate


@main.command("list")
@row_filters(limit=DEFAULT_LIMIT, limit_help="At most this many rows.")
@click.option("--check", is_flag=True, help="Exit 1 when any row matches.")
@full_option
@json_option
@pass_env
@click.pass_context
def list_(
    ctx: click.Context, env: Env, rows: RowFilters, check: bool, full: bool, as_json: bool
) -> None:
    """Submissions matching the filters, newest first. Piped (not a terminal), one
    tab-separated line per row, after a header line.

    \b
    Example: denpyo list --status failed --since 1d
    Example: denpyo list --needs-person --json | jq '.[].id'
    """
    flt = rows.to_filter(env.ledger)
    listed = op.list_submissions(env.ledger, flt, reading=True)
    shown = redacting.rule(env, full=full, what=f"{len(listed)} rows listed")
    subs = [shown.submission(sub) for sub in listed]
    if as_json:
        render.emit_json([op.submission_json(s, full=full) for s in subs])
    else:
        show_list(subs, env.ledger.now(), flt.limit, full=full)
    if check and subs:
        ctx.exit(EXIT_ATTENTION)


@main.command()
@click.argument("ref", metavar="ID|CHANNEL:KEY")
@full_option
@json_option
@pass_env
def show(env: Env, ref: str, full: bool, as_json: bool) -> None:
    """One submission and its history, oldest event first.

    \b
    Example: denpyo show 42
    Example: denpyo show invoice-email:order:42 --full
    """
    whole = op.history(env.ledger, ref)
    found = whole.redacted(redacting.rule(env, full=full, what=op.label(whole.submission)))
    if as_json:
        render.emit_json(found.to_json(full=full))
    else:
        show_history(found, full=full)


LIST_COLUMNS = (
    ("id", "right"),
    ("channel", "left"),
    ("key", "left"),
    ("status", "left"),
    ("tries", "right"),
    ("created", "left"),
    ("updated", "left"),
    ("last error / resolution / hold", "left"),
)


LIST_CUT = (("last error / resolution / hold", 12), ("channel", 8), ("updated", 8), ("created", 8))


LIST_CUT_FURTHER = (("last error / resolution / hold", 0), ("channel", 4))
"""What a narrow terminal cuts, in this order, each down to its width in `LIST_CUT`;
if that is not enough, "created" and then "updated" are left out, and then the
last column and the channel cut further (`LIST_CUT_FURTHER`): never the id, the key
(what a person searches for), the status or the tries. Each row stays one line."""


def show_list(subs: Sequence[Submission], now: datetime, limit: int, *, full: bool = False) -> None:
    """A table on a terminal, a line per row; piped, one plain tab-separated line per
    row (a table squeezed into a width nobody set is unreadable, and lines are what
    tools read), its count on stderr."""
    width = None if full else 60
    holders = render.Holders()
    rows = [
        (
            str(sub.id),
            visible(sub.channel),
            visible(sub.key),
            render.status_text(sub, gone=holders.gone(sub)),
            str(sub.attempts),
            render.ago(sub.created_at, now),
            render.ago(sub.updated_at, now),
            render.short(
                sub.resolution
                or sub.last_error
                or render.hold_text(sub, now, gone=holders.gone(sub), brief=True)
                or render.unsettled_text(sub),
                width,
            ),
        )
        for sub in subs
    ]
    more = "; more may match (raise --limit)" if len(subs) >= limit else ""
    count = f"{len(subs)} row{'s' if len(subs) != 1 else ''}{more}" if subs else ""
    if not render.out.is_terminal:
        if rows:
            lines = [[name for name, _ in LIST_COLUMNS]]
            lines += [[cell.plain if isinstance(cell, Text) else cell for cell in r] for r in rows]
            click.echo("\n".join("\t".join(_one_cell(c) for c in line) for line in lines))
        click.echo(count or "no submissions match", err=True)
        return
    if not rows:
        render.out.print("no submissions match")
        return
    widths = _list_widths(rows, render.out.width)
    table = Table(show_lines=False, box=None, pad_edge=False)
    shown = [n for n, (name, _) in enumerate(LIST_COLUMNS) if widths[name]]
    for n in shown:
        name, justify = LIST_COLUMNS[n]
        table.add_column(
            name,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=True,
            overflow="ellipsis",
            width=widths[name],
        )
    for row in rows:
        cells = [row[n] for n in shown]
        table.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in cells))
    render.out.print(table)
    render.out.print(count, style="dim")


def _list_widths(rows: Sequence[Sequence[str | Text]], room: int) -> dict[str, int]:
    """Each column's width in `room` columns (0: left out): as wide as its widest cell,
    the columns of `LIST_CUT` cut in turn when that does not fit, down to their floor;
    "created", then "updated", left out when even the floors do not fit."""
    widths = {
        name: max([len(name), *(len(_plain(row[n])) for row in rows)])
        for n, (name, _) in enumerate(LIST_COLUMNS)
    }
    floors = dict(LIST_CUT)

    def excess(sizes: dict[str, int]) -> int:
        shown = [width for width in sizes.values() if width]
        return sum(shown) + 2 * (len(shown) - 1) - room  # two spaces between columns

    for name in ("created", "updated"):
        if excess({n: min(w, floors.get(n, w)) for n, w in widths.items()}) > 0:
            widths[name] = 0
    for cuts in (LIST_CUT, LIST_CUT_FURTHER):
        for name, floor in cuts:
            over = excess(widths)
            if over > 0 and widths[name] > floor:
                widths[name] = max(floor, widths[name] - over)
    return widths


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _one_cell(text: str) -> str:
    """A cell of a tab-separated line: no tab or line break inside."""
    return " ".join(text.split()) if any(c in text for c in "\t\n\r") else text


def show_history(found: History, *, full: bool = False) -> None:
    sub, now = found.submission, found.now
    clip = (lambda text: text) if full else clip_text
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    # Each value is plain text (stored parts through `visible`), never markup.
    rows: list[tuple[str, str | Text]] = [
        ("status", render.status_text(sub)),
        ("channel:key", visible(f"{sub.channel}:{sub.key}")),
        ("idempotency key", visible(sub.idempotency_key)),
        (
            "attempts",
            str(sub.attempts) + (f" ({why})" if (why := render.unsettled_text(sub)) else ""),
        ),
        ("remote id", visible(sub.remote_id or "-")),
        ("created", f"{render.ago(sub.created_at, now)}  ({render.stamp(sub.created_at)})"),
        ("updated", f"{render.ago(sub.updated_at, now)}  ({render.stamp(sub.updated_at)})"),
    ]
    if sub.synced_at:
        rows.append(
            ("synced", f"{render.ago(sub.synced_at, now)}  ({render.stamp(sub.synced_at)})")
        )
    if sub.next_attempt_at:
        rows.append(("next step", render.ago(sub.next_attempt_at, now)))
    if found.window_closes_at:
        verb = "closes" if found.window_closes_at > now else "closed"
        rows.append(
            (
                "idempotency window",
                f"{verb} {render.ago(found.window_closes_at, now)}  "
                f"({render.stamp(found.window_closes_at)})",
            )
        )
    if sub.locked_by:
        gone = render.Holders().gone(sub)
        rows[0] = ("status", render.status_text(sub, gone=gone))
        held = render.hold_text(sub, now, gone=gone) or (
            f"{visible(actor_of(sub.locked_by))}, lease ended {render.ago(sub.locked_until, now)}"
        )
        rows.append(("held by", held))
    if sub.last_error:
        rows.append(("last error", f"{visible(clip(sub.last_error))} ({sub.error_kind})"))
    if sub.resolution:
        rows.append(("resolution", visible(clip(sub.resolution))))
    if sub.ordering_key:
        rows.append(("ordering key", visible(sub.ordering_key)))
    if sub.supersedes:
        rows.append(("supersedes", f"#{sub.supersedes}"))
    if sub.removed_at is not None:
        where = f"archived to {visible(sub.archived_to)}" if sub.archived_to else "pruned"
        rows.append(
            (
                "removed",
                f"{render.ago(sub.removed_at, now)}  ({render.stamp(sub.removed_at)}), {where}",
            )
        )
    if found.superseded_by:
        rows.append(("superseded by", visible(label(found.superseded_by))))
    rows.append(("actions", actions_text(allowed_actions(sub, superseded_by=found.superseded_by))))
    for name, value in rows:
        grid.add_row(name, value if isinstance(value, Text) else Text(value))
    render.out.print(Panel(grid, title=f"submission #{sub.id}", title_align="left", expand=False))
    if found.forgotten is not None:
        render.out.print(Text(visible(found.forgotten.describe())), soft_wrap=True)
    if sub.removed_at is not None:
        kept = f"in the archive at {visible(sub.archived_to)}" if sub.archived_to else "not kept"
        render.out.print(f"payload and history: {kept}; the key and its outcome stay", markup=False)
        return
    if isinstance(sub.payload, SealedPayload):  # its text, not a JSON string
        render.out.print(Text("payload: " + visible(sub.payload)), soft_wrap=True, style="yellow")
    elif found.forgotten is None:
        render.out.print(Text("payload: " + clip(render.json_text(sub.payload))), soft_wrap=True)
    table = Table(title="history", title_justify="left")
    for name in ("when", "event", "move", "try", "actor", "detail", "ms"):
        table.add_column(
            name,
            justify="right" if name in ("try", "ms") else "left",
            overflow="fold" if name in ("actor", "detail") else "ellipsis",
            no_wrap=name == "when",
        )
    for event in found.events:
        move = Text()
        if event.from_status:
            move.append(event.from_status.value, render.STATUS_STYLE[event.from_status])
            move.append(" → ")
        if event.to_status:
            move.append(event.to_status.value, render.STATUS_STYLE[event.to_status])
        table.add_row(
            f"{event.at:%m-%d %H:%M:%S}  {render.ago(event.at, now)}",
            render.plain(event.kind),
            move,
            str(event.attempt),
            render.plain(event.actor),
            Text(render.short(event.detail, None if full else 80)),
            "" if event.duration_ms is None else str(event.duration_ms),
        )
    render.out.print(table)


ACTION_COMMANDS = {
    ActionKind.RETRY: "retry",
    ActionKind.ABANDON: "resolve --abandon",
    ActionKind.RESEND: "resolve --resend",
    ActionKind.MARK_SYNCED: "resolve --mark-synced",
}


def actions_text(actions: RowActions) -> str:
    """The commands the row accepts now, as `retry` and `resolve` would take them."""
    offered = [
        ACTION_COMMANDS[a.action] + (" --force-in-doubt" if a.needs_force else "")
        for a in actions.offered
    ]
    return ", ".join(offered) or "none"
