"""Test helpers: a fake HTTP provider with faults, for denpyo's tests, the demo and yours.

::

    from denpyo.testing import FakeProvider

    with FakeProvider(honour_idempotency=False, drop_rate=0.1, seed=1) as provider:
        ...  # point an HttpChannel at provider.send_url / provider.lookup_url
        assert max(provider.accepted_keys().values()) == 1, "a double effect"

``python -m denpyo.testing --port 8765`` runs one as a process;
`FakeProviderClient` reads and steers it from elsewhere. It serves on aiohttp
when that is installed, else on the standard library (`transport=` chooses).
"""

from denpyo.testing._client import FakeProviderClient
from denpyo.testing._core import ProviderOptions, ProviderStats
from denpyo.testing._provider import FakeProvider

__all__ = ["FakeProvider", "FakeProviderClient", "ProviderOptions", "ProviderStats"]
