"""What to install for a part of denpyo that the core install leaves out.

`pip install denpyo` is the library on SQLite and the command line. Each other
part names its extra when its driver is missing, instead of an ImportError.
"""

from __future__ import annotations

from denpyo.errors import ConfigurationError


def missing(extra: str, what: str, exc: ImportError) -> ConfigurationError:
    """The error for `what` used without its extra installed (`exc` says which
    module was missing)."""
    return ConfigurationError(
        f"{what} needs {exc.name or 'a module'} that is not installed: "
        f"pip install 'denpyo[{extra}]'"
    )
