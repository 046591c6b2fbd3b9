"""The FastAPI example (examples/fastapi_app) against PostgreSQL and the fake
provider: an order and its invoice email commit together, a failed request
leaves neither, and the worker beside the app sends the email."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psycopg
import pytest

from denpyo.testing import FakeProvider

APP = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app" / "app.py"


@pytest.fixture
def example(
    postgres_url: str, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    pytest.importorskip("fastapi")
    monkeypatch.setenv("DATABASE_URL", postgres_url)
    monkeypatch.setenv("MAIL_URL", provider.send_url)
    spec = importlib.util.spec_from_file_location("fastapi_example_app", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _count(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def test_an_order_and_its_email_commit_together_and_the_email_is_sent(
    example: ModuleType, postgres_url: str, provider: FakeProvider
) -> None:
    from fastapi.testclient import TestClient

    with TestClient(example.app) as client:
        good = client.post("/orders", json={"order_id": "42", "email": "a@x", "amount": 1200})
        assert good.status_code == 201, good.text
        bad = client.post("/orders", json={"order_id": "43", "email": "b@x", "amount": 0})
        assert bad.status_code == 422
        assert client.get("/orders/43/invoice-email").status_code == 404

        deadline = time.monotonic() + 30
        status = client.get("/orders/42/invoice-email").json()
        while status["status"] != "synced" and time.monotonic() < deadline:
            time.sleep(0.05)
            status = client.get("/orders/42/invoice-email").json()
        assert status["status"] == "synced" and status["remote_id"]

    assert _count(postgres_url, "SELECT COUNT(*) FROM orders WHERE id = '42'") == 1
    assert _count(postgres_url, "SELECT COUNT(*) FROM orders WHERE id = '43'") == 0
    assert _count(postgres_url, "SELECT COUNT(*) FROM denpyo_submissions") == 1
    assert list(provider.accepted_keys().values()) == [1]
