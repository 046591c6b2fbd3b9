"""Keeping the ledger for years: `prune` (rows leave, their keys and counts stay)
and `report` (the counts, before and after any prune)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import click
from rich.table import Table

from denpyo.cli import render
from denpyo.cli.actions import by_option, note_option
from denpyo.cli.app import Env, F, json_option, main, pass_env
from denpyo.domain.filters import parse_duration, parse_when
from denpyo.domain.report import PERIODS, ReportRow
from denpyo.domain.status import Status
from denpyo.domain.text import visible
from denpyo.engine import operator as op


def retention_options(batch: str) -> Callable[[F], F]:
    """The ages of `prune` and `archive` (seconds since a row's creation, per state)
    and their batch size (`batch`: what happens to a batch)."""
    ages = (
        ("older-than", "Age (since creation) after which every settled state goes: 90d."),
        ("synced", "Age after which synced rows go: 30d."),
        ("rejected", "Age after which rejected rows a person resolved go: 365d."),
        ("abandoned", "Age after which failed rows a person resolved go: 365d."),
    )

    def decorate(fn: F) -> F:
        fn = click.option(
            "--batch-size",
            type=click.IntRange(min=1, max=100_000),
            default=1000,
            show_default=True,
            help=batch,
        )(fn)
        for name, what in reversed(ages):
            fn = click.option(
                f"--{name}", name.replace("-", "_"), metavar="DURATION", default=None, help=what
            )(fn)
        return fn

    return decorate


def keeping_options(fn: F) -> F:
    """Who runs a prune or an archive, why, and its dry run."""
    fn = click.option(
        "--dry-run",
        is_flag=True,
        help="Count what would go, per channel and status; remove nothing.",
    )(fn)
    return by_option(note_option(fn))


@main.command()
@retention_options("Rows removed per transaction, so no lock is held for long.")
@keeping_options
@json_option
@pass_env
def prune(
    env: Env,
    older_than: str | None,
    synced: str | None,
    rejected: str | None,
    abandoned: str | None,
    batch_size: int,
    note: str | None,
    by: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove settled rows once they are old enough, each state after its own age:
    synced rows, and rejected or failed rows a person resolved (abandoned or resent).
    Rows still open, in doubt, or waiting for a person are never removed. Each
    removed row's key and outcome stay known (submitting the key again calls
    nothing) and its counts stay in `denpyo report`. Each run is an entry of the
    action log (`denpyo actions --kind prune`): who, the ages, how many rows went.

    \b
    Example: denpyo --db postgresql://app@db/app prune --synced 30d --rejected 365d --abandoned 365d
    Example: denpyo prune --older-than 90d --dry-run
    """
    given = {"older_than": older_than, "synced": synced, "rejected": rejected}
    given["abandoned"] = abandoned
    ages, told = _ages(**given), _told(given)
    if dry_run:
        _show_dry_run(env, ages, told, "remove", as_json)
        return
    record = op.prune(env.ledger, op.Keeping(ages, told, by, note or "", batch_size))
    removed = record.done
    if as_json:
        render.emit_json(
            {
                "deleted": removed,
                "action": record.id,
                **{f"{k}_seconds": v for k, v in ages.items()},
            }
        )
    else:
        render.out.print(
            f"removed {removed} settled row(s) ({told}); their keys and counts stay "
            f"(action #{record.id})",
            markup=False,
        )


@main.command()
@click.option(
    "--to",
    "to",
    required=True,
    metavar="DIR_OR_URL",
    help="Where the Parquet files go: a folder, or s3://bucket/prefix.",
)
@retention_options("Rows written, read back and removed at a time.")
@keeping_options
@json_option
@pass_env
def archive(
    env: Env,
    to: str,
    older_than: str | None,
    synced: str | None,
    rejected: str | None,
    abandoned: str | None,
    batch_size: int,
    note: str | None,
    by: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Write old settled rows and their history as Parquet (by channel and month),
    read the files back, and only then remove the rows, as `prune` does: their keys
    and counts stay, and `show` says where each went. Each run is an entry of the
    action log, as a prune's. Needs denpyo[archive].

    \b
    Example: denpyo archive --to s3://ledger-archive/shop --synced 30d --older-than 365d
    """
    given = {"older_than": older_than, "synced": synced, "rejected": rejected}
    given["abandoned"] = abandoned
    ages, told = _ages(**given), _told(given)
    if dry_run:
        _show_dry_run(env, ages, told, f"archive to {to}", as_json)
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn

    columns = (SpinnerColumn(), TextColumn("archiving: {task.completed} rows"))
    bar = Progress(*columns, console=render.err, transient=True)
    task = bar.add_task("archive", total=None)

    def progress(rows: int) -> None:  # started at the first batch: a refusal is one line
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=rows)

    try:
        asked = op.Keeping(ages, told, by, note or "", batch_size)
        done, record = op.archive(env.ledger, to, asked, progress)
    finally:
        if bar.live.is_started:
            bar.stop()
    if as_json:
        render.emit_json({**done.to_json(), "action": record.id})
    else:
        render.out.print(
            f"archived and removed {done.rows} row(s) and {done.events} event(s) to "
            f"{done.target} ({done.files} file(s), {done.bytes:,} bytes); their keys and "
            f"counts stay (action #{record.id})",
            markup=False,
        )


def _told(given: dict[str, str | None]) -> str:
    """The ages as the person typed them: `synced 30d, rejected 365d`."""
    return ", ".join(f"{name.replace('_', ' ')} {text}" for name, text in given.items() if text)


def _show_dry_run(env: Env, ages: dict[str, float], told: str, what: str, as_json: bool) -> None:
    """What a prune or an archive would remove now, per channel and status: nothing
    removed, nothing written (not even to the action log)."""
    counts = op.removable_counts(env.ledger, **ages)
    total = sum(n for _, _, n in counts)
    if as_json:
        render.emit_json(
            {
                "dry_run": True,
                "rows": total,
                "counts": [{"channel": c, "status": s, "rows": n} for c, s, n in counts],
                **{f"{k}_seconds": v for k, v in ages.items()},
            }
        )
        return
    render.out.print(f"dry run: would {what} {total} settled row(s) ({told})", markup=False)
    for channel, status, n in counts:
        render.out.print(f"  {n:>9}  {visible(channel)}  {status}", markup=False)


def _ages(**given: str | None) -> dict[str, float]:
    """The ages a person gave, in seconds (none given: refused by the ledger)."""
    return {name: parse_duration(text) for name, text in given.items() if text is not None}


@main.command()
@click.option(
    "--by",
    type=click.Choice(PERIODS),
    default="month",
    show_default=True,
    help="The period rows are counted in (by the day they were created, UTC).",
)
@click.option("--channel", default=None, help="Only this channel.")
@click.option("--since", default=None, metavar="WHEN", help="From this day: 2026-03-01, 90d.")
@click.option("--until", default=None, metavar="WHEN", help="Up to this day, not included.")
@json_option
@pass_env
def report(
    env: Env,
    by: str,
    channel: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """How many calls were recorded per period, channel and status, for as long as
    the ledger exists: live rows where they stand, removed ones where they stood
    when they went (the same before and after a prune).

    Example: denpyo report --by month --channel invoice-email --since 2026-01-01
    """
    now = env.ledger.now()
    rows = env.ledger.report(
        by=by,
        channel=channel,
        since=None if since is None else parse_when(since, now).date(),
        until=None if until is None else parse_when(until, now).date(),
    )
    if as_json:
        render.emit_json([row.to_json() for row in rows])
    else:
        show_report(rows, by)


def show_report(rows: Sequence[ReportRow], by: str) -> None:
    """One line per period and channel, a column per status (`--json` keeps the rows)."""
    table = Table(title=f"Submissions by {by} of creation (UTC)", title_justify="left")
    table.add_column(by)
    table.add_column("channel")
    for st in Status:
        table.add_column(st.value, justify="right", style=render.STATUS_STYLE[st])
    table.add_column("total", justify="right", style="bold")
    lines: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        lines.setdefault((row.period, row.channel), {})[row.status] = row.count
    for (period, channel), counts in lines.items():
        cells = [str(counts.get(st.value, 0)) for st in Status]
        table.add_row(
            render.plain(period), render.plain(channel), *cells, str(sum(counts.values()))
        )
    if not lines:
        table.add_row("(no rows)", "", *("" for _ in Status), "")
    render.out.print(table)
