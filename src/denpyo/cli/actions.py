"""Commands that act: retry, resolve, pause, resume, reconcile, worker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from denpyo.cli import redacting, render
from denpyo.cli.app import Env, fail, full_option, json_option, log_options, main, pass_env
from denpyo.cli.rows import RowFilters, check_filter_channel, row_filters
from denpyo.domain.limits import decode_payload
from denpyo.domain.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_POLL_INTERVAL,
    WorkerSettings,
)
from denpyo.engine import operator as op
from denpyo.engine.processes import EXIT_ATTENTION, MAX_PROCESSES
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
        render.show_retry(result, full=full)


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
        render.show_resolution(done)


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
        render.show_switch(view, pausing=pausing, changed=changed, by=op.operator_actor(by))


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
    """One pass over the rows in doubt: ask the provider (verify), then settle,
    resend (never arrived) or hold for a person. Needs --app (the channels).

    Example: denpyo --app myapp.ledger:ledger reconcile
    Example: denpyo --app myapp.ledger:ledger reconcile -v    # and log the pass
    """
    _log_to_stderr(log_level)
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
    render.show_reconcile(summary)


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
    _log_to_stderr(log_level)
    ledger = env.ledger
    op.require_channels(ledger, "audit")
    if as_json:
        report = op.audit(ledger, channel, since=since, until=until, adopt=adopt)
        render.emit_json(render.audit_json(report))
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
        render.show_audit(report)
    if not report.clean:
        ctx.exit(EXIT_ATTENTION)


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
    _log_to_stderr(log_level)
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
        fail(f"--metrics-port {metrics_port} with --processes {processes}: process i serves "
             "on the port plus i, past 65535")  # fmt: skip
    if not env.app:  # said once here, rather than by each child
        op.require_channels(env.ledger, "the worker")
    options = [
        "--concurrency", str(settings.concurrency),
        "--poll-interval", repr(settings.poll_interval),
        "--grace", repr(settings.grace),
        "--metrics-host", metrics_host,
        "--log-level", logging.getLevelName(log_level),
    ]  # fmt: skip
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


def _log_to_stderr(level: int) -> None:
    from rich.logging import RichHandler

    from denpyo.engine.tracing import TraceIdsFormatter

    handler = RichHandler(console=render.err, show_path=False, rich_tracebacks=False)
    handler.setFormatter(TraceIdsFormatter("%(message)s"))  # a row's trace, when it has one
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)
