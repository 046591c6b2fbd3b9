"""The shop registers its invoice-email channel where a project would: in `ready()`.
Only when the tests give a provider (`SHOP_PROVIDER_URL`, a fake provider's base
URL): in-process tests register the channel themselves."""

import os

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "django_project.shop"

    def ready(self) -> None:
        url = os.environ.get("SHOP_PROVIDER_URL")
        if url:
            from denpyo.channels.http import HttpChannel
            from denpyo.contrib.django import get_ledger

            mail = HttpChannel(f"{url}/send", lookup_url=f"{url}/lookup/{{idempotency_key}}")
            get_ledger().channel("invoice-email", verify=mail.verifier)(mail.send)
