"""`denpyo demo`: the invoice-email story on screen, drawn with rich."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from denpyo.cli import render
from denpyo.cli.app import json_option, main

if TYPE_CHECKING:
    from denpyo.demo import DemoResult


PIPED_WIDTH = 100
"""Columns of the story when piped with no COLUMNS set (a log, a file, `| less`)."""


def story_console() -> Console:
    """Where the story is drawn. Piped, `render.out` is far wider than any line, so
    that `denpyo list` keeps its rows whole; the story's rules and prose would fill all
    of it, so it gets a console of its own, as wide as a roomy terminal."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return render.out
    return Console(highlight=False, soft_wrap=False, width=PIPED_WIDTH)


class RichReporter:
    """Each figure on one line, with the SQL that gives it printed beneath it."""

    def __init__(self, out: Console | None = None) -> None:
        self.out = out or story_console()

    def chapter(self, title: str, text: str) -> None:
        self.out.print()
        self.out.rule(f"[bold]{escape(title)}", align="left")
        self.out.print(escape(text))

    def fact(self, value: object, what: str, proof: str) -> None:
        self.out.print(f"  [bold]{value:>5}[/]  {escape(what)}")
        self.out.print(f"         [dim]↳ {escape(proof)}[/]")

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.out.print(f"[bold]{escape(title)}")
        table = Table()
        for name in columns:
            table.add_column(name)
        for row in rows:
            table.add_row(*(escape(str(cell)) for cell in row))
        self.out.print(table)

    def say(self, text: str) -> None:
        self.out.print(f"  {escape(text)}", style="italic")

    def waiting(self, text: str) -> AbstractContextManager[object]:
        return render.err.status(escape(text))

    def finale(self, result: DemoResult) -> None:
        self.out.print()
        self.out.rule("[bold]side by side", align="left")
        table = Table()
        table.add_column("")
        table.add_column("naive: call, then INSERT", justify="right")
        table.add_column("denpyo", justify="right")
        r = result
        for name, naive, ledger in (
            ("orders", r.orders, r.orders),
            ("recorded as sent when the sender died", r.naive_table, r.denpyo_synced_after_kill),
            (
                "actually sent by then (the provider)",
                r.provider_naive,
                r.provider_denpyo_after_kill,
            ),
            ("sent, with no record of it", r.naive_lost, r.denpyo_sent_unrecorded),
            ("rows in doubt, in plain sight", "-", r.in_doubt_found),
            ("recorded as sent in the end", r.naive_table_after, r.denpyo_synced),
            ("customers emailed twice", r.duplicates_after_resend, r.provider_denpyo_duplicates),
        ):
            table.add_row(name, str(naive), str(ledger))
        self.out.print(table)
        honest = r.denpyo_synced == r.provider_denpyo and r.provider_denpyo_duplicates == 0
        verdict = (
            f"denpyo: {r.denpyo_synced} rows synced = {r.provider_denpyo} emails at the "
            "provider, none twice."
            if honest
            else "denpyo's counts do NOT match the provider's: this is a bug, please report it."
        )
        self.out.print(
            Panel.fit(
                f"{verdict}\nnaive: the table says {r.naive_table_after} sent; the provider sent "
                f"{r.naive_table_after + r.duplicates_after_resend} emails "
                f"({r.duplicates_after_resend} twice).\nfinished in {r.seconds:.1f} s",
                style="green" if honest else "red",
            )
        )


@main.command()
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the demo's files (app.db, sender logs) here; default: a temporary folder.",
)
@click.option(
    "--orders",
    type=click.IntRange(min=20, max=10_000),
    default=200,
    show_default=True,
    help="Invoice emails to send each way.",
)
@json_option
def demo(workdir: Path | None, orders: int, as_json: bool) -> None:
    """The invoice-email story in a few seconds, on SQLite with a fake provider (no services).

    A sender is killed (SIGKILL) after the provider accepted some calls and
    before the database recorded them: first the naive way (call, then INSERT),
    then with denpyo, which finds its in-doubt rows, reconciles them, and ends
    with counts that match the provider's. Every figure comes with its SQL.
    Ignores --db: the demo uses its own SQLite file.

    Example: denpyo demo --dir /tmp/denpyo-demo
    """
    from denpyo.demo import run_demo  # the fake provider and the senders: only for the demo

    reporter = None if as_json else RichReporter()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        if (workdir / "app.db").exists():
            raise click.UsageError(f"{workdir}/app.db exists; give an empty folder")
        result = run_demo(workdir, orders=orders, reporter=reporter)
    else:
        with tempfile.TemporaryDirectory(prefix="denpyo-demo-") as tmp:
            result = run_demo(Path(tmp), orders=orders, reporter=reporter)
    if as_json:
        render.emit_json(result.to_json())
