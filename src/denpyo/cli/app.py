"""The `denpyo` command group: where the ledger comes from, and how errors end."""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from denpyo.cli.index import COMMANDS
from denpyo.domain.text import visible
from denpyo.engine.processes import EXIT_INPUT, EXIT_UNAVAILABLE
from denpyo.errors import ConfigurationError, DenpyoError, StoreUnavailable

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

F = TypeVar("F", bound=Callable[..., Any])


class InputError(click.ClickException):
    """Bad input or configuration: one line on stderr, exit 2, nothing written."""

    exit_code = EXIT_INPUT

    def show(self, file: Any = None) -> None:
        lines = [line.strip() for line in self.format_message().splitlines()]
        click.echo(f"error: {visible(' / '.join(line for line in lines if line))}", err=True)


class Unavailable(InputError):
    """The database is out of reach: one line on stderr, exit 3. Not the user's
    mistake, so not exit 2: a script or a supervisor may try again later."""

    exit_code = EXIT_UNAVAILABLE


class Env:
    """What every command shares: the ledger, opened on first use and closed at exit."""

    def __init__(self, db: str | None, app: str | None, read_db: str | None = None) -> None:
        self.db = db
        self.app = app
        self.read_db = read_db
        self._ledger: Ledger | None = None

    @property
    def url(self) -> str:
        from denpyo.engine.ledger import database_url  # the engine only where it is used

        return database_url(self.db)

    @property
    def ledger(self) -> Ledger:
        from denpyo.engine.ledger import Ledger

        if self._ledger is None:
            ledger = load_app(self.app) if self.app else Ledger(self.url)
            if self.read_db:
                ledger.read_from(self.read_db)
            self._ledger = ledger
        return self._ledger

    def require_channels(self, what: str) -> Ledger:
        """The ledger, which must have channels: say which --app module registered none."""
        ledger = self.ledger
        if self.app and not ledger.channels:
            module, _, attr = self.app.partition(":")
            raise ConfigurationError(
                f"--app {self.app!r}: module {module} registered no channel with ledger "
                f"{attr}; {what} needs them (register each with @{attr}.channel(...) when "
                "the module is imported)"
            )
        from denpyo.engine.operator import require_channels

        require_channels(ledger, what)
        return ledger

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None


def load_app(spec: str) -> Ledger:
    """Import `module:attr` (a Ledger, or a function of no arguments that returns
    one), as uvicorn does: the working directory is importable. Nothing else is
    called: `sys:exit` must not end the command as if all were fine."""
    from denpyo.engine.ledger import Ledger

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--app {spec!r}: expected module:attribute (myapp.ledger:ledger)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # the user's module runs: it may raise anything
        raise ConfigurationError(
            f"--app {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"--app {spec!r}: {module_name} has no {attr!r}") from None
    if isinstance(obj, Ledger):
        return obj
    if not (inspect.isfunction(obj) or inspect.ismethod(obj)):
        raise ConfigurationError(
            f"--app {spec!r} is a {type(obj).__name__}, not a denpyo.Ledger "
            "(or a function returning one)"
        )
    if not _takes_no_arguments(obj):
        raise ConfigurationError(
            f"--app {spec!r} is a function that needs arguments, not a denpyo.Ledger "
            "(or a function of none returning one)"
        )
    try:
        made = obj()
    except (Exception, SystemExit) as exc:  # the user's code: it may raise anything
        raise ConfigurationError(
            f"--app {spec!r}: calling {attr}() raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(made, Ledger):
        if inspect.iscoroutine(made):
            made.close()  # never awaited: said below, not warned about at exit
        raise ConfigurationError(
            f"--app {spec!r}: {attr}() returned a {type(made).__name__}, not a denpyo.Ledger"
        )
    return made


def _takes_no_arguments(fn: Callable[..., Any]) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


class DenpyoGroup(click.Group):
    """Turns every DenpyoError, and every usage error, into one line on stderr and
    exit code 2 (click's own usage error takes four)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        for arg in args:
            if not arg.isascii():
                try:
                    arg.encode()
                except UnicodeEncodeError:
                    # Bytes that are not UTF-8 reach Python as lone surrogates, which no
                    # database driver will take: refuse them here, once for every command.
                    raise InputError(f"{arg!a} is not valid UTF-8 text") from None
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _one_line(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StoreUnavailable as exc:
            raise Unavailable(str(exc)) from exc
        except DenpyoError as exc:
            raise InputError(str(exc)) from exc
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            command = f"{ctx.command_path} {ctx.invoked_subcommand or ''}".strip()
            raise _one_line(exc, command) from exc


class LazyGroup(DenpyoGroup):
    """`denpyo` itself: a command's module is imported only when that command runs
    (it registers the command with `@main.command`), and `--help` lists every
    command from the index (`cli/index.py`), importing none."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"denpyo.cli.{COMMANDS[cmd_name][0]}")
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists commands (the first sentence of each one's help, cut to
        fit), from the index: a stand-in command with that sentence for its help."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [
            (name, click.Command(name, help=summary).get_short_help_str(limit))
            for name, (_, summary) in sorted(COMMANDS.items())
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def every_command(self) -> dict[str, click.Command]:
        """Every command, each module imported: for what checks them all."""
        for name in COMMANDS:
            self.get_command(click.Context(self), name)
        return dict(self.commands)


def _one_line(exc: click.UsageError, command: str = "denpyo") -> InputError:
    where = exc.ctx.command_path if exc.ctx is not None else command
    return InputError(f"{exc.format_message()} (see `{where} --help`)")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    metavar="URL",
    help="Database URL; else $DENPYO_DATABASE_URL, else sqlite:///denpyo.db.",
)
@click.option(
    "--read-db",
    metavar="URL",
    envvar="DENPYO_READ_DATABASE_URL",
    help="A standby of the database for what only reads (status, report, list, show, "
    "audit without --adopt, the dashboard's pages). [env: DENPYO_READ_DATABASE_URL]",
)
@click.option(
    "--app",
    metavar="MODULE:ATTR",
    envvar="DENPYO_APP",
    help="Import your Ledger (with its channels) from MODULE:ATTR; needed by reconcile, "
    "audit and worker. [env: DENPYO_APP]",
)
@click.version_option(package_name="denpyo")
@click.pass_context
def main(ctx: click.Context, db: str | None, read_db: str | None, app: str | None) -> None:
    """denpyo: the record of every call your application makes to an outside API.

    For the people on call: was it sent, what went wrong, and what to do about it.

    \b
    Exit codes:
      0  fine
      1  something needs a person (status --check, list --check, audit)
      2  usage or input error: one line on stderr, nothing written
      3  the database is out of reach: one line on stderr, try again later

    Example: denpyo --db postgresql://app@db/app status
    """
    if db and app:
        raise InputError("give --db or --app, not both (your Ledger names its own database)")
    env = Env(db, app, read_db)
    ctx.obj = env
    ctx.call_on_close(env.close)


def pass_env(fn: F) -> F:
    return click.pass_obj(fn)  # type: ignore[return-value]


def fail(message: str) -> NoReturn:
    raise InputError(message)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_options(default: int) -> Callable[[F], F]:
    """`-v` (repeat it) and `--log-level`, for a command that logs what the engine
    does (docs/guide/logging.md): the command receives `log_level`, the level asked
    for, else `default` lowered one step per `-v`."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, verbose: int, level_name: str | None, **kwargs: Any) -> Any:
            level = getattr(logging, level_name) if level_name else default - 10 * verbose
            return fn(*args, log_level=max(level, logging.DEBUG), **kwargs)

        command = click.option(
            "--log-level",
            "level_name",
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            callback=lambda ctx, param, value: value.upper() if value else None,
            help=f"Log at this level and above [default: {logging.getLevelName(default)}].",
        )(command)
        command = click.option(
            "-v",
            "--verbose",
            count=True,
            help="Log more: one level lower per -v (DEBUG at most).",
        )(command)
        return command  # type: ignore[return-value]

    return decorate


def full_option(fn: F) -> F:
    return click.option(
        "--full",
        is_flag=True,
        help="Show everything, unredacted (logged): by default a long payload, error or "
        "note is cut, with a marker saying how much was left out, and the payload's "
        "sensitive fields read [redacted].",
    )(fn)
