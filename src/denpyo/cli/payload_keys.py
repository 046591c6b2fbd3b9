"""`denpyo rotate-key`: a new payload key, or every payload re-encrypted with the
current one (docs/guide/personal-data.md)."""

from __future__ import annotations

from collections.abc import Callable

import click
from click.core import ParameterSource
from rich.text import Text

from denpyo.cli import render
from denpyo.cli.app import Env, fail, json_option, main, pass_env
from denpyo.domain.text import visible
from denpyo.engine.payload_keys import KeyRotation, Progress, new_payload_key
from denpyo.engine.processes import EXIT_ATTENTION

LISTED = 100
"""Unreadable rows listed for people (`--json` lists up to 1,000)."""


@main.command("rotate-key")
@click.option(
    "--new-key",
    is_flag=True,
    help="Print a new key (32 random bytes, URL-safe base64) and do nothing else.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=100_000),
    default=500,
    show_default=True,
    help="Rows re-encrypted per transaction.",
)
@click.option("--channel", default=None, help="Only this channel's rows.")
@json_option
@pass_env
@click.pass_context
def rotate_key(
    ctx: click.Context,
    env: Env,
    new_key: bool,
    batch: int,
    channel: str | None,
    as_json: bool,
) -> None:
    """Re-encrypt with the first key of DENPYO_PAYLOAD_KEYS (or of --app's ledger)
    every payload sealed with another key, and every payload still in clear (turning
    encryption on, this encrypts the rows written before). Batch by batch, one
    transaction each: stopped, it is run again and goes on. Workers may run
    meanwhile. Rows no configured key opens are listed and left alone (exit 1).

    Example: denpyo rotate-key --new-key; then, with the new key first in
    DENPYO_PAYLOAD_KEYS everywhere: denpyo rotate-key --batch 1000
    """
    if new_key:
        given = [
            f"--{name}"
            for name in ("batch", "channel", "json")
            if ctx.get_parameter_source("as_json" if name == "json" else name)
            is not ParameterSource.DEFAULT
        ]
        if given:
            fail(f"--new-key goes alone, not with {', '.join(given)}")
        click.echo(new_payload_key())
        return
    ledger = env.ledger
    if as_json or not render.err.is_terminal:
        progress = None if as_json else _line_per_batch
        done = ledger.rotate_payload_key(batch_size=batch, channel=channel, progress=progress)
    else:
        done = _with_bar(
            lambda bar: ledger.rotate_payload_key(batch_size=batch, channel=channel, progress=bar)
        )
    if as_json:
        render.emit_json(done.to_json())
    else:
        _show(done)
    if not done.complete:
        ctx.exit(EXIT_ATTENTION)


def _counts(report: KeyRotation) -> str:
    return (
        f"{report.reencrypted} re-encrypted ({report.from_clear} of them were in clear), "
        f"{report.current} already current, {report.unreadable_count} unreadable"
    )


def _line_per_batch(report: KeyRotation) -> None:
    render.err.print(
        f"batch {report.batches}: up to id {report.last_id}: {_counts(report)}", markup=False
    )


def _with_bar(run: Callable[[Progress], KeyRotation]) -> KeyRotation:
    """`run(progress)` under a spinner that shows the counts so far (a terminal)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    bar = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), console=render.err, transient=True
    )
    task = bar.add_task("re-encrypting", total=None)

    def progress(report: KeyRotation) -> None:  # started at the first batch: a refusal is one line
        if not bar.live.is_started:
            bar.start()
        bar.update(task, description=f"re-encrypting: up to id {report.last_id}: {_counts(report)}")

    try:
        return run(progress)
    finally:
        if bar.live.is_started:
            bar.stop()


def _show(report: KeyRotation) -> None:
    out = render.out
    out.print(f"key {report.kid}: {_counts(report)}, in {report.batches} batch(es)", markup=False)
    for row in report.unreadable[:LISTED]:
        where = visible(f"{row.channel}:{row.key}")
        out.print(Text(f"  unreadable #{row.id} {where}: key {row.kid} {row.reason}"))
    if report.unreadable_count > LISTED:
        out.print(f"  … and {report.unreadable_count - LISTED} more (--json lists up to 1000)")
    if report.unreadable_count:
        out.print(
            "unreadable rows are left as they are: configure their key and run again",
            markup=False,
        )
    if report.busy:
        out.print(
            f"{report.busy} row(s) stayed locked by other transactions (or went): run again",
            markup=False,
        )
    if report.changed:
        out.print(f"{report.changed} row(s) changed meanwhile (forgotten): left", markup=False)
