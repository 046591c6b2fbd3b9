"""`denpyo audit` and `denpyo show`'s idempotency window, in subprocesses against a
user's module whose channel lists the provider's records: exit 0 when both sides
agree, 1 with each discrepancy listed (tables, or --json), 2 without the channels."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import as_json, denpyo_cli, ok

import denpyo
from denpyo.testing import FakeProvider

APP = """
import json
import os
import urllib.request

import denpyo
from denpyo.channels.http import HttpChannel

PROVIDER = os.environ["TEST_PROVIDER"]
ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])
_http = HttpChannel(PROVIDER + "/send")


def list_remote(since, until):
    after = ""
    while True:
        url = f"{PROVIDER}/list?since={since.timestamp()}&until={until.timestamp()}{after}"
        with urllib.request.urlopen(url) as response:
            page = json.loads(response.read())
        for record in page["data"]:
            yield denpyo.RemoteRecord(record["idempotency_key"], record["id"])
        if not page["has_more"]:
            return
        after = "&starting_after=" + page["data"][-1]["id"]


ledger.channel(
    "charge", idempotent=True, idempotency_window=86400, list_remote=list_remote, max_attempts=1
)(_http.send)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def app(db_url: str, tmp_path: Path) -> Iterator[tuple[dict[str, str], FakeProvider]]:
    (tmp_path / "audit_test_app.py").write_text(APP)
    with FakeProvider() as provider:
        env = {
            "DENPYO_DATABASE_URL": db_url,
            "DENPYO_APP": "audit_test_app:ledger",
            "TEST_PROVIDER": provider.url,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        }
        yield env, provider


def charge(db_url: str, provider: FakeProvider, key: str, fault: str = "ok") -> denpyo.Submission:
    from denpyo.channels.http import HttpChannel

    with denpyo.Ledger(db_url) as ledger:
        http = HttpChannel(provider.send_url)
        ledger.channel("charge", idempotent=True, max_attempts=1)(http.send)
        try:
            return ledger.submit("charge", key, {"amount": 100, "_fault": fault})
        except denpyo.SubmissionError as exc:
            return exc.submission


def test_audit_exits_0_when_both_sides_agree_and_1_with_each_discrepancy(
    db_url: str, app: tuple[dict[str, str], FakeProvider]
) -> None:
    env, provider = app
    for i in range(3):
        charge(db_url, provider, f"order:{i}")
    clean = as_json(denpyo_cli("audit", "--channel", "charge", "--json", env=env))
    assert (clean["remote_records"], clean["ledger_synced"], clean["discrepancies"]) == (3, 3, [])
    assert "no discrepancy" in ok(denpyo_cli("audit", "--channel", "charge", env=env)).stdout

    lost = charge(db_url, provider, "order:lost")
    provider.forget(lost.idempotency_key)
    # Last: its 503's Retry-After holds the channel back, and a charge meanwhile
    # would be left to a worker.
    failed = charge(db_url, provider, "order:failed", "fail")
    provider.plant(failed.idempotency_key, remote_id="ch_seen")
    found = denpyo_cli("audit", "--channel", "charge", "--since", "2h", "--json", env=env)
    assert found.returncode == 1, found.stderr
    report = __import__("json").loads(found.stdout)
    assert report["counts"] == {
        "not_synced": 1,
        "missing_at_provider": 1,
        "remote_id_differs": 0,
        "accepted_twice": 0,
    }
    rows = {d["kind"]: d for d in report["discrepancies"]}
    assert rows["not_synced"]["submission_id"] == failed.id
    assert rows["not_synced"]["remote_id"] == "ch_seen"
    assert rows["missing_at_provider"]["key"] == "order:lost"

    people = denpyo_cli("audit", "--channel", "charge", env=env)
    assert people.returncode == 1
    assert "accepted by the provider, not synced in the ledger: 1" in people.stdout
    assert "order:failed" in people.stdout and "order:lost" in people.stdout
    assert "2 discrepancies" in people.stdout


def test_audit_needs_the_channels_and_a_channel_that_lists(
    db_url: str, app: tuple[dict[str, str], FakeProvider]
) -> None:
    env, _ = app
    bare = denpyo_cli("audit", "--channel", "charge", db=db_url)
    assert bare.returncode == 2 and "--app" in bare.stderr
    unknown = denpyo_cli("audit", "--channel", "nope", env=env)
    assert unknown.returncode == 2 and "nope" in unknown.stderr
    late = denpyo_cli("audit", "--channel", "charge", "--since", "soon", env=env)
    assert late.returncode == 2 and "'soon'" in late.stderr
    for refused in (unknown, late):  # one line, no blank one from the progress bar before it
        assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1


def test_show_says_when_the_idempotency_window_closes(
    db_url: str, app: tuple[dict[str, str], FakeProvider]
) -> None:
    env, provider = app
    sub = charge(db_url, provider, "order:7")
    shown = ok(denpyo_cli("show", str(sub.id), env=env)).stdout
    assert "idempotency window" in shown and "closes in 24 h" in shown
    data = as_json(denpyo_cli("show", str(sub.id), "--json", env=env))
    assert data["idempotency_window_closes_at"] is not None
    assert "idempotency window" not in ok(denpyo_cli("show", str(sub.id), db=db_url)).stdout
