"""The command line's index (cli/index.py): `denpyo --help` lists the commands from it
without importing them, so it must say what the commands themselves say."""

import importlib
import pkgutil
import subprocess
import sys

import click

import denpyo.cli
from denpyo.cli import main
from denpyo.cli.index import COMMANDS


def test_the_index_names_each_command_its_module_and_its_first_sentence() -> None:
    for module in pkgutil.iter_modules(denpyo.cli.__path__, "denpyo.cli."):
        if module.name != "denpyo.cli.__main__":  # which runs the command line
            importlib.import_module(module.name)  # every command registers itself
    assert set(main.commands) == set(COMMANDS)
    for name, (module, summary) in COMMANDS.items():
        command = main.commands[name]
        assert command.callback is not None
        assert command.callback.__module__ == f"denpyo.cli.{module}", name
        assert command.get_short_help_str(10**6) == summary, name


def test_each_command_is_found_by_its_name_alone() -> None:
    commands = main.every_command()
    assert set(commands) == set(COMMANDS)
    assert all(isinstance(command, click.Command) for command in commands.values())


def test_the_help_imports_no_command_nor_the_engine() -> None:
    """`denpyo --help` (and any command's start) pays for click and the index only."""
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom denpyo.cli import main\n"
            "try:\n    main(['--help'], prog_name='denpyo')\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(shown.stderr.split())
    assert "Commands:" in shown.stdout and "worker" in shown.stdout
    heavy = {"rich", "denpyo.engine.ledger", "denpyo.store", "denpyo.web", "starlette"}
    assert not loaded & heavy
    assert not loaded & {f"denpyo.cli.{module}" for module, _ in COMMANDS.values()}
