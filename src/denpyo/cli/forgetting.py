"""`denpyo forget`: a person's erasure request, honoured without losing the slip."""

from __future__ import annotations

import click

from denpyo.cli import render
from denpyo.cli.actions import by_option, note_option
from denpyo.cli.app import Env, json_option, main, pass_env
from denpyo.domain.rules import label
from denpyo.domain.text import visible

PRUNED = (
    "some rows were pruned: their payloads are gone, so --where cannot tell whether they "
    "matched; forget one by its CHANNEL:KEY to mark its key forgotten"
)


@main.command()
@click.argument("ref", required=False, metavar="[CHANNEL:KEY]")
@click.option(
    "--where",
    metavar="FIELD=VALUE",
    help="Every row whose payload has this string at FIELD (a dotted path for a nested "
    "field: customer.email=a@example.com), instead of CHANNEL:KEY.",
)
@click.option("--channel", metavar="C", help="With --where: only this channel's rows.")
@note_option
@by_option
@click.option(
    "--dry-run", is_flag=True, help="Show how many rows would be forgotten; write nothing."
)
@json_option
@pass_env
def forget(
    env: Env,
    ref: str | None,
    where: str | None,
    channel: str | None,
    note: str | None,
    by: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Erase the payloads of a call (CHANNEL:KEY, with its resends) or of a person
    (--where), live and archived, and keep the slip: status, attempts, times, ids,
    remote id and history stay, so the key is never sent again and the counts do
    not change. Texts quoting the payload become "[forgotten]". A row still open
    refuses it: abandon it first. The value searched for is never written down.

    \b
    Example: denpyo forget invoice-email:order:42 --note "erasure request #881"
    Example: denpyo forget --where to=a@example.com --note "erasure request #882" --dry-run
    """
    done = env.ledger.forget(
        ref, where=where, channel=channel, note=note or "", by=by, dry_run=dry_run
    )
    if as_json:
        render.emit_json(done.to_json())
        return
    counts = done.counts
    rows = (
        f"{counts['live']} live row(s), {counts['archived']} archived row(s) and "
        f"{counts['removed']} removed row(s) of {visible(done.target)}"
    )
    if done.dry_run:
        render.out.print(f"would forget the payloads of {rows}; nothing written", markup=False)
    else:
        action = f"action #{done.action.id}" if done.action else "no action"
        render.out.print(
            f"forgot the payloads of {rows} ({done.files} archive file(s) rewritten; {action})",
            markup=False,
        )
    for sub in done.live:
        render.out.print(f"  {visible(label(sub))} {sub.status.value}", markup=False)
    for sid, why in done.skipped:
        render.out.print(f"  skipped #{sid}: {visible(why)}", markup=False)
    if done.unsearched:
        render.out.print(PRUNED, markup=False)
