"""`denpyo status`: the counts, what needs a person, and the channels that start
no call now; its table and its JSON."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import click
from rich.table import Table
from rich.text import Text

from denpyo.cli import render
from denpyo.cli.app import Env, json_option, main, pass_env
from denpyo.cli.rows import channel_option, check_filter_channel
from denpyo.domain.channel_state import ChannelEvent, ChannelState, Mode
from denpyo.domain.holders import actor_of
from denpyo.domain.status import Status
from denpyo.domain.text import age, visible
from denpyo.engine import operator as op
from denpyo.engine.operator import StatusReport
from denpyo.engine.processes import EXIT_ATTENTION


@main.command()
@channel_option
@click.option("--check", is_flag=True, help="Exit 1 when something needs a person.")
@json_option
@pass_env
@click.pass_context
def status(ctx: click.Context, env: Env, channel: str | None, check: bool, as_json: bool) -> None:
    """Counts by channel and status; in doubt, exhausted, and the oldest pending row.

    "Needs a person" counts rows with no person's resolution that are in doubt
    (the call may have arrived), exhausted (failed, no attempt left) or rejected.

    Example: denpyo status --check || page-the-on-call
    """
    check_filter_channel(env.ledger, channel)
    report = op.status(env.ledger, channel)
    if as_json:
        render.emit_json(report.to_json())
    else:
        show_status(report)
    if check and report.needs_person:
        ctx.exit(EXIT_ATTENTION)


def show_status(report: StatusReport) -> None:
    render.out.print(Text.assemble("database ", (visible(report.database), "bold")), soft_wrap=True)
    if report.standby is not None:
        lag = report.standby_lag
        behind = "how far behind is unknown" if lag is None else f"{lag:.1f} s behind the primary"
        render.out.print(
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
        table.add_column(st.value, justify="right", style=render.STATUS_STYLE[st])
    table.add_column("total", justify="right", style="bold")
    for name, counts in sorted(report.channels.items()):
        table.add_row(
            render.plain(name), *(str(counts[s]) for s in Status), str(sum(counts.values()))
        )
    totals = report.totals
    table.add_section()
    table.add_row("all", *(str(totals[s]) for s in Status), str(sum(totals.values())))
    render.out.print(table)
    attention = "bold red" if report.needs_person else "green"
    render.out.print(
        Text.assemble(
            ("needs a person ", ""),
            (str(report.needs_person), attention),
            f"   (in doubt {report.in_doubt}, exhausted {report.exhausted}, "
            f"rejected {report.rejected_open}; resolved by a person {report.resolved})",
        )
    )
    oldest = (
        f", the oldest created {age(report.oldest_pending_age)} ago"
        if report.oldest_pending
        else ""
    )
    render.out.print(f"pending {report.pending}{oldest}")
    for held in report.holdings:
        first, last = (age(max(seconds, 0.0)) for seconds in held.ends_in)
        ends = f"in {last}" if first == last else f"in {first} to {last}"
        line = Text.assemble(
            f"held {held.rows} of {visible(held.channel)} by {visible(actor_of(held.holder))}",
            (", holder gone" if held.gone else "", "bold magenta"),
            f"; leases end {ends}",
            ", then in doubt and verified" if held.gone else "",
        )
        render.out.print(line, soft_wrap=True)
    if report.durability is not None:
        risk = report.durability.risk is not None
        render.out.print(
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
    Mode.ACTIVE: "green",
    Mode.PAUSED: "bold yellow",
    Mode.THROTTLED: "yellow",
    Mode.DOWN: "bold red",
}


def show_stopped(states: Sequence[ChannelState]) -> None:
    """The channels that start no call now, first and one line each (wrapped under
    their own column in a narrow terminal): paused by whom, when and why; throttled until
    when, and why; down since when, and the next probe."""
    table = Table(
        title="Channels that start no call now",
        title_justify="left",
        box=None,
        show_header=False,
        pad_edge=False,
    )
    table.add_column("channel", style="bold", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("why", overflow="fold")
    for state in states:
        table.add_row(
            render.plain(state.channel),
            Text(state.mode.value, MODE_STYLE[state.mode]),
            channel_why(state),
        )
    render.out.print(table)
    if any(state.mode is Mode.PAUSED for state in states):
        hint = "a paused channel starts no call until `denpyo resume CHANNEL --note TEXT`"
        render.out.print(Text(hint, style="dim"), soft_wrap=True)


def channel_why(state: ChannelState) -> Text:
    """Why a channel starts no call now, for `show_stopped`."""
    now, mode = state.now, state.mode
    if mode is Mode.PAUSED:
        by, note = visible(state.paused_by or "-"), render.short(state.paused_note, None)
        text = (
            f"by {by} {render.ago(state.paused_at, now)} ({render.stamp(state.paused_at)}): {note}"
        )
        if state.down_since is not None:
            text += f"; the provider is down too, since {render.ago(state.down_since, now)}"
    elif mode is Mode.THROTTLED:
        until, note = state.throttled_until, render.short(state.throttled_note, None)
        text = f"until {render.stamp(until)} ({render.ago(until, now)}): {note}"
    else:
        since = f"{render.ago(state.down_since, now)} ({render.stamp(state.down_since)})"
        probe = state.probe_at
        nxt = f"next probe {render.ago(probe, now)}" if probe and probe > now else "a probe is due"
        why = render.short(state.down_note, None) or "calls failed in a row"
        text = f"since {since}: {why}; {nxt}"
    return Text(text)


def show_channel_history(name: str, events: Sequence[ChannelEvent], now: datetime) -> None:
    """A channel's latest changes, newest first: paused, resumed, down, up."""
    table = Table(title=f"channel {visible(name)}: latest changes", title_justify="left")
    for column in ("when", "event", "actor", "note"):
        table.add_column(column, no_wrap=column == "when", overflow="fold")
    for event in events:
        table.add_row(
            f"{event.at:%m-%d %H:%M:%S}  {render.ago(event.at, now)}",
            render.plain(event.kind),
            render.plain(event.actor),
            Text(render.short(event.note, None)),
        )
    render.out.print(table)
