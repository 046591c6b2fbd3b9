"""The Django app: `"denpyo.contrib.django"` in INSTALLED_APPS."""

from __future__ import annotations

from django.apps import AppConfig


class DenpyoConfig(AppConfig):
    """Label `denpyo`: its migrations, admin and permissions are `denpyo.*`."""

    name = "denpyo.contrib.django"
    label = "denpyo"
    verbose_name = "denpyo ledger"
    default_auto_field = "django.db.models.BigAutoField"
