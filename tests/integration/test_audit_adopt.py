"""`audit(adopt=True)`, on every backend: a call the provider accepted that the
ledger has no row of (its row lost with a database that failed over before the
commit reached the standby) is recorded as the synced row of the key the
provider's record carries, so that the next submit of that key sends nothing."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import denpyo
from denpyo import DiscrepancyKind, RemoteRecord, Status
from denpyo.channels.http import HttpChannel
from denpyo.cli import main as cli
from denpyo.domain.limits import unlisted_payload
from denpyo.testing import FakeProvider


def keyed_lister(provider: FakeProvider, *, with_key: bool = True):  # type: ignore[no-untyped-def]
    """The provider's records with the business key each call carried (the payload's
    `to`), and the payload: what a provider with metadata returns."""

    def list_remote(since: datetime, until: datetime) -> Iterator[RemoteRecord]:
        query = f"?since={since.timestamp()}&until={until.timestamp()}&limit=1000"
        with urllib.request.urlopen(provider.list_url + query) as response:
            page = json.loads(response.read())
        for record in page["data"]:
            payload = record["payload"] or {}
            key = payload.get("to") if with_key else None
            yield RemoteRecord(record["idempotency_key"], record["id"], key, record["payload"])

    return list_remote


@pytest.fixture
def mail(ledger: denpyo.Ledger, provider: FakeProvider) -> denpyo.Ledger:
    http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url, timeout=2)
    ledger.channel("mail", verify=http.verify, list_remote=keyed_lister(provider))(http.send)
    return ledger


def window(ledger: denpyo.Ledger) -> dict[str, datetime]:
    now = ledger.store.now()
    return {"since": now - timedelta(hours=1), "until": now + timedelta(minutes=1)}


def test_a_call_the_ledger_lost_is_adopted_and_never_sent_again(
    mail: denpyo.Ledger, provider: FakeProvider, sql
) -> None:
    mail.submit("mail", "kept@example.com", {"to": "kept@example.com"})
    lost = provider.plant("idem-lost-1", payload={"to": "lost@example.com", "n": 1})

    report = mail.audit("mail", adopt=True, **window(mail))
    (found,) = report.discrepancies
    assert found.kind is DiscrepancyKind.NOT_SYNCED and found.adopted and report.adopted == 1
    row = found.submission
    assert row is not None and row.status is Status.SYNCED
    assert (row.key, row.idempotency_key, row.remote_id) == (
        "lost@example.com",
        "idem-lost-1",
        lost,
    )
    assert row.payload == {"to": "lost@example.com", "n": 1} and row.attempts == 1
    assert [e.kind for e in mail.events(row.id)] == ["created", "adopted"]
    assert "adopted by the audit" in (mail.events(row.id)[-1].detail or "")

    calls = provider.stats().requests
    again = mail.submit("mail", "lost@example.com", {"to": "lost@example.com", "n": 1})
    assert again.id == row.id and again.status is Status.SYNCED
    assert provider.stats().requests == calls, "an adopted key sends nothing"
    assert mail.audit("mail", adopt=True, **window(mail)).clean
    # the report counts it as the synced call it was
    assert sum(r.count for r in mail.report() if r.status == "synced") == 2
    assert sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'") == [(2,)]


def test_a_call_listed_without_its_payload_is_adopted_and_its_key_answers_any_payload(
    ledger: denpyo.Ledger, provider: FakeProvider
) -> None:
    """A provider whose list gives the key but not the payload (metadata only): the
    adopted row's payload is unknown, and the application's submit of the key after
    the failover is that call, not a `KeyReused`."""
    http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url, timeout=2)
    lister = keyed_lister(provider)

    def without_payloads(since: datetime, until: datetime) -> Iterator[RemoteRecord]:
        for record in lister(since, until):
            yield RemoteRecord(record.idempotency_key, record.remote_id, record.key, None)

    ledger.channel("mail", verify=http.verify, list_remote=without_payloads)(http.send)
    provider.plant("idem-bare-1", payload={"to": "bare@example.com", "n": 1})

    report = ledger.audit("mail", adopt=True, **window(ledger))
    (found,) = report.discrepancies
    row = found.submission
    assert found.adopted and row is not None and row.status is Status.SYNCED
    assert row.payload == unlisted_payload()

    calls = provider.stats().requests
    again = ledger.submit("mail", "bare@example.com", {"to": "bare@example.com", "n": 1})
    assert again.id == row.id and again.status is Status.SYNCED
    assert provider.stats().requests == calls, "an adopted key sends nothing"
    with pytest.raises(denpyo.InvalidInput, match="reserved for calls adopted"):
        ledger.submit("mail", "other@example.com", unlisted_payload())


def test_what_cannot_be_adopted_is_reported_and_nothing_is_written(
    mail: denpyo.Ledger, provider: FakeProvider, sql
) -> None:
    # the application submitted the key again after the loss: a second call was made
    mail.submit("mail", "twice@example.com", {"to": "twice@example.com"})
    provider.plant("idem-first-call", payload={"to": "twice@example.com"})
    # a record without a key (the call carried none)
    provider.plant("idem-no-key", payload=None)
    before = sql("SELECT COUNT(*) FROM denpyo_submissions")

    report = mail.audit("mail", adopt=True, **window(mail))
    details = {d.idempotency_key: d.detail for d in report.discrepancies}
    assert report.adopted == 0 and len(details) == 2
    assert "list_remote gave no key" in details["idem-no-key"]
    assert "not adopted: the ledger has row" in details["idem-first-call"]
    assert "a second call for the same key" in details["idem-first-call"]
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == before


def test_audit_without_adopt_writes_nothing(
    mail: denpyo.Ledger, provider: FakeProvider, sql
) -> None:
    provider.plant("idem-lost-2", payload={"to": "lost@example.com"})
    report = mail.audit("mail", **window(mail))
    assert report.adopted == 0 and not report.clean
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)]


def test_the_command_line_adopts_with_its_flag(
    db_url: str, provider: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))

    def audit(*more: str) -> Any:
        """`denpyo --app … audit --channel mail`, each with a module of its own (an
        --app ledger is closed when its command ends)."""
        name = f"adopting_app_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(
            "import denpyo\n"
            "from denpyo.channels.http import HttpChannel\n"
            "from test_audit_adopt import keyed_lister\n"
            f"ledger = denpyo.Ledger({db_url!r})\n"
            f"http = HttpChannel({provider.send_url!r})\n"
            "class _Provider:\n"
            f"    list_url = {provider.list_url!r}\n"
            "ledger.channel('mail', list_remote=keyed_lister(_Provider))(http.send)\n"
        )
        return CliRunner().invoke(
            cli, ["--app", f"{name}:ledger", "audit", "--channel", "mail", *more]
        )

    provider.plant("idem-lost-3", payload={"to": "cli@example.com"})
    plain = audit()
    assert plain.exit_code == 1 and "adopted" not in plain.output
    run = audit("--adopt", "--json")
    assert run.exit_code == 1, run.output  # a discrepancy was found (and repaired)
    answer = json.loads(run.output)
    assert answer["adopted"] == 1 and answer["discrepancies"][0]["adopted"] is True
    again = audit()
    assert again.exit_code == 0, again.output
