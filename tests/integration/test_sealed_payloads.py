"""Payloads encrypted at rest, on every database: the table holds no payload in clear,
the provider gets it whole, a ciphertext is bound to its row, a row whose key is
missing is read but never sent (one alert), and a key rotation under a running worker
sends every row once and leaves every payload on the new key, resuming where it was
stopped."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import denpyo
from denpyo import SealedPayload, Status
from denpyo.channels.http import HttpChannel
from denpyo.cli import main as cli
from denpyo.domain.sealed import DOES_NOT_OPEN, NOT_AVAILABLE, SEALED, UNREADABLE_RETRY_IN
from denpyo.engine import operator as op
from denpyo.store.sealing import key_id
from denpyo.testing import FakeProvider
from waiting import wait_until

KEY_A, KEY_B, KEY_C = (denpyo.new_payload_key() for _ in range(3))
SQL = Callable[[str], list[tuple[Any, ...]]]
DUE_NOW = {
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 seconds')",
    "postgresql": "now() - interval '1 second'",
    "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
}


def kid(key: str) -> str:
    import base64

    return key_id(base64.urlsafe_b64decode(key))


def stored(sql: SQL) -> dict[int, Any]:
    """The payload column as a user's own SQL reads it, by id (parsed JSON)."""
    rows = sql("SELECT id, payload FROM denpyo_submissions ORDER BY id")
    return {int(i): json.loads(p) if isinstance(p, str | bytes) else p for i, p in rows}


def kid_of(value: Any) -> str | None:
    """The key id of a stored payload, None for one in clear."""
    if isinstance(value, dict) and list(value) == [SEALED]:
        scheme, found, _ = value[SEALED].split(".")
        assert scheme == "v1"
        return str(found)
    return None


@pytest.fixture(autouse=True)
def no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DENPYO_PAYLOAD_KEYS", raising=False)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """A provider that counts every call, a second call of a key included."""
    with FakeProvider(honour_idempotency=False) as fake:
        yield fake


def opened(db_url: str, keys: Any, provider: FakeProvider, **options: Any) -> denpyo.Ledger:
    """A ledger with these keys and the channel `email` to the fake provider."""
    ledger = denpyo.Ledger(db_url, payload_key=keys, **options)
    http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url)
    ledger.channel("email", verify=http.verify, lease=30)(http.send)
    return ledger


def test_the_table_holds_no_payload_in_clear_and_the_provider_gets_it_whole(
    db_url: str, sql: SQL, provider: FakeProvider
) -> None:
    with opened(db_url, KEY_A, provider) as ledger:
        inline = ledger.submit("email", "inline", {"to": "ada@example.com", "amount": 12.5})
        assert inline.status is Status.SYNCED and inline.payload["to"] == "ada@example.com"
        ledger.enqueue("email", "queued", {"to": "bob@example.com", "phone": "+81 3 1234"})
        ledger.enqueue_many("email", [(f"many{n}", {"to": f"c{n}@example.com"}) for n in range(3)])
        assert ledger.work(until_idle=True).outcomes == {"synced": 4}
        again = ledger.submit("email", "inline", {"amount": 12.5, "to": "ada@example.com"})
        assert again.id == inline.id  # the same call, decrypted and compared: no KeyReused
        assert ledger.get("email", "queued").payload == {  # type: ignore[union-attr]
            "to": "bob@example.com",
            "phone": "+81 3 1234",
        }
    table = stored(sql)
    assert len(table) == 5 and {kid_of(value) for value in table.values()} == {kid(KEY_A)}
    text = json.dumps(table)
    assert "example.com" not in text and "1234" not in text and "12.5" not in text
    # The rest of the row stays in clear: the docs' queries work on it.
    assert sql("SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'") == [(5,)]
    sent = {effect["payload"]["to"] for effect in provider.accepted()}
    assert sent == {"ada@example.com", "bob@example.com", *(f"c{n}@example.com" for n in range(3))}
    assert set(provider.accepted_keys().values()) == {1}


def test_a_ciphertext_copied_to_another_row_does_not_open_there(
    db_url: str, sql: SQL, provider: FakeProvider
) -> None:
    alerts: list[denpyo.Alert] = []
    with opened(db_url, KEY_A, provider, on_alert=alerts.append) as ledger:
        first = ledger.enqueue("email", "first", {"to": "ada@example.com"})
        second = ledger.enqueue("email", "second", {"to": "eve@example.com"})
        [(text,)] = sql(f"SELECT payload FROM denpyo_submissions WHERE id = {first.id}")
        value = text if isinstance(text, str) else json.dumps(text)
        sql(f"UPDATE denpyo_submissions SET payload = '{value}' WHERE id = {second.id}")
        moved = ledger.get_by_id(second.id)
        assert moved is not None and isinstance(moved.payload, SealedPayload)
        assert (moved.payload.kid, moved.payload.reason) == (kid(KEY_A), DOES_NOT_OPEN)
        assert ledger.get_by_id(first.id).payload == {"to": "ada@example.com"}  # type: ignore[union-attr]
        ledger.work(until_idle=True)
    assert [effect["payload"] for effect in provider.accepted()] == [{"to": "ada@example.com"}]
    assert [alert.reason for alert in alerts] == ["payload_unreadable"]


def test_a_row_whose_key_is_missing_reads_as_a_slip_and_is_never_sent(
    db_url: str, backend: str, sql: SQL, provider: FakeProvider
) -> None:
    with opened(db_url, KEY_A, provider) as writer:
        sub = writer.enqueue("email", "order:1", {"to": "ada@example.com"})
    alerts: list[denpyo.Alert] = []
    with opened(db_url, KEY_B, provider, on_alert=alerts.append) as ledger:
        read = ledger.get("email", "order:1")
        assert read is not None and (read.status, read.attempts) == (Status.REQUESTING, 0)
        assert isinstance(read.payload, SealedPayload) and read.payload.reason == NOT_AVAILABLE
        assert str(read.payload) == f"[encrypted with key {kid(KEY_A)}: not available]"
        assert json.loads(json.dumps(op.submission_json(read)))["payload"] == str(read.payload)

        report = ledger.work(until_idle=True)
        assert (report.attempted, report.released, dict(report.outcomes)) == (1, 1, {})
        assert provider.stats().requests == 0
        [alert] = alerts
        assert alert.reason == "payload_unreadable" and alert.submission is not None
        assert f"key {kid(KEY_A)}" in alert.message and alert.submission.id == sub.id
        after = ledger.get_by_id(sub.id)
        assert after is not None and (after.status, after.attempts) == (Status.REQUESTING, 0)
        assert after.locked_by is None and after.last_error is not None
        assert [event.kind for event in ledger.events(sub.id)] == ["created", "attempt", "released"]
        assert after.next_attempt_at is not None
        due_in = (after.next_attempt_at - ledger.store.now()).total_seconds()
        assert UNREADABLE_RETRY_IN - 60 < due_in <= UNREADABLE_RETRY_IN  # minutes, not a loop

        sql(f"UPDATE denpyo_submissions SET next_attempt_at = {DUE_NOW[backend]}")
        assert ledger.work(until_idle=True).released == 1
        assert len(alerts) == 1 and provider.stats().requests == 0  # one alert per row
        again = ledger.get_by_id(sub.id)
        assert again is not None and again.next_attempt_at is not None
        due_in = (again.next_attempt_at - ledger.store.now()).total_seconds()
        assert 2 * UNREADABLE_RETRY_IN - 60 < due_in <= 2 * UNREADABLE_RETRY_IN  # it doubles

        with pytest.raises(denpyo.ConfigurationError, match=f"key {kid(KEY_A)}"):
            ledger.submit("email", "order:1", {"to": "ada@example.com"})
        with pytest.raises(denpyo.InvalidInput, match="cannot send this payload again"):
            op.resolve_resend(ledger, sub.id, note="as it was", force_in_doubt=True)

    with opened(db_url, [KEY_B], provider) as ledger:  # a worker without the key
        assert ledger.work(until_idle=True).attempted == 0  # its next look is 20 min away
    with opened(db_url, [KEY_B, KEY_A], provider) as ledger:  # the key is back:
        assert ledger.work(until_idle=True).outcomes == {"synced": 1}  # sent at once
        synced = ledger.get_by_id(sub.id)
        assert synced is not None and synced.status is Status.SYNCED
    assert [effect["payload"] for effect in provider.accepted()] == [{"to": "ada@example.com"}]


def test_rows_in_clear_stay_readable_and_rotation_encrypts_them(
    db_url: str, sql: SQL, provider: FakeProvider
) -> None:
    """Turning encryption on: the old rows read as before; `rotate_payload_key`
    encrypts them, skips forgotten ones, and lists the ones no key opens."""
    with opened(db_url, None, provider) as plain:
        plain.enqueue_many("email", [(f"old{n}", {"n": n}) for n in range(4)])
        forgotten = plain.get("email", "old3")
    with opened(db_url, KEY_C, provider) as other:
        lost = other.enqueue("email", "lost", {"n": "c"})
    assert forgotten is not None
    sql(
        "UPDATE denpyo_submissions SET payload = 'null', forgotten_at = updated_at "
        f"WHERE id = {forgotten.id}"
    )
    with opened(db_url, KEY_A, provider) as ledger:
        assert ledger.get("email", "old0").payload == {"n": 0}  # type: ignore[union-attr]
        ledger.enqueue("email", "new", {"n": "a"})
        done = ledger.rotate_payload_key(batch_size=2)
        assert (done.reencrypted, done.from_clear, done.current) == (3, 3, 1)
        assert done.unreadable_count == 1 and not done.complete
        assert [(row.id, row.kid) for row in done.unreadable] == [(lost.id, kid(KEY_C))]
        table = stored(sql)
        assert {kid_of(table[sub.id]) for sub in _rows(ledger, "old0", "old1", "old2", "new")} == {
            kid(KEY_A)
        }
        assert kid_of(table[lost.id]) == kid(KEY_C) and None in table.values()  # untouched
        assert ledger.get("email", "old2").payload == {"n": 2}  # type: ignore[union-attr]


def _rows(ledger: denpyo.Ledger, *keys: str) -> list[denpyo.Submission]:
    found = [ledger.get("email", key) for key in keys]
    assert all(sub is not None for sub in found)
    return [sub for sub in found if sub is not None]


def wait_for(done: Callable[[], bool]) -> None:
    wait_until(done, "the provider's requests", every=0.002)


class Stop(Exception):
    """Kills a rotation after some batches, as a killed process would stop it."""


def test_a_rotation_stopped_half_way_goes_on_where_it_was(
    db_url: str, sql: SQL, provider: FakeProvider
) -> None:
    with opened(db_url, KEY_A, provider) as ledger:
        ledger.enqueue_many("email", [(f"k{n}", {"n": n}) for n in range(50)])

    def stop_after_two(report: denpyo.KeyRotation) -> None:
        if report.batches == 2:
            raise Stop

    with opened(db_url, [KEY_B, KEY_A], provider) as ledger:
        with pytest.raises(Stop):
            ledger.rotate_payload_key(batch_size=10, progress=stop_after_two)
        kids = [kid_of(value) for value in stored(sql).values()]
        assert kids == [kid(KEY_B)] * 20 + [kid(KEY_A)] * 30
        done = ledger.rotate_payload_key(batch_size=10)
        assert (done.reencrypted, done.current, done.batches, done.complete) == (30, 20, 5, True)
        assert {kid_of(value) for value in stored(sql).values()} == {kid(KEY_B)}
    with opened(db_url, KEY_B, provider) as ledger:  # key A can go now
        assert ledger.work(until_idle=True).outcomes == {"synced": 50}
    assert sorted(effect["payload"]["n"] for effect in provider.accepted()) == list(range(50))


def test_a_rotation_under_a_running_worker_sends_every_row_once(
    db_url: str, sql: SQL, tmp_path: Path
) -> None:
    rows = 300
    with FakeProvider(honour_idempotency=False, latency=0.003) as provider:
        with opened(db_url, KEY_A, provider) as ledger:
            ledger.enqueue_many("email", [(f"k{n}", {"n": n}) for n in range(rows)])
        errors: list[BaseException] = []
        worker = opened(db_url, [KEY_B, KEY_A], provider)

        def work() -> None:
            try:
                worker.work(until_idle=True, concurrency=4)
            except BaseException as exc:  # the test fails on it below
                errors.append(exc)

        seen: list[int] = []

        def interleaved(report: denpyo.KeyRotation) -> None:
            """After each batch, let the worker send some more rows first."""
            seen.append(provider.stats().requests)
            wait_for(lambda: provider.stats().requests > seen[-1] or not thread.is_alive())

        thread = threading.Thread(target=work)
        thread.start()
        wait_for(lambda: provider.stats().requests >= 10)
        with opened(db_url, [KEY_B, KEY_A], provider) as rotation:
            done = rotation.rotate_payload_key(batch_size=20, progress=interleaved)
        thread.join()
        assert 10 <= seen[0] < rows  # the worker was sending while the keys changed
        assert not errors
        assert done.complete and done.reencrypted + done.current == rows
        assert worker.work(until_idle=True).attempted == 0
        worker.close()
        accepted = provider.accepted_keys()
        payloads = sorted(effect["payload"]["n"] for effect in provider.accepted())
    assert len(accepted) == rows and set(accepted.values()) == {1}  # none lost, none doubled
    assert payloads == list(range(rows))
    assert sql("SELECT status, COUNT(*) FROM denpyo_submissions GROUP BY status") == [
        ("synced", rows)
    ]
    assert {kid_of(value) for value in stored(sql).values()} == {kid(KEY_B)}


def test_archived_rows_keep_their_payload_encrypted_and_open_with_the_keys(
    db_url: str, tmp_path: Path, provider: FakeProvider
) -> None:
    import pyarrow.parquet as pq

    from denpyo.archive import Archive

    with opened(db_url, KEY_A, provider) as ledger:

        def refuse(sub: denpyo.Submission) -> str:
            raise denpyo.Rejected("no such mailbox")

        ledger.channel("refusing")(refuse)
        with pytest.raises(denpyo.SubmissionRejected) as rejected:
            ledger.submit("refusing", "old", {"to": "ada@example.com"})
        sub = rejected.value.submission
        op.resolve_abandon(ledger, sub.id, note="the customer left")
        ledger.archive(tmp_path / "archive", older_than=0)
        [file] = (tmp_path / "archive" / "submissions").rglob("*.parquet")
        [text] = pq.read_table(file).column("payload").to_pylist()
        assert "ada@example.com" not in text and kid_of(json.loads(text)) == kid(KEY_A)
        removed = ledger.get_by_id(sub.id)
        assert removed is not None and removed.archived_to is not None
        archive = Archive(removed.archived_to)
        assert archive.payload_of(removed, ledger.store.sealing) == {"to": "ada@example.com"}
        assert isinstance(archive.payload_of(removed), SealedPayload)  # no key given
        resent = op.resolve_resend(ledger, sub.id, note="the customer is back").created
        assert resent is not None and resent.payload == {"to": "ada@example.com"}
        assert resent.channel == "refusing" and resent.removed_at is None


def test_the_dashboard_shows_a_placeholder_and_refuses_to_resend_it(
    tmp_path: Path, provider: FakeProvider
) -> None:
    from starlette.testclient import TestClient

    from denpyo.web import create_app

    url = f"sqlite:///{tmp_path}/web.db"
    with opened(url, KEY_A, provider) as writer:
        writer.migrate()

        def refuse(sub: denpyo.Submission) -> str:
            raise denpyo.Rejected("no such mailbox")

        writer.channel("refusing")(refuse)
        with pytest.raises(denpyo.SubmissionRejected) as rejected:
            writer.submit("refusing", "order:1", {"to": "ada@example.com"})
    sid = rejected.value.submission.id
    with opened(url, KEY_B, provider) as ledger:
        token = "sealed-payloads-test-token"
        web = TestClient(create_app(ledger, token=token), base_url="http://127.0.0.1:8470")
        web.headers.update({"authorization": f"Bearer {token}", "x-denpyo-by": "script"})
        page = web.get(f"/submissions/{sid}").text
        assert f"[encrypted with key {kid(KEY_A)}: not available]" in page
        assert "ada@example.com" not in page
        assert "Resend as a new submission" not in page and "Abandon" in page
        shown = json.dumps(f"[encrypted with key {kid(KEY_A)}: not available]")
        for edited in ("", shown):  # left as it is, or as the form shows it
            answer = web.post(
                f"/submissions/{sid}/resend",
                data={"note": "again", "payload": edited, "confirm": "yes"},
                follow_redirects=False,
            )
            assert answer.status_code == 409, answer.text
            assert "cannot send this payload again" in answer.text
            assert f"key {kid(KEY_A)}" in answer.text
        assert ledger.store.find_superseding(sid) is None  # nothing written
    shown_by_cli = CliRunner().invoke(
        cli, ["--db", url, "show", str(sid)], env={"DENPYO_PAYLOAD_KEYS": KEY_B}
    )
    assert shown_by_cli.exit_code == 0, shown_by_cli.output
    assert "resolve --abandon" in shown_by_cli.output
    assert "--resend" not in shown_by_cli.output  # the rule refuses it, so show offers none


def test_a_providers_error_is_stored_without_the_payloads_values_it_quoted(
    db_url: str, sql: SQL
) -> None:
    """The error is kept in clear (`list --error-text` searches it): the values of the
    encrypted payload it quotes are replaced, in the row, its history, and the
    channel's state; without keys, the error is stored as the provider wrote it."""
    payload = {"to": "ada@example.com", "address": {"street": "1 Rue Lovelace"}}
    for keys, shown in ((KEY_A, "[encrypted]"), (None, "ada@example.com")):
        told: list[denpyo.Alert] = []
        channel = "sealed" if keys else "clear"  # each its own state: one goes down
        with denpyo.Ledger(db_url, payload_key=keys, on_alert=told.append) as ledger:

            @ledger.channel(channel, max_attempts=1, down_after=1)
            def send(sub: denpyo.Submission) -> str:
                to, street = sub.payload["to"], sub.payload["address"]["street"]
                raise denpyo.Transient(f'503 "{to}" at "{street}" is not reachable')

            ledger.enqueue(channel, "letter:1", payload)
            ledger.work(until_idle=True)
            row = ledger.get(channel, "letter:1")
            assert row is not None and row.status is Status.FAILED
            street = shown if keys else "1 Rue Lovelace"
            assert row.last_error == f'Transient: 503 "{shown}" at "{street}" is not reachable'
            if keys is None:
                continue
            texts = json.dumps(sql("SELECT last_error FROM denpyo_submissions"))
            texts += json.dumps(sql("SELECT detail FROM denpyo_events"))
            texts += json.dumps(sql("SELECT down_note FROM denpyo_channels"))
            texts += json.dumps([alert.message for alert in told])
            assert "ada@example.com" not in texts and "Lovelace" not in texts
            assert "[encrypted]" in texts
