"""`forget` on every database: a person's erasure request takes the payloads, and
every text quoting them, out of the ledger, live and archived; the slip stays
(status, attempts, remote id, history, counts), and a forgotten row is never sent
again."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient
from test_archive import Bucket, s3, s3_server  # noqa: F401 - the archive tests' S3 server

import denpyo
from denpyo.channels.http import HttpChannel
from denpyo.domain import rules
from denpyo.domain.actions import ActionKind, RowOutcome, Scope
from denpyo.domain.moves import Move
from denpyo.engine import operator as op
from denpyo.errors import InvalidInput
from denpyo.store.actions import NewAction
from denpyo.testing import FakeProvider
from denpyo.web import create_app

SQL = Callable[[str], list[tuple[Any, ...]]]
ANN = "ann@example.com"
PHONE = "+33 6 12 34 56 78"
TOKEN = "forget-test-token-0123"


@pytest.fixture
def shop(ledger: denpyo.Ledger, provider: FakeProvider) -> denpyo.Ledger:
    """`mail` sends to the fake provider (`_fault` in a payload makes it fail); `sms`
    fails every call with an error that quotes the payload's phone number."""
    http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url, timeout=2)
    ledger.channel("mail", verify=http.verify, lease=5, max_attempts=1, down_after=None)(http.send)

    def sms(sub: denpyo.Submission) -> str:
        raise denpyo.Transient(f"503: {sub.payload['phone']} unreachable")

    ledger.channel("sms", max_attempts=1, down_after=None)(sms)
    return ledger


def send(ledger: denpyo.Ledger, channel: str, key: str, payload: Any) -> denpyo.Submission:
    try:
        return ledger.submit(channel, key, payload)
    except denpyo.SubmissionError as exc:
        return exc.submission


def row(ledger: denpyo.Ledger, sid: int) -> denpyo.Submission:
    sub = ledger.store.get(sid)
    assert sub is not None
    return sub


def slip(ledger: denpyo.Ledger, sid: int) -> tuple[Any, ...]:
    """What forgetting keeps of a row."""
    sub = row(ledger, sid)
    return (
        sub.channel,
        sub.key,
        sub.idempotency_key,
        sub.status,
        sub.attempts,
        sub.remote_id,
        sub.error_kind,
        sub.resolution is None,
        sub.created_at,
        sub.synced_at,
        sub.supersedes,
        [(e.kind, e.from_status, e.to_status, e.actor) for e in ledger.events(sid)],
    )


def counts(ledger: denpyo.Ledger) -> tuple[Any, ...]:
    """The report and the running counts, which forgetting leaves as they were."""
    report = op.status(ledger)
    attention = (report.in_doubt, report.exhausted, report.needs_person, report.resolved)
    return ledger.report(by="day"), ledger.store.count_by_status(), attention


def stored(sql: SQL, sid: int) -> tuple[Any, Any, Any, Any]:
    """The row as the database holds it: payload (JSON null reads None or "null"),
    last error, resolution, and whether it is forgotten."""
    [(payload, error, resolution, forgotten)] = sql(
        f"SELECT payload, last_error, resolution, forgotten_at FROM denpyo_submissions "
        f"WHERE id = {sid}"
    )
    return payload, error, resolution, forgotten is not None


def everything(sql: SQL) -> str:
    """Every text of the history and the action log, for a search of a value."""
    texts = sql("SELECT detail FROM denpyo_events WHERE detail IS NOT NULL")
    texts += sql("SELECT note, decision_note, params, plan, target FROM denpyo_actions")
    texts += sql("SELECT reason FROM denpyo_action_rows WHERE reason IS NOT NULL")
    texts += sql("SELECT resolution FROM denpyo_submissions WHERE resolution IS NOT NULL")
    return json.dumps(texts, default=str, ensure_ascii=False)


def archived_rows(folder: Path) -> list[dict[str, Any]]:
    """Every row of an archive's table, read with pyarrow file by file."""
    return [
        row for file in sorted(folder.rglob("*.parquet")) for row in pq.read_table(file).to_pylist()
    ]


def test_a_forgotten_call_keeps_its_slip_and_loses_its_payload(
    shop: denpyo.Ledger, sql: SQL
) -> None:
    kept = send(shop, "mail", "order:1", {"to": ANN})
    text = send(shop, "sms", "text:1", {"phone": PHONE, "name": "Ann Example"})
    assert text.last_error and PHONE in text.last_error
    op.resolve_abandon(shop, text.id, note=f"Ann Example at {PHONE} wants no texts", by="bob")
    before, totals = slip(shop, text.id), counts(shop)

    done = shop.forget("sms:text:1", note="erasure request #881", by="alice")

    assert done.counts == {"live": 1, "archived": 0, "removed": 0} and not done.skipped
    after = slip(shop, text.id)
    assert after[:-1] == before[:-1], "the slip stays"
    failed = denpyo.Status.FAILED
    assert after[-1] == [*before[-1], ("forgotten", failed, failed, "operator:alice")]
    assert counts(shop) == totals, "forget never moves a status"
    payload, error, resolution, forgotten = stored(sql, text.id)
    assert payload in (None, "null") and error is None and forgotten
    assert resolution == "[forgotten]", "replaced whole: a person's note may quote anything"
    assert row(shop, text.id).payload is None
    details = [e.detail for e in shop.events(text.id)]
    assert details[2] == "[forgotten]", "the settle's error, replaced whole"
    assert details[-1] == "erasure request #881"
    assert PHONE not in everything(sql) and "Ann Example" not in everything(sql)
    [entry] = op.action_log(shop, kind="forget")
    assert (entry.person, entry.note, entry.total, entry.done) == ("alice", details[-1], 1, 1)
    assert entry.target == "sms:text:1"
    assert row(shop, kept.id).payload == {"to": ANN}, "another call keeps its payload"


def test_a_forgotten_key_is_never_sent_again(shop: denpyo.Ledger, provider: FakeProvider) -> None:
    synced = send(shop, "mail", "order:1", {"to": ANN})
    failed = send(shop, "mail", "order:2", {"to": ANN, "_fault": "fail"})
    assert failed.status is denpyo.Status.FAILED and failed.next_attempt_at is None
    shop.forget(where=f"to={ANN}", note="erasure request #882", by="alice")
    calls = provider.stats().requests

    again = shop.submit("mail", "order:1", {"to": "someone-else@example.com"})
    assert (again.id, again.status, again.payload) == (synced.id, denpyo.Status.SYNCED, None)
    with pytest.raises(denpyo.SubmissionFailed) as refused:
        shop.submit("mail", "order:2", {"to": ANN, "_fault": "fail"})
    assert refused.value.submission.forgotten_at is not None
    assert provider.stats().requests == calls, "nothing was sent"

    sub = row(shop, failed.id)
    answers = rules.allowed_actions(sub)
    assert [a.action for a in answers.offered] == [ActionKind.ABANDON]
    assert "its payload was forgotten on" in answers.retry.reason
    with pytest.raises(InvalidInput, match="its payload was forgotten on"):
        op.retry(shop, refs=[failed.id], note="again")
    with pytest.raises(InvalidInput, match="its payload was forgotten on"):
        op.resolve_resend(shop, failed.id, note="again", payload={"to": ANN})
    with pytest.raises(InvalidInput, match="its payload was forgotten on"):
        op.resolve_mark_synced(shop, failed.id, remote_id="r-1", note="found it")
    shop.work(until_idle=True)
    assert provider.stats().requests == calls
    assert row(shop, failed.id).next_attempt_at is None


def test_forget_by_a_field_finds_the_person_in_every_channel(shop: denpyo.Ledger, sql: SQL) -> None:
    mine = [
        send(shop, "mail", "order:1", {"to": ANN, "amount": "12.50 EUR"}),
        send(shop, "mail", "order:2", {"to": ANN}),
        send(shop, "sms", "text:1", {"to": ANN, "phone": PHONE}),
    ]
    nested = send(shop, "mail", "order:3", {"customer": {"email": ANN, "name": "Ann Example"}})
    others = [
        send(shop, "mail", "order:4", {"to": "bob@example.com"}),
        send(shop, "mail", "order:5", {"to": ANN.upper()}),  # byte for byte
        send(shop, "mail", "order:6", {"to": [ANN]}),  # not a string there
        send(shop, "mail", "order:7", {"cc": ANN}),
    ]
    op.resolve_abandon(shop, mine[2].id, note="no texts", by="bob")
    totals = counts(shop)

    dry = shop.forget(where=f"to={ANN}", note="erasure request #883", dry_run=True)
    assert dry.dry_run and dry.action is None
    assert dry.counts == {"live": 3, "archived": 0, "removed": 0}
    assert [stored(sql, s.id)[3] for s in mine] == [False] * 3
    assert not op.action_log(shop, kind="forget")

    done = shop.forget(where=f"to={ANN}", note=f"erasure request #883 from {ANN}", by="alice")
    assert sorted(s.id for s in done.live) == sorted(s.id for s in mine)
    assert all(stored(sql, s.id)[3] for s in mine)
    assert not any(stored(sql, s.id)[3] for s in [nested, *others])
    deep = shop.forget(where=f"customer.email={ANN}", channel="mail", note="#883", by="alice")
    assert [s.id for s in deep.live] == [nested.id]
    assert counts(shop) == totals
    assert ANN not in everything(sql) and PHONE not in everything(sql)
    [second, first] = op.action_log(shop, kind="forget")
    assert first.note == "erasure request #883 from [forgotten]"
    assert first.params["where"] == "to" and second.params["where"] == "customer.email"
    assert [r.submission_id for r in op.action_detail(shop, first.id)[1]] == sorted(
        s.id for s in mine
    )
    with pytest.raises(InvalidInput, match="nothing to forget: no payload has that value"):
        shop.forget(where=f"to={ANN}", note="again")


def test_a_call_is_forgotten_with_its_resends(shop: denpyo.Ledger, sql: SQL) -> None:
    first = send(shop, "sms", "text:1", {"phone": PHONE})
    resent = op.resolve_resend(
        shop, first.id, note="a digit was wrong", payload={"phone": "+33 6 99 99 99 99"}
    ).created
    assert resent is not None
    with pytest.raises(InvalidInput) as refused:
        shop.forget("sms:text:1", note="erasure request")
    assert f"#{resent.id} (sms:text:1~resend1) is still open" in str(refused.value)
    assert f"abandon it first: denpyo resolve {resent.id} --abandon" in str(refused.value)
    assert not stored(sql, first.id)[3] and not op.action_log(shop, kind="forget")

    op.resolve_abandon(shop, resent.id, note="customer left", by="bob")
    done = shop.forget("sms:text:1~resend1", note="erasure request", by="alice")
    assert sorted(s.id for s in done.live) == [first.id, resent.id]
    assert "+33 6 99 99 99 99" not in everything(sql) and PHONE not in everything(sql)
    [resend] = op.action_log(shop, kind="resend")
    assert resend.params["payload"] == "[forgotten]"


def test_an_open_row_refuses_the_whole_forget(shop: denpyo.Ledger, sql: SQL) -> None:
    settled = send(shop, "mail", "order:1", {"to": ANN})
    waiting = shop.enqueue("mail", "order:2", {"to": ANN})
    retrying = send(shop, "mail", "order:3", {"to": ANN, "_fault": "fail"})
    op.retry(shop, refs=[retrying.id], note="again")  # due again: open
    with pytest.raises(InvalidInput) as refused:
        shop.forget(where=f"to={ANN}", note="erasure request")
    message = str(refused.value)
    assert message.startswith("nothing was forgotten: ")
    assert f"#{waiting.id} (mail:order:2) is still open (requesting" in message
    assert f"#{retrying.id} (mail:order:3) is still open (failed, due" in message
    assert [stored(sql, s.id)[3] for s in (settled, waiting, retrying)] == [False] * 3
    assert row(shop, settled.id).payload == {"to": ANN}
    assert not op.action_log(shop, kind="forget")


@pytest.mark.parametrize(
    ("ref", "options", "words"),
    [
        ("mail:order:1", {"note": "  "}, "a note (--note) is required"),
        ("mail:order:1", {"note": "x", "where": "to=a"}, "CHANNEL:KEY) or the person"),
        (None, {"note": "x"}, "CHANNEL:KEY) or the person"),
        (None, {"note": "x", "where": "to"}, "--where takes FIELD=VALUE"),
        (None, {"note": "x", "where": "to..x=a"}, "is not a field"),
        (None, {"note": "x", "where": "to'); DROP TABLE x; --=a"}, "is not a field"),
        (None, {"note": "x", "where": "to="}, "give the value"),
        ("mail:order:9", {"note": "x"}, "nothing to forget: no submission 'mail:order:9'"),
        (None, {"note": "x", "where": "to=nobody@example.com"}, "nothing to forget"),
        ("mail:order:1", {"note": "x", "channel": "mail"}, "--channel goes with --where"),
        (None, {"note": "x", "where": "to=a", "channel": "no such!"}, "channel name"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    shop: denpyo.Ledger, sql: SQL, ref: str | None, options: dict[str, Any], words: str
) -> None:
    sub = send(shop, "mail", "order:1", {"to": ANN})
    with pytest.raises(InvalidInput, match=words.replace("(", r"\(").replace(")", r"\)")):
        shop.forget(ref, **options)
    assert not stored(sql, sub.id)[3] and not op.action_log(shop, kind="forget")


def test_archived_and_pruned_rows_are_forgotten_too(
    shop: denpyo.Ledger, sql: SQL, tmp_path: Path
) -> None:
    archived = send(shop, "sms", "text:1", {"phone": PHONE, "to": ANN})
    also = send(shop, "mail", "order:1", {"to": ANN})
    op.resolve_abandon(shop, archived.id, note=f"{PHONE} is gone", by="bob")
    target = tmp_path / "archive"
    shop.archive(str(target), older_than=0)
    pruned = send(shop, "mail", "order:2", {"to": ANN})
    shop.prune(older_than=0)
    totals = counts(shop)

    with pytest.raises(InvalidInput, match="a pruned row's payload is gone already"):
        shop.forget(where="to=nobody@example.com", note="erasure request")
    by_key = shop.forget("sms:text:1", note="erasure request #884", by="alice")
    assert by_key.counts == {"live": 0, "archived": 1, "removed": 0} and by_key.files == 2
    rows = archived_rows(target / "submissions")
    [copy] = [r for r in rows if r["id"] == archived.id]
    assert (copy["payload"], copy["last_error"]) == ("null", None)
    assert copy["resolution"] == "[forgotten]"
    events = archived_rows(target / "events")
    assert PHONE not in json.dumps([e["detail"] for e in events])
    assert [json.loads(r["payload"]) for r in rows if r["id"] == also.id] == [{"to": ANN}]
    found = op.history(shop, "sms:text:1")
    assert found.submission.forgotten_at is not None and found.forgotten is not None
    assert found.forgotten.describe().endswith(" by alice: erasure request #884")
    assert sql(f"SELECT forgotten_at FROM denpyo_keys WHERE submission_id = {archived.id}")[0][0]

    by_field = shop.forget(where=f"to={ANN}", note="erasure request #885", by="alice")
    assert by_field.counts == {"live": 0, "archived": 1, "removed": 0}
    rows = archived_rows(target / "submissions")
    assert ANN not in json.dumps(rows, default=str)
    assert shop.forget("mail:order:2", note="#885", by="alice").counts["removed"] == 1
    assert sql(f"SELECT forgotten_at FROM denpyo_keys WHERE submission_id = {pruned.id}")[0][0]
    assert counts(shop) == totals
    with pytest.raises(InvalidInput, match="forgotten already"):
        shop.forget("mail:order:2", note="again")
    again = shop.submit("mail", "order:1", {"to": "x@example.com"})
    assert again.status is denpyo.Status.SYNCED and again.forgotten_at is not None
    with pytest.raises(InvalidInput, match="its payload was forgotten on"):
        op.resolve_resend(shop, "sms:text:1", note="again", payload={"phone": "1"})


def test_forget_replaces_every_text_about_the_row_whatever_its_spelling(
    ledger: denpyo.Ledger, sql: SQL, tmp_path: Path
) -> None:
    """A provider and a person quote the address in spellings no search knows (spaced
    out, with `[at]`, reversed): forget replaces their texts whole, in the history, the
    action log, the remembered keys and the archive."""
    to = "erin.pii@example.com"
    odd = ["E R I N . P I I", "erin [at] example [dot] com", to[::-1]]

    def mail(sub: denpyo.Submission) -> str:
        raise denpyo.Rejected(f"no mailbox {odd[0]} / {odd[1]}")

    ledger.channel("mail")(mail)
    folder = tmp_path / "archive"
    for n in (1, 2):
        sub = send(ledger, "mail", f"order:{n}", {"to": to})
        op.resolve_abandon(ledger, sub.id, note=f"wrote to {odd[2]}, no answer", by="bob")
        if n == 1:
            ledger.archive(str(folder), older_than=0)  # the first archived, the second live
    texts = everything(sql) + json.dumps(archived_rows(folder), default=str)
    assert all(value in texts for value in odd)

    for call in ("mail:order:1", "mail:order:2"):
        ledger.forget(call, note="erasure request #887", by="alice")

    texts = everything(sql) + json.dumps(sql("SELECT * FROM denpyo_keys"), default=str)
    texts += json.dumps(archived_rows(folder), default=str, ensure_ascii=False)
    for value in odd:
        assert value not in texts, value
    assert "[forgotten]" in texts and "erasure request #887" in texts


def test_an_action_that_raced_a_forget_rolls_back(ledger: denpyo.Ledger) -> None:
    """A person's retry decided on the row as it was before a forget, and applied
    after it, sends nothing: its batch rolls back, the row is skipped."""
    ledger.channel("sms", max_attempts=1)(lambda sub: (_ for _ in ()).throw(denpyo.Transient("x")))
    before = send(ledger, "sms", "text:1", {"phone": PHONE})
    entry = NewAction(ActionKind.RETRY, Scope.ROWS, "race", "operator:bob", "again")
    action = ledger.store.add_action(entry, ids=[before.id], holder="h", lease=60)
    ledger.forget("sms:text:1", note="erasure request", by="alice")
    stale = Move.retry(before, "operator:bob", "again")
    plan = [(before.id, stale, None)]
    results = ledger.store.carry_out(action.id, holder="h", lease=60, plan=plan)
    assert results == [(before.id, RowOutcome.SKIPPED, "moved meanwhile: look again")]
    assert row(ledger, before.id).next_attempt_at is None


def test_the_dashboard_says_who_forgot_and_offers_no_send(shop: denpyo.Ledger) -> None:
    failed = send(shop, "mail", "order:1", {"to": ANN, "_fault": "fail"})
    shop.forget("mail:order:1", note="erasure request #886", by="alice")
    client = TestClient(create_app(shop, token=TOKEN), base_url="http://127.0.0.1:8470")
    client.headers.update({"authorization": f"Bearer {TOKEN}", "x-denpyo-by": "script"})
    page = client.get(f"/submissions/{failed.id}")
    assert page.status_code == 200, page.text
    assert "by alice: erasure request #886" in page.text and "payload forgotten on" in page.text
    assert ANN not in page.text
    for action in ("retry", "resend", "mark_synced"):
        assert f'/submissions/{failed.id}/{action}"' not in page.text
    assert f'/submissions/{failed.id}/abandon"' in page.text


def test_an_archive_on_s3_is_rewritten(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The archive's S3 target (moto's server, the archive tests' fixture): the object
    that held the payload is put again without it, the others stay as they were."""
    bucket: Bucket = request.getfixturevalue("s3")
    with denpyo.Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.migrate()
        ledger.channel("email")(lambda sub: f"msg-{sub.key}")
        ledger.submit("email", "order:1", {"to": ANN})
        ledger.submit("email", "order:2", {"to": "bob@example.com"})
        ledger.archive(f"s3://{bucket.name}/ledger", older_than=0)

        done = ledger.forget(where=f"to={ANN}", note="erasure request #887", by="alice")

        assert (done.counts["archived"], done.files) == (1, 2)
        parquet = [key for key in bucket.objects() if key.endswith(".parquet")]
        bodies = [
            bucket.client.get_object(Bucket=bucket.name, Key=key)["Body"].read() for key in parquet
        ]
        tables = [pq.read_table(pa.BufferReader(body)).to_pylist() for body in bodies]
        text = json.dumps(tables, default=str)
        assert ANN not in text and "bob@example.com" in text
        assert op.history(ledger, "email:order:1").forgotten is not None


def test_an_encrypted_payload_is_matched_once_opened_and_forgotten_without_its_key(
    db_url: str, sql: SQL, tmp_path: Path
) -> None:
    """The database cannot look inside a sealed payload, nor a reader inside an archive
    of sealed payloads: their rows are read (opened with the ledger's key) and matched
    one by one; forgetting replaces the ciphertext, and needs no key."""
    from denpyo.store.sealing import new_payload_key

    with denpyo.Ledger(db_url, payload_key=new_payload_key()) as ledger:
        ledger.channel("email")(lambda sub: "r-1")
        archived = ledger.submit("email", "order:0", {"customer": {"email": ANN}})
        ledger.archive(str(tmp_path / "archive"), older_than=0)
        ann = ledger.submit("email", "order:1", {"customer": {"email": ANN}})
        bob = ledger.submit("email", "order:2", {"customer": {"email": "bob@example.com"}})
        assert ANN not in json.dumps(sql("SELECT payload FROM denpyo_submissions"), default=str)

        done = ledger.forget(where=f"customer.email={ANN}", note="erasure request #888")

        assert ([sub.id for sub in done.live], done.archived) == ([ann.id], [archived.id])
        assert stored(sql, ann.id)[0] in (None, "null") and stored(sql, ann.id)[3]
        assert row(ledger, bob.id).payload == {"customer": {"email": "bob@example.com"}}
        [copy] = archived_rows(tmp_path / "archive" / "submissions")
        assert (copy["id"], copy["payload"]) == (archived.id, "null")
