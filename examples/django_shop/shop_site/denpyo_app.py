"""The ledger for the `denpyo` command, with Django set up first:
denpyo --app shop_site.denpyo_app:ledger worker   (or status, list, …)"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_site.settings")
django.setup()  # every app's ready() runs: the channels are registered

from denpyo.contrib.django import get_ledger  # noqa: E402

ledger = get_ledger()
