"""The audit against the provider's own records, each kind of discrepancy planted on
every backend: the provider accepted what the ledger does not say synced, the ledger
says synced what the provider has no record of, the remote ids differ, the provider
accepted a key twice; and a clean window, paged in small steps and batches."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta

import aiohttp
import pytest

import denpyo
from denpyo import DiscrepancyKind, RemoteRecord, Status
from denpyo.channels.http import HttpChannel
from denpyo.engine import audit as audit_module
from denpyo.engine import operator as op
from denpyo.testing import FakeProvider


def list_url(provider: FakeProvider, since: datetime, until: datetime, after: str | None) -> str:
    url = f"{provider.list_url}?since={since.timestamp()}&until={until.timestamp()}&limit=3"
    return url + (f"&starting_after={after}" if after else "")


def lister(provider: FakeProvider):  # type: ignore[no-untyped-def]
    """list_remote as a plain generator that pages through the provider's list API."""

    def list_remote(since: datetime, until: datetime) -> Iterator[RemoteRecord]:
        after = None
        while True:
            with urllib.request.urlopen(list_url(provider, since, until, after)) as response:
                page = json.loads(response.read())
            for record in page["data"]:
                yield RemoteRecord(record["idempotency_key"], record["id"])
            if not page["has_more"]:
                return
            after = page["data"][-1]["id"]

    return list_remote


def async_lister(provider: FakeProvider):  # type: ignore[no-untyped-def]
    """The same as an async generator."""

    async def list_remote(since: datetime, until: datetime) -> AsyncIterator[RemoteRecord]:
        after = None
        async with aiohttp.ClientSession() as session:
            while True:
                async with session.get(list_url(provider, since, until, after)) as response:
                    page = await response.json()
                for record in page["data"]:
                    yield RemoteRecord(record["idempotency_key"], record["id"])
                if not page["has_more"]:
                    return
                after = page["data"][-1]["id"]

    return list_remote


@pytest.fixture
def mail(ledger: denpyo.Ledger, provider: FakeProvider) -> denpyo.Ledger:
    http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url, timeout=2)
    ledger.channel(
        "mail", verify=http.verify, lease=5, max_attempts=1, list_remote=lister(provider)
    )(http.send)
    return ledger


def window(ledger: denpyo.Ledger) -> dict[str, datetime]:
    """The last hour and the next minute (the default ends at the database's now, and
    a call made in its last millisecond may fall either side)."""
    now = ledger.store.now()
    return {"since": now - timedelta(hours=1), "until": now + timedelta(minutes=1)}


def send(ledger: denpyo.Ledger, key: str, fault: str = "ok") -> denpyo.Submission:
    try:
        return ledger.submit("mail", key, {"to": key, "_fault": fault})
    except denpyo.SubmissionError as exc:
        return exc.submission


def test_a_window_where_both_sides_agree_is_clean(
    mail: denpyo.Ledger, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_module, "BATCH", 2)  # pages and batches of two
    for i in range(7):
        send(mail, f"order:{i}")
    send(mail, "refused", "reject")
    report = mail.audit("mail", step=600, **window(mail))
    assert report.clean, report.discrepancies
    assert (report.remote_records, report.ledger_synced) == (7, 7)


def test_each_kind_of_discrepancy_is_reported_with_its_row(
    mail: denpyo.Ledger, provider: FakeProvider
) -> None:
    for i in range(3):
        send(mail, f"fine:{i}")
    # the provider accepted a key the ledger never recorded
    stranger = provider.plant("a-key-nobody-recorded")
    # the ledger says synced; the provider has no record of it
    lost = send(mail, "lost")
    provider.forget(lost.idempotency_key)
    # both have it, under different ids (a person marked it synced with the wrong id)
    doubt = send(mail, "doubt", "drop")
    assert doubt.in_doubt
    op.resolve_mark_synced(mail, doubt.id, remote_id="msg_wrong", note="looked in the console")
    # the provider acted twice on one key
    twice = send(mail, "twice")
    provider.plant(twice.idempotency_key, remote_id="msg_second")
    # the provider accepted it; the ledger says failed (last: its 503's Retry-After
    # holds the channel back, and a submit meanwhile leaves its row to a worker)
    failed = send(mail, "failed", "fail")
    assert failed.status is Status.FAILED
    provider.plant(failed.idempotency_key)

    report = mail.audit("mail", step=7200, **window(mail))  # one step: both of "twice"
    found = {(d.kind, d.submission.key if d.submission else None) for d in report.discrepancies}
    assert found == {
        (DiscrepancyKind.NOT_SYNCED, "failed"),
        (DiscrepancyKind.NOT_SYNCED, None),
        (DiscrepancyKind.MISSING_AT_PROVIDER, "lost"),
        (DiscrepancyKind.REMOTE_ID_DIFFERS, "doubt"),
        (DiscrepancyKind.ACCEPTED_TWICE, "twice"),
    }
    by_kind = {d.kind: d for d in report.discrepancies if d.submission is None}
    assert by_kind[DiscrepancyKind.NOT_SYNCED].remote_id == stranger
    assert report.counts() == {
        "not_synced": 2,
        "missing_at_provider": 1,
        "remote_id_differs": 1,
        "accepted_twice": 1,
    }
    assert not report.clean


def test_a_row_synced_long_after_the_provider_accepted_it_is_found_by_a_wider_look(
    ledger: denpyo.Ledger, provider: FakeProvider
) -> None:
    """Verified after a crash, or marked by a person: its synced_at falls in a later
    step than the provider's record. Without a verify, the slack finds it."""
    http = HttpChannel(provider.send_url, timeout=2)
    ledger.channel("mail", lease=5, max_attempts=1, list_remote=lister(provider))(http.send)
    late = send(ledger, "late", "drop")
    [effect] = provider.accepted()
    # the provider's record is half an hour before the row was synced
    provider.forget(late.idempotency_key)
    provider.plant(late.idempotency_key, remote_id=effect["id"], at=effect["at"] - 1800)
    op.resolve_mark_synced(ledger, late.id, remote_id=effect["id"], note="seen there")
    now = ledger.store.now()
    since = now - timedelta(minutes=10)
    assert ledger.audit("mail", since=since, until=now + timedelta(minutes=1)).clean
    report = ledger.audit("mail", since=since, until=now + timedelta(minutes=1), slack=60)
    assert [d.kind for d in report.discrepancies] == [DiscrepancyKind.MISSING_AT_PROVIDER]


def test_list_remote_may_be_an_async_generator(
    ledger: denpyo.Ledger, provider: FakeProvider
) -> None:
    http = HttpChannel(provider.send_url, timeout=2)
    ledger.channel("mail", max_attempts=1, list_remote=async_lister(provider))(http.send)
    for i in range(4):
        send(ledger, f"order:{i}")
    provider.plant("stranger")
    report = ledger.audit("mail", **window(ledger))
    assert report.remote_records == 5 and report.ledger_synced == 4
    assert [d.kind for d in report.discrepancies] == [DiscrepancyKind.NOT_SYNCED]


def test_audit_refuses_what_it_cannot_do(ledger: denpyo.Ledger) -> None:
    ledger.channel("plain")(lambda sub: None)
    with pytest.raises(denpyo.ConfigurationError, match="list_remote"):
        ledger.audit("plain")
    ledger.channel("odd", list_remote=lambda since, until: [("key", "id")])(lambda sub: None)
    with pytest.raises(denpyo.ConfigurationError, match="RemoteRecord"):
        ledger.audit("odd")
    now = ledger.store.now()
    with pytest.raises(denpyo.InvalidInput, match="empty"):
        ledger.audit("odd", since=now, until=now)
    with pytest.raises(denpyo.UnknownChannel):
        ledger.audit("nope")
