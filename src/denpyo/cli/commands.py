"""Commands that read, and the schema: migrate, sql, status, list, show."""

from __future__ import annotations

import click

from denpyo.cli import render
from denpyo.cli.app import EXIT_ATTENTION, Env, fail, full_option, json_option, main, pass_env
from denpyo.cli.rows import RowFilters, channel_option, row_filters
from denpyo.domain.filters import DEFAULT_LIMIT
from denpyo.engine import operator as op
from denpyo.store import dialect_of
from denpyo.store.queries import DIALECTS, ddl


@main.command()
@json_option
@pass_env
def migrate(env: Env, as_json: bool) -> None:
    """Create or upgrade the denpyo tables (safe to run twice, or from two hosts).

    Example: denpyo --db sqlite:///app.db migrate
    """
    applied = env.ledger.migrate()
    version = env.ledger.store.schema_version()
    if as_json:
        render.emit_json({"applied": applied, "version": version})
    elif applied:
        render.out.print(f"applied migration(s) {', '.join(map(str, applied))}; schema {version}")
    else:
        render.out.print(f"already up to date (schema {version})")


@main.command()
@click.option(
    "--dialect",
    type=click.Choice(DIALECTS),
    help="Database kind; default: the kind of --db.",
)
@pass_env
def sql(env: Env, dialect: str | None) -> None:
    """Print the schema as SQL, for those who run their own migrations (Alembic, Django).

    Nothing is connected to; the statements include the schema-version rows, so
    that `denpyo migrate` later knows the tables are there.

    Example: denpyo sql --dialect postgresql > migrations/0042_denpyo.sql
    """
    chosen = dialect or dialect_of(env.url)
    try:
        script = ddl(chosen)
    except (FileNotFoundError, KeyError):
        fail(f"this denpyo has no {chosen} schema")
    click.echo(script, nl=False)


@main.command()
@channel_option
@click.option("--check", is_flag=True, help="Exit 1 when something needs attention.")
@json_option
@pass_env
@click.pass_context
def status(ctx: click.Context, env: Env, channel: str | None, check: bool, as_json: bool) -> None:
    """Counts by channel and status; in doubt, exhausted, and the oldest pending row.

    "Needs attention" counts rows with no person's resolution that are in doubt
    (the call may have arrived), exhausted (failed, no attempt left) or rejected.

    Example: denpyo status --check || page-the-on-call
    """
    report = op.status(env.ledger, channel)
    if as_json:
        render.emit_json(report.to_json())
    else:
        render.show_status(report)
    if check and report.needs_attention:
        ctx.exit(EXIT_ATTENTION)


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
    Example: denpyo list --needs-attention --json | jq '.[].id'
    """
    flt = rows.to_filter(env.ledger)
    subs = op.list_submissions(env.ledger, flt)
    if as_json:
        render.emit_json([op.submission_json(s, full=full) for s in subs])
    else:
        render.show_list(subs, env.ledger.store.now(), flt.limit, full=full)
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
    found = op.history(env.ledger, ref)
    if as_json:
        render.emit_json(found.to_json(full=full))
    else:
        render.show_history(found, full=full)
