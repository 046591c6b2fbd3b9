"""The row filters, defined once for every command that selects rows (`list`, `retry`),
so that a filter a person learnt on one command means the same on the others."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import click

from denpyo.cli import render
from denpyo.cli.app import fail
from denpyo.domain.filters import Filter, parse_statuses
from denpyo.domain.text import visible
from denpyo.engine import operator as op
from denpyo.engine.ledger import Ledger

F = TypeVar("F", bound=Callable[..., Any])

channel_option = click.option("--channel", metavar="NAME", help="Only this channel.")


@dataclass(frozen=True, slots=True)
class RowFilters:
    """What a person typed to select rows, before it is read against the database clock."""

    statuses: tuple[str, ...]
    channel: str | None
    in_doubt: bool | None
    needs_attention: bool | None
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
            needs_attention=self.needs_attention,
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
        fail(f"no channel named {channel!r}: the application registers {registered}; "
             f"channels with rows: {with_rows}")  # fmt: skip
    render.err.print(f"note: channel {channel!r} has no rows (channels with rows: {with_rows})",
                     markup=False, highlight=False, soft_wrap=True)  # fmt: skip


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
            "--needs-attention", is_flag=True, default=None, help="Only rows a person must see."
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
