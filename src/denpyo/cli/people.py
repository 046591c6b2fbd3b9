"""`denpyo users`: the people who may sign in to the dashboard, in its users file.

No database: these commands read and write the file only (`--file`, else
$DENPYO_USERS). A token is printed once, when it is made, and kept nowhere but in
the hands of its person: the file holds its argon2 hash.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from denpyo.cli import render
from denpyo.cli.app import DenpyoGroup, fail, json_option, main

F = TypeVar("F", bound=Callable[..., Any])


def file_option(fn: F) -> F:
    return click.option(
        "--file",
        "path",
        metavar="PATH",
        help="The users file; else $DENPYO_USERS.",
    )(fn)


def users_file(path: str | None) -> str:
    """The file a command works on: --file, else $DENPYO_USERS, else an error."""
    found = path or os.environ.get("DENPYO_USERS")
    if not found:
        fail("which users file? give --file PATH or set DENPYO_USERS")
    return found


def say(text: str) -> None:
    render.out.print(text, markup=False, highlight=False, soft_wrap=True)


def show_token(name: str, token: str) -> None:
    say(f"token: {token}")
    say(
        f"It is shown only once: give it to {name} now. The file keeps only its hash; "
        f"`denpyo users reset {name}` makes a new one."
    )


@main.group(cls=DenpyoGroup)
def users() -> None:
    """The people who may sign in to the dashboard, each with a role and a token of
    their own (`denpyo dashboard --users FILE`). Roles: viewer (looks), operator
    (also acts on rows and channels), approver (also decides other people's
    requests), admin (everything).

    \b
    Example: denpyo users add alice --role operator --file /etc/denpyo/users.json
    Example: DENPYO_USERS=/etc/denpyo/users.json denpyo users list
    """


@users.command("add")
@click.argument("name")
@click.option("--role", required=True, metavar="ROLE", help="viewer, operator, approver or admin.")
@click.option(
    "--no-token",
    is_flag=True,
    help="No token: the proxy in front signs this person in (--trusted-header); the file "
    "gives only their role.",
)
@file_option
def add(name: str, role: str, no_token: bool, path: str | None) -> None:
    """Add a person, and print their token (once: it is kept nowhere else). The file
    is made if it does not exist (readable by its owner only).

    Example: denpyo users add alice --role operator --file users.json
    """
    from denpyo.engine import people

    person, token = people.add(users_file(path), name, role, token=not no_token)
    say(f"{person.name} added as {person.role.value}")
    if token is not None:
        show_token(person.name, token)


@users.command("list")
@file_option
@json_option
def list_(path: str | None, as_json: bool) -> None:
    """The people of the file: name, role, when added, and whether they have a token
    (never its hash).

    Example: denpyo users list --json
    """
    from denpyo.engine import people

    found = people.read_people(users_file(path))
    if as_json:
        render.emit_json([person.listed() for person in found])
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("name", "role", "added", "token"):
        table.add_column(column)
    for person in found:
        table.add_row(
            render.plain(person.name),
            person.role.value,
            person.added,
            "yes" if person.token_hash else "no (the proxy signs in)",
        )
    render.out.print(table)
    render.err.print(f"{len(found)} {'person' if len(found) == 1 else 'people'}", highlight=False)


@users.command("remove")
@click.argument("name")
@file_option
def remove(name: str, path: str | None) -> None:
    """Remove a person: their token, and their sessions, stop working at their next
    request.

    Example: denpyo users remove alice
    """
    from denpyo.engine import people

    gone = people.remove(users_file(path), name)
    say(f"{gone.name} removed")


@users.command("role")
@click.argument("name")
@click.argument("role")
@file_option
def set_role(name: str, role: str, path: str | None) -> None:
    """Give a person another role; their open sessions have it at their next request.

    Example: denpyo users role alice approver
    """
    from denpyo.engine import people

    person, was = people.set_role(users_file(path), name, role)
    say(f"{person.name} is now {person.role.value} (was {was.value})")


@users.command("reset")
@click.argument("name")
@file_option
def reset(name: str, path: str | None) -> None:
    """A new token for a person (a lost or leaked one): the old token, and the
    sessions signed in with it, stop working. The new one is printed once.

    Example: denpyo users reset alice
    """
    from denpyo.engine import people

    person, token = people.reset(users_file(path), name)
    say(f"a new token for {person.name}; the old one no longer signs in")
    show_token(person.name, token)
