"""The project's test runner (settings.TEST_RUNNER): PostgreSQL will not drop the
test database while the ledger holds connections to it."""

from typing import Any

from django.test.runner import DiscoverRunner

from denpyo.contrib.django import close_ledger


class TestRunner(DiscoverRunner):
    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_ledger()
        super().teardown_databases(old_config, **kwargs)
