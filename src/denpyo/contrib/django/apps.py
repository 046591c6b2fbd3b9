"""The Django app: `"denpyo.contrib.django"` in INSTALLED_APPS."""

from __future__ import annotations

import sys

from django.apps import AppConfig


class DenpyoConfig(AppConfig):
    """Label `denpyo`: its migrations, admin and permissions are `denpyo.*`."""

    name = "denpyo.contrib.django"
    label = "denpyo"
    verbose_name = "denpyo ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        share_pymysql_modules()


def share_pymysql_modules() -> None:
    """Make `MySQLdb.*` PyMySQL's own modules, when `pymysql.install_as_MySQLdb()`
    made PyMySQL Django's MySQL driver.

    That call aliases only the package. Django then imports `MySQLdb.converters`
    and `MySQLdb.constants`, and Python runs PyMySQL's modules a second time under
    those names, rebinding `pymysql.err` to a copy whose exception classes are not
    the ones PyMySQL raises: denpyo's MariaDB store would no longer recognise a
    duplicate key, a lost connection or any driver error. Here every loaded
    `pymysql.X` is also `MySQLdb.X` (no second copy from now on), and a rebinding
    already made is undone.
    """
    pymysql = sys.modules.get("pymysql")
    if pymysql is None or sys.modules.get("MySQLdb") is not pymysql:
        return
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("pymysql."):
            continue
        sys.modules["MySQLdb." + name.removeprefix("pymysql.")] = module
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
