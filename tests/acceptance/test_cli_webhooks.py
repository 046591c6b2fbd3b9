"""`denpyo webhooks` in a subprocess, on every backend: its secrets from the
environment, a signed event settling a row in doubt before the answer, a forged one
refused; no provider, no start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
from test_serve import start, stopped, wait_for  # noqa: F401 - stopped: a fixture

import denpyo
from conftest import free_port
from denpyo import Status
from denpyo.domain.moves import Move
from webhook_signing import STRIPE_SECRET, stripe_request


def test_webhooks_refuse_to_start_with_no_provider(db_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "--db", db_url, "webhooks"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **_pythonpath()},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: no provider to serve")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_signed_stripe_event_settles_a_row_in_doubt_before_the_answer(
    db_url: str,
    stopped: list[subprocess.Popen[str]],  # noqa: F811 - the fixture
) -> None:
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("charge")(lambda sub: "pi_never")
        ledger.enqueue("charge", "order:1", {"amount": 100})
        [held] = ledger.store.claim("charge", holder="crashed", limit=1, lease=60)
        ledger.store.move(
            [
                Move(
                    held.id,
                    Status.REQUESTING,
                    Status.REQUESTING,
                    "dead",
                    holder="crashed",
                    new_holder="crashed",
                    lease=0,
                    retry_in=0,
                    keep_error=True,
                )
            ]
        )
        port = free_port()
        proc = start(
            ["--db", db_url, "webhooks", "--port", str(port)],
            {"DENPYO_STRIPE_WEBHOOK_SECRET": STRIPE_SECRET},
        )
        stopped.append(proc)
        base = f"http://127.0.0.1:{port}"
        assert wait_for(f"{base}/stripe").status_code == 405  # a POST route
        obj = {
            "id": "pi_1",
            "object": "payment_intent",
            "metadata": {"denpyo_key": held.idempotency_key},
        }
        forged_body, headers = stripe_request(
            "evt_1", "payment_intent.succeeded", obj, secret="whsec_forged"
        )
        assert httpx.post(f"{base}/stripe", content=forged_body, headers=headers).status_code == 400
        assert httpx.post(f"{base}/sendgrid", content=b"[]").status_code == 404  # not configured
        sub = ledger.get("charge", "order:1")
        assert sub is not None and sub.status is Status.REQUESTING
        body, headers = stripe_request("evt_1", "payment_intent.succeeded", obj)
        assert httpx.post(f"{base}/stripe", content=body, headers=headers).status_code == 200
        sub = ledger.get("charge", "order:1")  # right after the answer
        assert sub is not None and sub.status is Status.SYNCED and sub.remote_id == "pi_1"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert f"webhooks on http://127.0.0.1:{port}/: POST /stripe" in err


def _pythonpath() -> dict[str, str]:
    return {name: os.environ[name] for name in ("PYTHONPATH", "HOME") if name in os.environ}
