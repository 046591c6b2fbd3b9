"""`FakeProviderClient`: drive a fake provider that runs in another process."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from denpyo.testing._core import ProviderStats


class FakeProviderClient:
    """Synchronous client of a fake provider's control endpoints (stdlib only)."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            raise RuntimeError(f"fake provider {method} {path}: HTTP {exc.code}: {detail}") from exc

    def stats(self) -> ProviderStats:
        """Its counters now (`GET /stats`): `stats().duplicates == 0` is "nothing
        was sent twice"."""
        return ProviderStats.from_dict(self._call("GET", "/stats"))

    def accepted(self) -> list[dict[str, Any]]:
        """Every effect, oldest first: ``{"id", "idempotency_key", "payload", "at"}``."""
        effects: list[dict[str, Any]] = self._call("GET", "/accepted")
        return effects

    def accepted_keys(self) -> dict[str, int]:
        """Idempotency key -> number of effects: a value above 1 is a double effect."""
        counts: dict[str, int] = {}
        for effect in self.accepted():
            key = effect["idempotency_key"]
            counts[key] = counts.get(key, 0) + 1
        return counts

    def accepted_ids_for(self, idempotency_key: str) -> list[str]:
        """Remote ids of the effects for that key; more than one is a double effect."""
        return [e["id"] for e in self.accepted() if e["idempotency_key"] == idempotency_key]

    def reset(self) -> None:
        """Forget every effect and zero the counters (`POST /reset`); the faults stay."""
        self._call("POST", "/reset", {})

    def configure(self, **opts: Any) -> None:
        """Same option names as `FakeProvider.configure`; a bad option raises RuntimeError."""
        self._call("POST", "/configure", opts)

    def __repr__(self) -> str:
        return f"<FakeProviderClient {self.url}>"
