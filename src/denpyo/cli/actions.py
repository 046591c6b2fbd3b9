"""Commands that act: retry, resolve, pause, resume, reconcile, worker; and what
each says it did."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from denpyo.cli import redacting, render
from denpyo.cli.app import Env, fail, full_option, json_option, log_options, main, pass_env
from denpyo.cli.rows import RowFilters, check_filter_channel, row_filters
from denpyo.domain.channel_state import Mode
from denpyo.domain.limits import decode_payload
from denpyo.domain.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_POLL_INTERVAL,
    WorkerSettings,
)
from denpyo.domain.status import ErrorKind
from denpyo.domain.text import visible
from denpyo.engine import operator as op
from denpyo.engine.operator import ChannelView, ReconcileSummary, Resolution, RetryResult, label
from denpyo.engine.processes import MAX_PROCESSES
from denpyo.errors import InvalidInput, PayloadNotJSON

by_option = click.option(
    "--by", metavar="NAME", help="Who is acting, for the history; default: your login name."
)
note_option = click.option("--note", metavar="TEXT", help="Why: kept in the history.")


@main.command()
@click.argument("refs", nargs=-1, metavar="[ID|CHANNEL:KEY]...")
@row_filters(limit=1000, limit_help="At most this many rows, with a filter.")
@click.option(
    "--all", "all_failed", is_flag=True, help="Every failed row (needed when no filter is given)."
)
@click.option(
    "--force-in-doubt",
    is_flag=True,
    help="Also resend rows in doubt (the call may have arrived!); needs --note.",
)
@note_option
@by_option
@click.option("--dry-run", is_flag=True, help="Show what would be retried; change nothing.")
@full_option
@json_option
@pass_env
def retry(
    env: Env,
    refs: tuple[str, ...],
    rows: RowFilters,
    all_failed: bool,
    force_in_doubt: bool,
    note: str | None,
    by: str | None,
    dry_run: bool,
    full: bool,
    as_json: bool,
) -> None:
    """Make failed rows due now; a worker sends them again under the same key.

    Name the rows, or select them with the same filters as `list` (--all for
    every failed row). Rows in doubt are refused unless --force-in-doubt with a
    --note: check the provider first, or use `resolve --mark-synced`.

    \b
    Example: denpyo retry 41 42 --note "provider outage over"
    Example: denpyo retry --status failed --channel invoice-email --since 2h --dry-run
    """
    filtering = rows.given or all_failed
    if refs and filtering:
        fail("name the submissions to retry or give a filter, not both")
    if not refs and not filtering:
        fail("name the submissions to retry, or select them (--status, --channel, ... or --all)")
    result = op.retry(
        env.ledger,
        refs=refs,
        flt=None if refs else rows.to_filter(env.ledger),
        force_in_doubt=force_in_doubt,
        note=note,
        by=by,
        dry_run=dry_run,
    )
    shown = len(result.retried) + len(result.skipped)
    result = result.redacted(redacting.rule(env, full=full, what=f"{shown} rows retried", by=by))
    if as_json:
        render.emit_json(result.to_json(full=full))
    else:
        show_retry(result, full=full)


@main.command()
@click.argument("ref", metavar="ID|CHANNEL:KEY")
@click.option("--abandon", is_flag=True, help="Give up on it (note required).")
@click.option(
    "--resend",
    is_flag=True,
    help="Replace it by a new, linked submission (same payload unless --payload).",
)
@click.option(
    "--mark-synced",
    is_flag=True,
    help="You checked the provider by hand and it arrived (needs --remote-id).",
)
@note_option
@click.option("--remote-id", metavar="ID", help="With --mark-synced: the provider's id.")
@click.option(
    "--payload",
    metavar="JSON|@FILE",
    help="With --resend: a corrected payload, as JSON text or @file.json.",
)
@click.option("--force-in-doubt", is_flag=True, help="With --resend: allow a row in doubt.")
@by_option
@full_option
@json_option
@pass_env
def resolve(
    env: Env,
    ref: str,
    abandon: bool,
    resend: bool,
    mark_synced: bool,
    note: str | None,
    remote_id: str | None,
    payload: str | None,
    force_in_doubt: bool,
    by: str | None,
    full: bool,
    as_json: bool,
) -> None:
    """A person's decision on one row, written to its history with --note and who.

    --abandon keeps a failed or rejected row as it is and stops all retries (a
    requesting row not being sent becomes failed);
    --resend creates a new submission linked through `supersedes`;
    --mark-synced records a call you found at the provider.

    \b
    Example: denpyo resolve 42 --abandon --note "customer cancelled the order"
    Example: denpyo resolve 42 --resend --payload '{"to": "fixed@example.com"}' --note "typo"
    Example: denpyo resolve 42 --mark-synced --remote-id msg_8f2c --note "in the console"
    """
    flags = {"abandon": abandon, "resend": resend, "mark_synced": mark_synced}
    chosen = [name for name, on in flags.items() if on]
    if len(chosen) != 1:
        fail("choose one of --abandon, --resend or --mark-synced")
    action = chosen[0]
    if action != "mark_synced" and remote_id is not None:
        fail("--remote-id goes with --mark-synced")
    if action != "resend" and (payload is not None or force_in_doubt):
        fail("--payload and --force-in-doubt go with --resend")
    ledger = env.ledger
    if action == "abandon":
        done = op.resolve_abandon(ledger, ref, note=note or "", by=by)
    elif action == "mark_synced":
        done = op.resolve_mark_synced(
            ledger, ref, remote_id=remote_id or "", note=note or "", by=by
        )
    else:
        body = op.SAME_PAYLOAD if payload is None else read_payload(payload)
        done = op.resolve_resend(
            ledger, ref, note=note or "", payload=body, force_in_doubt=force_in_doubt, by=by
        )
    done = done.redacted(redacting.rule(env, full=full, what=op.label(done.submission), by=by))
    if as_json:
        render.emit_json(done.to_json(full=full))
    else:
        show_resolution(done)


@main.command()
@click.argument("channel", metavar="CHANNEL")
@note_option
@by_option
@json_option
@pass_env
def pause(env: Env, channel: str, note: str | None, by: str | None, as_json: bool) -> None:
    """Stop the calls of CHANNEL until `denpyo resume`: every worker stops starting
    them within one poll interval (1 s by default). Calls already on the wire
    finish and settle; the application still records rows, which wait. --note
    (required) and who (--by) go into the channel's history, which `denpyo status
    --channel CHANNEL` shows.

    \b
    Example: denpyo pause invoice-email --note "provider incident, INC-4411"
    """
    _switch(env, channel, note, by, as_json, pausing=True)


@main.command()
@click.argument("channel", metavar="CHANNEL")
@note_option
@by_option
@json_option
@pass_env
def resume(env: Env, channel: str, note: str | None, by: str | None, as_json: bool) -> None:
    """Let the workers start the calls of a paused CHANNEL again, within one poll
    interval (1 s by default). --note (required) and who (--by) go into the
    channel's history.

    \b
    Example: denpyo resume invoice-email --note "provider says fixed, INC-4411"
    """
    _switch(env, channel, note, by, as_json, pausing=False)


def _switch(
    env: Env, channel: str, note: str | None, by: str | None, as_json: bool, *, pausing: bool
) -> None:
    """`pause` or `resume`: the input checked before anything is written (the name,
    the note, then the channel against the application's), then the change, and
    what the channel is now."""
    op.check_channel(channel)
    op.check_note(note, "a pause" if pausing else "a resume")
    ledger = env.ledger
    check_filter_channel(ledger, channel, registered_only=True)
    switch = ledger.pause if pausing else ledger.resume
    changed = switch(channel, note=note or "", by=by)
    view = op.channel_view(ledger, channel, limit=1)
    if as_json:
        render.emit_json(
            {
                "channel": channel,
                "action": "pause" if pausing else "resume",
                "changed": changed,
                "by": op.operator_actor(by) if changed else None,
                "state": op.channel_state_json(view.state),
            }
        )
    else:
        show_switch(view, pausing=pausing, changed=changed, by=op.operator_actor(by))


def read_payload(text: str) -> Any:
    """`--payload` as JSON text, or `@file`; checked like any payload before it is used."""
    source = "--payload"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read the payload file {source!r}: {exc}") from None
    try:
        return decode_payload(text)
    except PayloadNotJSON as exc:
        raise PayloadNotJSON(f"{source}: {exc}") from None


@main.command()
@json_option
@log_options(logging.WARNING)
@pass_env
def reconcile(env: Env, as_json: bool, log_level: int) -> None:
    """One pass over the rows in doubt: ask the provider (verify), then sync,
    resend (never arrived) or hold for a person. Needs --app (the channels).

    Example: denpyo --app myapp.ledger:ledger reconcile
    Example: denpyo --app myapp.ledger:ledger reconcile -v    # and log the pass
    """
    log_to_stderr(log_level)
    ledger = env.require_channels("reconcile")  # before the progress bar draws anything
    if as_json:
        summary = op.reconcile(ledger)
        render.emit_json(summary.to_json())
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn("reconciling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=render.err, transient=True) as bar:
        task = bar.add_task("reconcile", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        summary = op.reconcile(ledger, progress)
    show_reconcile(summary)


@main.command()
@click.option(
    "--concurrency",
    type=int,
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Calls in flight at once, over all channels (at least 1).",
)
@click.option(
    "--poll-interval",
    type=float,
    default=DEFAULT_POLL_INTERVAL,
    show_default=True,
    help="Seconds between looks for due rows when idle.",
)
@click.option(
    "--grace",
    type=float,
    default=DEFAULT_GRACE,
    show_default=True,
    help="On SIGINT/SIGTERM, seconds the calls in flight get to finish.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=1, max=65535),
    help="Serve Prometheus metrics on this port (GET /metrics).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics listen on (0.0.0.0 for a scraper on another host).",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1, max=MAX_PROCESSES),
    default=1,
    show_default=True,
    help="Worker processes, each with --concurrency calls in flight, under one "
    "supervisor that restarts those that die; with --metrics-port P, process i "
    "serves on P+i.",
)
@log_options(logging.INFO)
@pass_env
@click.pass_context
def worker(
    ctx: click.Context,
    env: Env,
    concurrency: int,
    poll_interval: float,
    grace: float,
    metrics_port: int | None,
    metrics_host: str,
    processes: int,
    log_level: int,
) -> None:
    """Send, retry and reconcile until SIGINT or SIGTERM; then stop claiming, give
    back rows not yet started, let the calls in flight finish (up to --grace
    seconds), and exit 0. Needs --app (the channels).

    With --processes N, N workers (one per core, say) run as child processes of
    this one, which passes SIGINT/SIGTERM on to them, exits when they have (0 if
    all exited 0), and starts again a child that dies (exit 1 after 5 deaths
    within 60 s).

    \b
    Example: denpyo --app myapp.ledger:ledger worker --concurrency 32
    Example: denpyo --app myapp.ledger:ledger worker --metrics-port 9464
    Example: denpyo --app myapp.ledger:ledger worker --processes 4 --metrics-port 9464
    Example: denpyo --app myapp.ledger:ledger worker -v    # DEBUG: each claim and pass
    """
    settings = WorkerSettings(concurrency, poll_interval, grace)  # refused before any start
    if processes > 1:
        ctx.exit(_supervise(env, processes, settings, metrics_port, metrics_host, log_level))
    log_to_stderr(log_level)
    ledger = env.require_channels("the worker")
    names = ", ".join(sorted(ledger.channels)) or "none"
    server = None
    if metrics_port is not None:
        from denpyo.metrics import Metrics

        try:
            server = Metrics(ledger).attach().serve(metrics_port, metrics_host)
        except OSError as exc:
            fail(f"cannot serve metrics on {metrics_host}:{metrics_port}: {exc}")
        render.err.print(f"metrics on http://{metrics_host}:{metrics_port}/metrics")
    render.err.print(f"worker started on channels: {names}; Ctrl-C or SIGTERM stops it")
    try:
        report = op.serve(
            ledger,
            concurrency=settings.concurrency,
            poll_interval=settings.poll_interval,
            grace=settings.grace,
        )
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    render.err.print(f"worker stopped: {report.summary()}")


def _supervise(
    env: Env,
    processes: int,
    settings: WorkerSettings,
    metrics_port: int | None,
    metrics_host: str,
    log_level: int,
) -> int:
    """`worker --processes N`: the children's command lines, and their supervisor."""
    from denpyo.engine.processes import Supervisor, worker_command

    if metrics_port is not None and metrics_port + processes - 1 > 65535:
        fail(
            f"--metrics-port {metrics_port} with --processes {processes}: process i serves "
            "on the port plus i, past 65535"
        )
    if not env.app:  # said once here, rather than by each child
        op.require_channels(env.ledger, "the worker")
    options = [
        "--concurrency",
        str(settings.concurrency),
        "--poll-interval",
        repr(settings.poll_interval),
        "--grace",
        repr(settings.grace),
        "--metrics-host",
        metrics_host,
        "--log-level",
        logging.getLevelName(log_level),
    ]
    commands = [
        worker_command(
            db=env.db,
            app=env.app,
            options=[
                *options,
                *(["--metrics-port", str(metrics_port + i)] if metrics_port is not None else []),
            ],
        )
        for i in range(processes)
    ]

    def say(message: str) -> None:
        render.err.print(f"supervisor: {message}", markup=False, highlight=False, soft_wrap=True)

    say(f"starting {processes} worker processes ({settings.concurrency} calls in flight each)")
    code = Supervisor(commands, say).run()
    say(f"all worker processes have stopped; exit code {code}")
    return code


def log_to_stderr(level: int) -> None:
    from rich.logging import RichHandler

    from denpyo.engine.tracing import TraceIdsFormatter

    handler = RichHandler(console=render.err, show_path=False, rich_tracebacks=False)
    handler.setFormatter(TraceIdsFormatter("%(message)s"))  # a row's trace, when it has one
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)


def show_switch(view: ChannelView, *, pausing: bool, changed: bool, by: str) -> None:
    """What `pause` or `resume` did, on one line (and what still holds the channel)."""
    name, now = visible(view.channel), visible(view.describe())
    poll = "within one poll interval"
    if not changed:
        said = f"is already {now}" if pausing else f"is not paused ({now})"
        render.out.print(Text(f"{name} {said}; nothing written"), soft_wrap=True)
    elif pausing:
        said = f"workers stop starting its calls {poll}; calls already sent finish"
        render.out.print(
            Text(f"{name} paused by {visible(by)}: {said}", style="yellow"), soft_wrap=True
        )
    else:
        said = f"workers start its calls again {poll}"
        if view.mode is not Mode.ACTIVE:
            said += f"; it is still {now}"
        render.out.print(
            Text(f"{name} resumed by {visible(by)}: {said}", style="green"), soft_wrap=True
        )


def show_retry(result: RetryResult, *, full: bool = False) -> None:
    if result.requested is not None:
        render.show_requested(result.requested.action.id, result.requested.reason, False)
        return
    verb = "would retry" if result.dry_run else "retried"
    if result.retried:
        table = Table(title=f"{verb} {len(result.retried)}", title_justify="left")
        for name in ("id", "channel:key", "status", "last error"):
            table.add_column(name)
        for sub in result.retried:
            table.add_row(
                str(sub.id),
                render.plain(f"{sub.channel}:{sub.key}"),
                render.status_text(sub),
                Text(render.short(sub.last_error, None if full else 60)),
            )
        render.out.print(table)
    else:
        render.out.print(f"nothing to retry ({verb} 0)")
    for sub, reason in result.skipped:
        render.out.print(render.plain(f"skipped #{sub.id}: {reason}", style="yellow"))


def show_resolution(done: Resolution) -> None:
    if done.requested is not None:
        render.show_requested(done.requested.action.id, done.requested.reason, False)
        return
    sub = done.submission
    text = {
        "abandon": f"{label(sub)} abandoned; {_became(done)}, nothing more is sent",
        "mark_synced": f"{label(sub)} marked synced (remote id {sub.remote_id})",
        "resend": f"{label(sub)} replaced; {_became(done)}, nothing more is sent for it",
    }[done.action]
    render.out.print(render.plain(text, style="green"))
    if done.created is not None:
        new = label(done.created)
        render.out.print(
            render.plain(f"new submission {new} waits for a worker (supersedes #{sub.id})")
        )
    render.out.print(render.plain(f"resolution: {sub.resolution or ''}", style="dim"))


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
    render.out.print(table)
