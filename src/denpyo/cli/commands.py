"""The schema and the servers: migrate, sql, dashboard; and how the dashboard and
the webhooks are served."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

import click

from denpyo.cli import render
from denpyo.cli.app import Env, F, fail, json_option, main, pass_env
from denpyo.domain.actions import DEFAULT_BULK_OVER, Approval
from denpyo.engine.schema import DATABASES, schema_sql
from denpyo.errors import InvalidInput


@main.command()
@click.option(
    "--partitions",
    type=click.Choice(["daily", "monthly"]),
    help="PostgreSQL with pg_partman, on a database without the tables: partition the "
    "rows by day or month (retention then drops them whole).",
)
@json_option
@pass_env
def migrate(env: Env, partitions: str | None, as_json: bool) -> None:
    """Create or upgrade the denpyo tables (safe to run twice, or from two hosts).

    Example: denpyo --db sqlite:///app.db migrate
    """
    applied = env.ledger.migrate(partitions=partitions)
    version = env.ledger.schema_version()
    if as_json:
        render.emit_json({"applied": applied, "version": version})
    elif applied:
        render.out.print(f"applied migration(s) {', '.join(map(str, applied))}; schema {version}")
    else:
        render.out.print(f"already up to date (schema {version})")


@main.command()
@click.option(
    "--dialect",
    type=click.Choice(DATABASES),
    help="Database kind; default: the kind of --db.",
)
@pass_env
def sql(env: Env, dialect: str | None) -> None:
    """Print the schema as SQL, for those who run their own migrations (Alembic, Django).

    Nothing is connected to; the statements include the schema-version rows, so
    that `denpyo migrate` later knows the tables are there.

    Example: denpyo sql --dialect postgresql > migrations/0042_denpyo.sql
    """
    try:
        script = schema_sql(dialect, url=env.url)
    except InvalidInput as exc:
        fail(str(exc))
    click.echo(script, nl=False)


def listen_options(port: int) -> Callable[[F], F]:
    """`--host` (loopback by default) and `--port` (`port` by default): where a
    server (the dashboard, the webhooks) listens."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--port",
            type=click.IntRange(min=1, max=65535),
            default=port,
            show_default=True,
            help="Port.",
        )(fn)
        return click.option(
            "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
        )(fn)

    return decorate


@main.command()
@listen_options(8470)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A name people reach the dashboard by (the Host a browser sends: "
    "ops.example.com; repeat for more; * for any). Always: IP addresses, localhost, "
    "--host, and this machine's name when --host is 0.0.0.0 or ::.",
)
@click.option(
    "--token",
    metavar="TOKEN",
    help="What people sign in with, as admins (and scripts send as Bearer); else "
    "$DENPYO_DASHBOARD_TOKEN; with none of --users and --trusted-header either, one is "
    "made up and printed. At least 16 characters, 8 of them different, not runs, "
    "repeats or common words.",
)
@click.option(
    "--users",
    "users_file",
    metavar="FILE",
    help="The users file (`denpyo users`): each person signs in with their name and their "
    "own token, with their own role; else $DENPYO_USERS.",
)
@click.option(
    "--trusted-header",
    metavar="NAME",
    help="A header in which the proxy in front names the person it signed in "
    "(X-Forwarded-User); believed only from a --trusted-proxy address.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="CIDR",
    help="An address or network of that proxy (10.0.0.0/8, 127.0.0.1; repeat for more).",
)
@click.option(
    "--proxy-role",
    metavar="ROLE",
    default="viewer",
    show_default=True,
    help="The role of a person the proxy names who is not in the users file.",
)
@click.option(
    "--session-key-file",
    metavar="PATH",
    help="A file holding the key that signs the session cookies; else $DENPYO_SESSION_KEY, "
    "else a random key made at start.",
)
@click.option(
    "--read-only", is_flag=True, help="Everyone is a viewer: show everything, change nothing."
)
@click.option(
    "--two-person",
    is_flag=True,
    help="Marking synced, forced actions on rows in doubt and bulk actions over "
    "--bulk-over rows wait for a second person with the approver role.",
)
@click.option(
    "--bulk-over",
    type=click.IntRange(min=0),
    default=DEFAULT_BULK_OVER,
    show_default=True,
    help="With --two-person: the largest bulk action one person may take alone.",
)
@click.option(
    "--redact",
    "redact",
    multiple=True,
    metavar="FIELD",
    help="Also show this payload field as [redacted], besides the ledger's own and "
    "$DENPYO_REDACT's (repeat for more).",
)
@pass_env
def dashboard(
    env: Env,
    host: str,
    port: int,
    allowed_hosts: tuple[str, ...],
    token: str | None,
    users_file: str | None,
    trusted_header: str | None,
    trusted_proxies: tuple[str, ...],
    proxy_role: str,
    session_key_file: str | None,
    read_only: bool,
    two_person: bool,
    bulk_over: int,
    redact: tuple[str, ...],
) -> None:
    """Serve the dashboard: counts, the needs-a-person queue, each row's history,
    and retry / abandon / resend / mark synced with your name and a note.

    \b
    Example: denpyo --db postgresql://app@db/app dashboard --port 8080
    Example: denpyo dashboard --users /etc/denpyo/users.json --two-person
    Example: DENPYO_DASHBOARD_TOKEN=$(cat /etc/denpyo/token) denpyo dashboard --read-only
    """
    import secrets

    from denpyo.web import create_app

    token = token or os.environ.get("DENPYO_DASHBOARD_TOKEN") or None
    users_file = users_file or os.environ.get("DENPYO_USERS") or None
    generated = token is None and users_file is None and trusted_header is None
    if generated:
        token = secrets.token_urlsafe(24)
    app = create_app(
        env.ledger,
        token=token,
        users=users_file,
        trusted_header=trusted_header,
        trusted_proxies=trusted_proxies,
        proxy_role=proxy_role,
        session_key=_session_key(session_key_file),
        read_only=read_only,
        approval=Approval(bulk_over=bulk_over) if two_person else None,
        redact=redact,
        allowed_hosts=served_as(host, allowed_hosts),
    )
    listening = listen(host, port, "the dashboard")
    render.err.print(f"dashboard on {url_of(host, port)} {'(read-only)' if read_only else ''}")
    if generated:
        render.err.print(f"sign in with the token: {token}", soft_wrap=True, highlight=False)
    if users_file:
        render.err.print(f"people sign in with their own tokens from {users_file}", markup=False)
    if trusted_header:
        proxies = ", ".join(trusted_proxies)
        render.err.print(f"{trusted_header} names the person when sent by {proxies}", markup=False)
    warn_if_public(host)
    # The peer address is the connection's: X-Forwarded-For is believed only from a
    # --trusted-proxy, by the dashboard itself.
    serve_asgi(app, listening)


def warn_if_public(host: str) -> None:
    """A server bound beyond this machine speaks plain HTTP: say so once, at start."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        render.err.print(f"listening on {host}: put HTTPS in front of it beyond this machine")


def listen(host: str, port: int, what: str) -> socket.socket:
    """The socket `what` serves on, bound here, so that a port in use is one line and
    exit 2, before any banner."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        fail(f"cannot serve {what} on {host}:{port}: {exc.strerror or exc}")


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve_asgi(app: Any, listening: socket.socket) -> None:
    """Serve an ASGI app (the dashboard, the webhooks) with uvicorn on `listening`
    until interrupted: the peer address is the connection's (no proxy headers), and
    connections that send nothing are closed, few waiting at once (web/connections.py)."""
    import uvicorn

    from denpyo.web.connections import server_options

    config = uvicorn.Config(app, log_level="warning", proxy_headers=False, **server_options())
    with listening:
        uvicorn.Server(config).run(sockets=[listening])


def served_as(host: str, allowed: Sequence[str]) -> list[str]:
    """The names the dashboard answers to besides IP addresses and localhost: those
    given, the address it listens on, and on every address (0.0.0.0, ::) this
    machine's own names."""

    names = [*allowed, host]
    if host in ("0.0.0.0", "::", ""):
        names += [socket.gethostname(), socket.getfqdn()]
    return list(dict.fromkeys(name for name in names if name))


def _session_key(path: str | None) -> bytes | None:
    """The session key: the file's bytes (spaces and line ends around them dropped),
    else $DENPYO_SESSION_KEY's, else None (a random one)."""
    if path is None:
        text = os.environ.get("DENPYO_SESSION_KEY", "").strip()
        return text.encode() if text else None
    try:
        with open(path, "rb") as key_file:
            return key_file.read().strip()
    except OSError as exc:
        fail(f"cannot read the session key file {path}: {exc.strerror or exc}")
