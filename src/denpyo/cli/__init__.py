"""The `denpyo` command line: for the people on call. Each command is a thin call
into `denpyo.engine.operator` (or the Ledger), with tables for people and
`--json` for scripts. Exit codes: 0 fine, 1 needs a person (`--check`), 2 usage
or input error, 3 the database is out of reach. A command's module is imported
only when it runs (`cli/index.py`)."""

from denpyo.cli.app import main
from denpyo.engine.processes import EXIT_ATTENTION, EXIT_INPUT, EXIT_OK, EXIT_UNAVAILABLE

__all__ = ["EXIT_ATTENTION", "EXIT_INPUT", "EXIT_OK", "EXIT_UNAVAILABLE", "main"]
