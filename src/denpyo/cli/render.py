"""Output for people: rich tables, a colour per status, times relative to the
database clock ("3 min ago"). Scripts use `--json` instead, which bypasses this.

Every stored text (a key, an error, a note, a remote id) reaches rich as a `Text`,
which is never read as markup, after `visible` has escaped its control characters:
what a caller or a provider wrote is shown, never obeyed."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from denpyo.domain.actions import ActionKind
from denpyo.domain.audit import AuditReport, DiscrepancyKind, discrepancy_json
from denpyo.domain.channel_state import ChannelEvent, ChannelState, Mode
from denpyo.domain.holders import actor_of, lease_left
from denpyo.domain.provider_events import ProviderEvent
from denpyo.domain.report import ReportRow
from denpyo.domain.rules import RowActions, allowed_actions
from denpyo.domain.sealed import SealedPayload
from denpyo.domain.status import ErrorKind, Status
from denpyo.domain.submission import Submission
from denpyo.domain.text import age, visible
from denpyo.engine.holders import holder_gone
from denpyo.engine.operator import (
    ChannelView,
    History,
    ReconcileSummary,
    Resolution,
    RetryResult,
    StatusReport,
    clip_text,
    label,
)

STATUS_STYLE = {
    Status.REQUESTING: "cyan",
    Status.SYNCED: "green",
    Status.FAILED: "yellow",
    Status.REJECTED: "red",
}


def _width() -> int | None:
    """Piped with no COLUMNS, rich would squeeze every table into 80 columns; give
    it room instead, so that each line is as wide as what it shows."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return PIPED_WIDTH


PIPED_WIDTH = 1000
out = Console(highlight=False, soft_wrap=False, width=_width())
err = Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    """Plain JSON on stdout: no markup, no colour, one document."""
    click.echo(json_text(data, indent=2))


def json_text(data: Any, indent: int | None = None) -> str:
    """`data` as JSON, every control character written as an escape: `json` escapes
    those below a space itself, but leaves DEL and the C1 controls (U+0080 to
    U+009F, which some terminals obey) as they are. The same value either way. What
    is no JSON value (a placeholder for a payload that cannot be read) is its text."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, default=str)
    return _JSON_RAW_CONTROL.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


_JSON_RAW_CONTROL = re.compile(r"[\x7f-\x9f]")


def plain(text: str, style: str = "") -> Text:
    """A stored text for rich: control characters escaped, and no markup read in it
    (a remote id `[/]` must not raise, nor `[link=...]` make a link)."""
    return Text(visible(text), style=style)


def ago(when: datetime | None, now: datetime) -> str:
    """`when` relative to `now`: "just now", "42 s ago", "3 min ago", "in 2 h"."""
    if when is None:
        return "-"
    seconds = (now - when).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 1:
        return "just now"
    if seconds < 60:
        amount = f"{seconds:.0f} s"
    elif seconds < 3600:
        amount = f"{seconds / 60:.0f} min"
    elif seconds < 86400 * 2:
        amount = f"{seconds / 3600:.0f} h"
    else:
        amount = f"{seconds / 86400:.0f} days"
    return f"in {amount}" if future else f"{amount} ago"


def status_text(sub: Submission, *, gone: bool = False) -> Text:
    """The status, and what it is now: in doubt, in flight (held under a live lease:
    `held` instead when the holder is known to be gone), resolved."""
    text = Text(sub.status.value, style=STATUS_STYLE[sub.status])
    if sub.in_doubt:
        text.append(" in doubt", style="bold magenta")
    elif sub.in_flight:
        text.append(" held" if gone else " in flight", style="bold magenta" if gone else "dim")
    if sub.resolution:
        text.append(" resolved", style="dim")
    return text


def hold_text(sub: Submission, now: datetime, *, gone: bool, brief: bool = False) -> str | None:
    """Who holds a row under a live lease, and for how long by the database clock: "W,
    lease ends in N s" (what `show` writes after "held by"), with "holder gone" when
    its process is known to have exited (the row waits for its lease to end, then is
    in doubt and verified); `brief`, for a narrow column, the time left first. None
    when no live lease holds it."""
    left = lease_left(sub.locked_until, now)
    if sub.locked_by is None or left is None or left <= 0:
        return None
    holder = visible(actor_of(sub.locked_by))
    if brief:
        return f"{age(left)} left, " + (f"holder gone: {holder}" if gone else f"held by {holder}")
    return f"{holder}, lease ends in {age(left)}" + (" (holder gone)" if gone else "")


def unsettled_text(sub: Submission) -> str | None:
    """Why the tries of a `requesting` row in doubt leave out its last hold: its
    holder's lease ran out before a settle, so whether that call started is not
    known, and `attempts` counts only calls known to have started (counted when a
    verify finds it, or the row is sent again and settles). None for any other row."""
    if sub.status is not Status.REQUESTING or not sub.in_doubt:
        return None
    return f"attempt {sub.attempts + 1} never settled: not counted until verified"


class Holders:
    """Whether each holder is known to be gone, asked once per holder."""

    def __init__(self) -> None:
        self.known: dict[str, bool] = {}

    def gone(self, sub: Submission) -> bool:
        if sub.locked_by is None:
            return False
        actor = actor_of(sub.locked_by)
        if actor not in self.known:
            self.known[actor] = holder_gone(sub.locked_by)
        return self.known[actor]


def short(text: str | None, width: int | None = 60) -> str:
    """`text` on one line, cut to `width` characters (None: whole), for a column: its
    runs of white space (line breaks too) become one space, and any other control
    character is escaped."""
    if not text:
        return ""
    line = visible(" ".join(text.split()))
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def show_status(report: StatusReport) -> None:
    out.print(Text.assemble("database ", (visible(report.database), "bold")), soft_wrap=True)
    if report.standby is not None:
        lag = report.standby_lag
        behind = "how far behind is unknown" if lag is None else f"{lag:.1f} s behind the primary"
        out.print(
            Text.assemble(
                "read from the standby ", (visible(report.standby), "bold"), f", {behind}"
            ),
            soft_wrap=True,
        )
    if report.stopped:
        show_stopped(report.stopped)
    table = Table(title="Submissions by channel and status", title_justify="left")
    table.add_column("channel")
    for st in Status:
        table.add_column(st.value, justify="right", style=STATUS_STYLE[st])
    table.add_column("total", justify="right", style="bold")
    for name, counts in sorted(report.channels.items()):
        table.add_row(plain(name), *(str(counts[s]) for s in Status), str(sum(counts.values())))
    totals = report.totals
    table.add_section()
    table.add_row("all", *(str(totals[s]) for s in Status), str(sum(totals.values())))
    out.print(table)
    attention = "bold red" if report.needs_attention else "green"
    out.print(
        Text.assemble(
            ("needs attention ", ""),
            (str(report.needs_attention), attention),
            f"   (in doubt {report.in_doubt}, exhausted {report.exhausted}, "
            f"rejected {report.rejected_open}; resolved by a person {report.resolved})",
        )
    )
    oldest = (
        f", the oldest created {age(report.oldest_pending_age)} ago"
        if report.oldest_pending
        else ""
    )
    out.print(f"pending {report.pending}{oldest}")
    for held in report.holdings:
        first, last = (age(max(seconds, 0.0)) for seconds in held.ends_in)
        ends = f"in {last}" if first == last else f"in {first} to {last}"
        line = Text.assemble(
            f"held {held.rows} of {visible(held.channel)} by {visible(actor_of(held.holder))}",
            (", holder gone" if held.gone else "", "bold magenta"),
            f"; leases end {ends}",
            ", then in doubt and verified" if held.gone else "",
        )
        out.print(line, soft_wrap=True)
    if report.durability is not None:
        risk = report.durability.risk is not None
        out.print(
            Text.assemble(
                ("durability ", ""),
                (visible(report.durability.describe()), "bold red" if risk else "green"),
            ),
            soft_wrap=True,
        )
    if report.channel_history:
        [name] = report.channel_states
        show_channel_history(name, report.channel_history, report.now)


MODE_STYLE = {
    Mode.RUNNING: "green",
    Mode.PAUSED: "bold yellow",
    Mode.HELD: "yellow",
    Mode.DOWN: "bold red",
}


def show_stopped(states: Sequence[ChannelState]) -> None:
    """The channels that start no call now, first and one line each (wrapped under
    their own column in a narrow terminal): paused by whom, when and why; held until
    when, and why; down since when, and the next probe."""
    table = Table(
        title="Channels that start no call now", title_justify="left", box=None,
        show_header=False, pad_edge=False,
    )  # fmt: skip
    table.add_column("channel", style="bold", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("why", overflow="fold")
    for state in states:
        table.add_row(
            plain(state.channel), Text(state.mode.value, MODE_STYLE[state.mode]), channel_why(state)
        )
    out.print(table)
    if any(state.mode is Mode.PAUSED for state in states):
        hint = "a paused channel starts no call until `denpyo resume CHANNEL --note TEXT`"
        out.print(Text(hint, style="dim"), soft_wrap=True)


def channel_why(state: ChannelState) -> Text:
    """Why a channel starts no call now, for `show_stopped`."""
    now, mode = state.now, state.mode
    if mode is Mode.PAUSED:
        by, note = visible(state.paused_by or "-"), short(state.paused_note, None)
        text = f"by {by} {ago(state.paused_at, now)} ({_stamp(state.paused_at)}): {note}"
        if state.down_since is not None:
            text += f"; the provider is down too, since {ago(state.down_since, now)}"
    elif mode is Mode.HELD:
        until, note = state.held_until, short(state.held_note, None)
        text = f"until {_stamp(until)} ({ago(until, now)}): {note}"
    else:
        since = f"{ago(state.down_since, now)} ({_stamp(state.down_since)})"
        probe = state.probe_at
        nxt = f"next probe {ago(probe, now)}" if probe and probe > now else "a probe is due"
        why = short(state.down_note, None) or "calls failed in a row"
        text = f"since {since}: {why}; {nxt}"
    return Text(text)


def show_channel_history(name: str, events: Sequence[ChannelEvent], now: datetime) -> None:
    """A channel's latest changes, newest first: paused, resumed, down, up."""
    table = Table(title=f"channel {visible(name)}: latest changes", title_justify="left")
    for column in ("when", "event", "actor", "note"):
        table.add_column(column, no_wrap=column == "when", overflow="fold")
    for event in events:
        table.add_row(
            f"{event.at:%m-%d %H:%M:%S}  {ago(event.at, now)}",
            plain(event.kind),
            plain(event.actor),
            Text(short(event.note, None)),
        )
    out.print(table)


def show_switch(view: ChannelView, *, pausing: bool, changed: bool, by: str) -> None:
    """What `pause` or `resume` did, on one line (and what still holds the channel)."""
    name, now = visible(view.channel), visible(view.describe())
    poll = "within one poll interval"
    if not changed:
        said = f"is already {now}" if pausing else f"is not paused ({now})"
        out.print(Text(f"{name} {said}; nothing written"), soft_wrap=True)
    elif pausing:
        said = f"workers stop starting its calls {poll}; calls already sent finish"
        out.print(Text(f"{name} paused by {visible(by)}: {said}", style="yellow"), soft_wrap=True)
    else:
        said = f"workers start its calls again {poll}"
        if view.mode is not Mode.RUNNING:
            said += f"; it is still {now}"
        out.print(Text(f"{name} resumed by {visible(by)}: {said}", style="green"), soft_wrap=True)


def show_report(rows: Sequence[ReportRow], by: str) -> None:
    """One line per period and channel, a column per status (`--json` keeps the rows)."""
    table = Table(title=f"Submissions by {by} of creation (UTC)", title_justify="left")
    table.add_column(by)
    table.add_column("channel")
    for st in Status:
        table.add_column(st.value, justify="right", style=STATUS_STYLE[st])
    table.add_column("total", justify="right", style="bold")
    lines: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        lines.setdefault((row.period, row.channel), {})[row.status] = row.count
    for (period, channel), counts in lines.items():
        cells = [str(counts.get(st.value, 0)) for st in Status]
        table.add_row(plain(period), plain(channel), *cells, str(sum(counts.values())))
    if not lines:
        table.add_row("(no rows)", "", *("" for _ in Status), "")
    out.print(table)


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
LIST_CUT = (("last error / resolution / hold", 12), ("channel", 8), ("updated", 8),
            ("created", 8))  # fmt: skip
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
    holders = Holders()
    rows = [
        (
            str(sub.id),
            visible(sub.channel),
            visible(sub.key),
            status_text(sub, gone=holders.gone(sub)),
            str(sub.attempts),
            ago(sub.created_at, now),
            ago(sub.updated_at, now),
            short(
                sub.resolution
                or sub.last_error
                or hold_text(sub, now, gone=holders.gone(sub), brief=True)
                or unsettled_text(sub),
                width,
            ),
        )
        for sub in subs
    ]
    more = "; more may match (raise --limit)" if len(subs) >= limit else ""
    count = f"{len(subs)} row{'s' if len(subs) != 1 else ''}{more}" if subs else ""
    if not out.is_terminal:
        if rows:
            lines = [[name for name, _ in LIST_COLUMNS]]
            lines += [[cell.plain if isinstance(cell, Text) else cell for cell in r] for r in rows]
            click.echo("\n".join("\t".join(_one_cell(c) for c in line) for line in lines))
        click.echo(count or "no submissions match", err=True)
        return
    if not rows:
        out.print("no submissions match")
        return
    widths = _list_widths(rows, out.width)
    table = Table(show_lines=False, box=None, pad_edge=False)
    shown = [n for n, (name, _) in enumerate(LIST_COLUMNS) if widths[name]]
    for n in shown:
        name, justify = LIST_COLUMNS[n]
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",  # type: ignore[arg-type]
                         width=widths[name])  # fmt: skip
    for row in rows:
        cells = [row[n] for n in shown]
        table.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in cells))
    out.print(table)
    out.print(count, style="dim")


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
        ("status", status_text(sub)),
        ("channel:key", visible(f"{sub.channel}:{sub.key}")),
        ("idempotency key", visible(sub.idempotency_key)),
        ("attempts", str(sub.attempts) + (f" ({why})" if (why := unsettled_text(sub)) else "")),
        ("remote id", visible(sub.remote_id or "-")),
        ("created", f"{ago(sub.created_at, now)}  ({_stamp(sub.created_at)})"),
        ("updated", f"{ago(sub.updated_at, now)}  ({_stamp(sub.updated_at)})"),
    ]
    if sub.synced_at:
        rows.append(("synced", f"{ago(sub.synced_at, now)}  ({_stamp(sub.synced_at)})"))
    if sub.next_attempt_at:
        rows.append(("next step", ago(sub.next_attempt_at, now)))
    if found.window_closes_at:
        verb = "closes" if found.window_closes_at > now else "closed"
        rows.append(
            (
                "idempotency window",
                f"{verb} {ago(found.window_closes_at, now)}  ({_stamp(found.window_closes_at)})",
            )
        )
    if sub.locked_by:
        gone = Holders().gone(sub)
        rows[0] = ("status", status_text(sub, gone=gone))
        held = hold_text(sub, now, gone=gone) or (
            f"{visible(actor_of(sub.locked_by))}, lease ended {ago(sub.locked_until, now)}"
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
        rows.append(("removed", f"{ago(sub.removed_at, now)}  ({_stamp(sub.removed_at)}), {where}"))
    if found.superseded_by:
        rows.append(("superseded by", visible(label(found.superseded_by))))
    rows.append(("actions", actions_text(allowed_actions(sub, superseded_by=found.superseded_by))))
    for name, value in rows:
        grid.add_row(name, value if isinstance(value, Text) else Text(value))
    out.print(Panel(grid, title=f"submission #{sub.id}", title_align="left", expand=False))
    if found.forgotten is not None:
        out.print(Text(visible(found.forgotten.describe())), soft_wrap=True)
    if sub.removed_at is not None:
        kept = f"in the archive at {visible(sub.archived_to)}" if sub.archived_to else "not kept"
        out.print(f"payload and history: {kept}; the key and its outcome stay", markup=False)
        return
    if isinstance(sub.payload, SealedPayload):  # its text, not a JSON string
        out.print(Text("payload: " + visible(sub.payload)), soft_wrap=True, style="yellow")
    elif found.forgotten is None:
        out.print(Text("payload: " + clip(json_text(sub.payload))), soft_wrap=True)
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
            move.append(event.from_status.value, STATUS_STYLE[event.from_status])
            move.append(" → ")
        if event.to_status:
            move.append(event.to_status.value, STATUS_STYLE[event.to_status])
        table.add_row(
            f"{event.at:%m-%d %H:%M:%S}  {ago(event.at, now)}",
            plain(event.kind),
            move,
            str(event.attempt),
            plain(event.actor),
            Text(short(event.detail, None if full else 80)),
            "" if event.duration_ms is None else str(event.duration_ms),
        )
    out.print(table)


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


def show_requested(action_id: int, reason: str, as_json: bool) -> None:
    """An action a two-person rule kept for a second person: nothing was done."""
    if as_json:
        emit_json({"requested": action_id, "reason": reason})
        return
    out.print(
        plain(
            f"request #{action_id}: {reason}; nothing is done until another person runs: "
            f"denpyo approve {action_id} --note TEXT",
            style="yellow",
        )
    )


def show_retry(result: RetryResult, *, full: bool = False) -> None:
    if result.requested is not None:
        show_requested(result.requested.action.id, result.requested.reason, False)
        return
    verb = "would retry" if result.dry_run else "retried"
    if result.retried:
        table = Table(title=f"{verb} {len(result.retried)}", title_justify="left")
        for name in ("id", "channel:key", "status", "last error"):
            table.add_column(name)
        for sub in result.retried:
            table.add_row(
                str(sub.id),
                plain(f"{sub.channel}:{sub.key}"),
                status_text(sub),
                Text(short(sub.last_error, None if full else 60)),
            )
        out.print(table)
    else:
        out.print(f"nothing to retry ({verb} 0)")
    for sub, reason in result.skipped:
        out.print(plain(f"skipped #{sub.id}: {reason}", style="yellow"))


def show_resolution(done: Resolution) -> None:
    if done.requested is not None:
        show_requested(done.requested.action.id, done.requested.reason, False)
        return
    sub = done.submission
    text = {
        "abandon": f"{label(sub)} abandoned; {_became(done)}, nothing more is sent",
        "mark_synced": f"{label(sub)} marked synced (remote id {sub.remote_id})",
        "resend": f"{label(sub)} replaced; {_became(done)}, nothing more is sent for it",
    }[done.action]
    out.print(plain(text, style="green"))
    if done.created is not None:
        new = label(done.created)
        out.print(plain(f"new submission {new} waits for a worker (supersedes #{sub.id})"))
    out.print(plain(f"resolution: {sub.resolution or ''}", style="dim"))


def _became(done: Resolution) -> str:
    """What happened to the row's status: a `requesting` row given up becomes `failed`."""
    sub = done.submission
    if not done.moved or done.from_status is None:
        return f"it stays {sub.status.value}"
    why = (
        "its last attempt may have arrived, so it stays counted in doubt"
        if sub.error_kind is ErrorKind.AMBIGUOUS
        else "never sent"
    )
    return f"it moved from {done.from_status.value} to {sub.status.value} ({why})"


def show_reconcile(summary: ReconcileSummary) -> None:
    table = Table(title="reconcile", title_justify="left", show_header=False)
    table.add_column()
    table.add_column(justify="right")
    for name, value in (
        ("in doubt and due when it began", summary.due),
        ("checked", summary.checked),
        ("synced (found at the provider, or resent)", summary.synced),
        ("failed", summary.failed),
        ("rejected", summary.rejected),
        ("still requesting (recheck later, or a person)", summary.requesting),
        ("errors", summary.errors),
        ("in doubt now, all channels", summary.in_doubt_after),
    ):
        table.add_row(name, str(value))
    out.print(table)


AUDIT_HEADINGS = {
    DiscrepancyKind.NOT_SYNCED: "accepted by the provider, not synced in the ledger",
    DiscrepancyKind.MISSING_AT_PROVIDER: "synced in the ledger, no record at the provider",
    DiscrepancyKind.REMOTE_ID_DIFFERS: "both have it, with different remote ids",
    DiscrepancyKind.ACCEPTED_TWICE: "accepted twice by the provider (a double effect)",
}


def audit_json(report: AuditReport) -> dict[str, Any]:
    return {
        "channel": report.channel,
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "remote_records": report.remote_records,
        "ledger_synced": report.ledger_synced,
        "counts": report.counts(),
        "adopted": report.adopted,
        "discrepancies": [discrepancy_json(found) for found in report.discrepancies],
        "unknown_events": [provider_event_json(event) for event in report.unknown_events],
    }


def provider_event_json(event: ProviderEvent) -> dict[str, Any]:
    """A provider's webhook event as `denpyo audit --json` lists it."""
    return {
        "provider": event.provider,
        "event_id": event.event_id,
        "kind": event.kind,
        "received_at": event.received_at.isoformat() if event.received_at else None,
        "idempotency_key": event.idempotency_key,
        "remote_id": event.remote_id,
        "detail": event.detail,
    }


def show_audit(report: AuditReport) -> None:
    out.print(
        plain(
            f"audit of {report.channel} from {_stamp(report.since)} to "
            f"{_stamp(report.until)}: the provider listed {report.remote_records}, "
            f"the ledger synced {report.ledger_synced}"
        )
    )
    if report.clean:
        out.print("no discrepancy: both sides agree", style="green")
        return
    _show_unknown_events(report.unknown_events)
    for kind, heading in AUDIT_HEADINGS.items():
        found = [d for d in report.discrepancies if d.kind is kind]
        if not found:
            continue
        table = Table(title=f"{heading}: {len(found)}", title_justify="left")
        for name in ("id", "key", "status", "idempotency key", "provider's id", "detail"):
            table.add_column(name, overflow="fold" if name == "detail" else "ellipsis")
        for d in found:
            sub = d.submission
            table.add_row(
                str(sub.id) if sub else "-",
                plain(sub.key) if sub else "-",
                status_text(sub) if sub else Text("no row", style="bold red"),
                plain(d.idempotency_key),
                plain(d.remote_id or "-"),
                plain(d.detail),
            )
        out.print(table)
    out.print(f"{len(report.discrepancies)} discrepancies", style="bold red")
    if report.unknown_events:
        out.print(f"{len(report.unknown_events)} webhook events that name no row", style="bold red")
    if report.adopted:
        out.print(
            f"{report.adopted} adopted: recorded as synced rows of their keys", style="yellow"
        )


def _show_unknown_events(events: Sequence[ProviderEvent]) -> None:
    """The providers' webhook events of the audit's window that named no row."""
    if not events:
        return
    table = Table(
        title=f"told by a provider's webhook, no row in the ledger: {len(events)}",
        title_justify="left",
    )
    for name in ("received", "provider", "event", "kind", "idempotency key", "provider's id"):
        table.add_column(name, overflow="ellipsis")
    table.add_column("detail", overflow="fold")
    for event in events:
        table.add_row(
            _stamp(event.received_at), event.provider, plain(event.event_id),
            plain(event.kind), plain(event.idempotency_key or "-"),
            plain(event.remote_id or "-"), plain(event.detail or "-"),
        )  # fmt: skip
    out.print(table)


def _stamp(when: datetime | None) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else "-"
