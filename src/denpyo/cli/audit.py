"""`denpyo audit`: the ledger beside the provider's own records, and the
discrepancies as a person reads them or as JSON."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from denpyo.cli import render
from denpyo.cli.actions import log_to_stderr
from denpyo.cli.app import Env, json_option, log_options, main, pass_env
from denpyo.domain.audit import AuditReport, DiscrepancyKind, discrepancy_json
from denpyo.domain.provider_events import ProviderEvent
from denpyo.engine import operator as op
from denpyo.engine.processes import EXIT_ATTENTION


@main.command()
@click.option("--channel", required=True, help="The channel to audit (its list_remote).")
@click.option(
    "--since",
    metavar="WHEN",
    help="Start of the window: 24h, 7d, today, 2024-05-01; default 24 hours before --until.",
)
@click.option("--until", metavar="WHEN", help="End of the window (same forms); default now.")
@click.option(
    "--adopt",
    is_flag=True,
    help="Record each call the provider accepted that the ledger has no row of (lost in "
    "a database failover) as a synced row of its key (list_remote must give the key).",
)
@json_option
@log_options(logging.WARNING)
@pass_env
@click.pass_context
def audit(
    ctx: click.Context,
    env: Env,
    channel: str,
    since: str | None,
    until: str | None,
    adopt: bool,
    as_json: bool,
    log_level: int,
) -> None:
    """Compare the ledger with the provider's own records (the channel's list_remote)
    and list each discrepancy with its row: accepted by the provider but not synced,
    synced but unknown to the provider, different remote ids, a key accepted twice.
    Writes nothing, but with --adopt. Exit 1 when there is any discrepancy, 0 when
    none. Needs --app.

    \b
    Example: denpyo --app myapp.ledger:ledger audit --channel charge --since 24h
    Example: denpyo --app myapp.ledger:ledger audit --channel charge --since 2024-05-01 \\
             --until 2024-05-02 --json | jq '.discrepancies[].submission_id'
    """
    log_to_stderr(log_level)
    ledger = env.ledger
    op.require_channels(ledger, "audit")
    if as_json:
        report = op.audit(ledger, channel, since=since, until=until, adopt=adopt)
        render.emit_json(audit_json(report))
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        columns = (TextColumn("auditing"), BarColumn(), MofNCompleteColumn())
        bar = Progress(*columns, console=render.err, transient=True)
        task = bar.add_task("audit", total=None)

        def progress(done: int, total: int) -> None:
            bar.start()  # at the first page, after the input was checked: an error stays one line
            bar.update(task, completed=done, total=total)

        try:
            report = op.audit(
                ledger, channel, since=since, until=until, progress=progress, adopt=adopt
            )
        finally:
            if bar.live.is_started:  # stopping prints a line break where stderr is no terminal
                bar.stop()
        show_audit(report)
    if not report.clean:
        ctx.exit(EXIT_ATTENTION)


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
    render.out.print(
        render.plain(
            f"audit of {report.channel} from {render.stamp(report.since)} to "
            f"{render.stamp(report.until)}: the provider listed {report.remote_records}, "
            f"the ledger synced {report.ledger_synced}"
        )
    )
    if report.clean:
        render.out.print("no discrepancy: both sides agree", style="green")
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
                render.plain(sub.key) if sub else "-",
                render.status_text(sub) if sub else Text("no row", style="bold red"),
                render.plain(d.idempotency_key),
                render.plain(d.remote_id or "-"),
                render.plain(d.detail),
            )
        render.out.print(table)
    render.out.print(f"{len(report.discrepancies)} discrepancies", style="bold red")
    if report.unknown_events:
        render.out.print(
            f"{len(report.unknown_events)} webhook events that name no row", style="bold red"
        )
    if report.adopted:
        render.out.print(
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
            render.stamp(event.received_at),
            event.provider,
            render.plain(event.event_id),
            render.plain(event.kind),
            render.plain(event.idempotency_key or "-"),
            render.plain(event.remote_id or "-"),
            render.plain(event.detail or "-"),
        )
    render.out.print(table)
