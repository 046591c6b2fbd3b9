"""No payload value in clear, on every database: with payload keys set, every operation
that carries a payload or may quote one (submit, a failure, a rejection, a row in
doubt, a resend with a corrected payload by the library and by the command line, a
bulk resend, a two-person approval, notes, alerts, an archive, the log, the spans,
the metrics) leaves no value of any payload, in any spelling (as given, upper or
lower case, URL-encoded, JSON-escaped), in any table (listed from the database's
catalog), archive file, log line or span. And after `forget` of those calls (with
keys and without), no table nor archive file holds one."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

import denpyo
from denpyo.channels.http import HttpChannel
from denpyo.cli import main
from denpyo.domain.actions import ActionKind, ActionRecord, Approval
from denpyo.domain.filters import Filter
from denpyo.engine import operator as op
from denpyo.engine import tracing
from denpyo.metrics import Metrics
from denpyo.store.sealing import KEYS_VARIABLE
from denpyo.testing import FakeProvider
from denpyo.web import create_app

SQL = Callable[[str], list[tuple[Any, ...]]]
KEY = denpyo.new_payload_key()
TOKEN = "no-clear-value-token-0123"
TABLES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table'",
    "postgresql": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
    "mysql": "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()",
}
DUE_NOW = {
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 seconds')",
    "postgresql": "now() - interval '1 second'",
    "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
}


def person(n: int, mode: str = "") -> dict[str, Any]:
    """A payload whose every value would be found: an e-mail address, a nested number
    as a string, a name with an accent and a space, a phone number. Random, so that
    nothing else in the ledger spells them by chance."""
    tag = secrets.token_hex(4)
    payload: dict[str, Any] = {
        "to": f"erin.{tag}{n}@pii.example",
        "nested": {"ssn": f"{secrets.randbelow(10**9):09d} {n}", "name": f"Zoë Ünal {tag}"},
        "phone": f"+44 7700 {secrets.randbelow(10**6):06d}",
    }
    if mode:
        payload["mode"] = mode
    return payload


def spellings(value: str) -> set[str]:
    """Every spelling looked for (compared in lower case: upper and lower too)."""
    forms = {value, json.dumps(value)[1:-1], quote(value, safe=""), quote_plus(value)}
    return {form.lower() for form in forms}


def values_of(payload: Any) -> Iterator[str]:
    if isinstance(payload, dict):
        for name, item in payload.items():
            if name != "mode":  # a switch of the test channel, not a person's data
                yield from values_of(item)
    elif isinstance(payload, str):
        yield payload


def send_sms(sub: denpyo.Submission) -> str:
    """A channel whose errors quote the payload in several spellings."""
    to, mode = sub.payload["to"], sub.payload.get("mode")
    ssn = sub.payload["nested"]["ssn"]
    if mode == "reject":
        raise denpyo.Rejected(f"invalid address {to.upper()} ({quote(to, safe='')})")
    if mode == "fail":
        raise denpyo.Transient(f"503 for {json.dumps(sub.payload)} / {quote_plus(ssn)}")
    if mode == "doubt":
        raise RuntimeError(f"timeout after sending to {to} ({sub.payload['phone'].lower()})")
    return f"r-{sub.key}"


def verify_sms(sub: denpyo.Submission) -> denpyo.Verdict:
    """A verify whose error quotes the payload."""
    raise RuntimeError(f"lookup of {quote(sub.payload['to'])} timed out")


@dataclass
class Seen:
    """What the scenario left outside the database: alerts, log lines, spans, metrics."""

    alerts: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.use(provider)
    yield spans
    tracing.use(None)
    provider.shutdown()


def span_texts(spans: Iterator[ReadableSpan] | tuple[ReadableSpan, ...]) -> list[str]:
    texts = []
    for span in spans:
        texts += [span.name, json.dumps(dict(span.attributes or {}), default=str)]
        texts.append(span.status.description or "")
        for event in span.events:
            texts += [event.name, json.dumps(dict(event.attributes or {}), default=str)]
    return texts


def dump(backend: str, sql: SQL) -> dict[str, str]:
    """Every table the database holds, listed from its catalog, as text."""

    def text(value: Any) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

    tables = sorted(str(name) for (name,) in sql(TABLES[backend]))
    assert "denpyo_submissions" in tables and "denpyo_actions" in tables
    return {
        table: json.dumps(sql(f"SELECT * FROM {table}"), default=text, ensure_ascii=False)
        for table in tables
    }


def archive_texts(folder: Path) -> dict[str, str]:
    files = sorted(folder.rglob("*.parquet"))
    return {
        str(path): json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False)
        for path in files
    }


def found(values: set[str], where: dict[str, str]) -> list[tuple[str, str, str]]:
    """Each (value, spelling, place) where a spelling of a value appears."""
    hits = []
    for place, text in where.items():
        lower = text.lower()
        hits += [(v, s, place) for v in sorted(values) for s in spellings(v) if s in lower]
    return hits


@dataclass
class Scenario:
    ledger: denpyo.Ledger
    payloads: list[dict[str, Any]]
    calls: list[str]
    archive: Path

    @property
    def values(self) -> set[str]:
        return {value for payload in self.payloads for value in values_of(payload)}


def run_everything(
    backend: str,
    db_url: str,
    sql: SQL,
    tmp_path: Path,
    provider: FakeProvider,
    seen: Seen,
    caplog: Any,
) -> Scenario:
    """Every operation that carries a payload or may quote one, on a ledger opened with
    the keys of the environment (none: payloads in clear)."""
    caplog.set_level(logging.DEBUG)
    ledger = denpyo.Ledger(db_url)
    http = HttpChannel(provider.send_url, lookup_url=provider.lookup_url, timeout=5)
    ledger.channel("mail", verify=http.verify, lease=30)(http.send)
    ledger.channel("sms", max_attempts=1, down_after=None, verify=verify_sms)(send_sms)
    ledger.on_alert(lambda alert: seen.alerts.append(str(alert)))
    metrics = Metrics(ledger, counts_ttl=0).attach()
    payloads: list[dict[str, Any]] = []
    calls: list[str] = []

    def submit(channel: str, key: str, payload: dict[str, Any]) -> denpyo.Submission:
        payloads.append(payload)
        calls.append(f"{channel}:{key}")
        try:
            return ledger.submit(channel, key, payload)
        except denpyo.SubmissionError as exc:
            return exc.submission

    mailed = submit("mail", "order:1", person(1))
    # The provider's webhook tells of a bounce quoting the address (an alert, a history
    # line, and the event kept in denpyo_provider_events).
    bounced = ledger.receive_provider_event(
        "sendgrid",
        "sg-bounce-1",
        "bounce",
        remote_id=mailed.remote_id,
        detail=f"550 5.1.1 <{mailed.payload['to']}>: mailbox unknown ({mailed.payload['phone']})",
    )
    assert bounced.submission is not None and bounced.submission.id == mailed.id
    payloads.append(person(2))
    calls.append("mail:order:2")
    ledger.enqueue("mail", "order:2", payloads[-1])
    rejected = submit("sms", "text:1", person(3, "reject"))
    rejected_cli = submit("sms", "text:2", person(4, "reject"))
    failed = [submit("sms", f"text:{n}", person(n, "fail")) for n in (5, 6)]
    doubt = submit("sms", "text:7", person(7, "doubt"))
    submit("sms", "text:8", person(8, "fail"))
    assert rejected.status is denpyo.Status.REJECTED and doubt.in_doubt
    sql(f"UPDATE denpyo_submissions SET next_attempt_at = {DUE_NOW[backend]} WHERE id = {doubt.id}")
    ledger.reconcile()  # the row in doubt: its verify fails too
    assert "lookup of" in str([e.detail for e in ledger.events(doubt.id)])
    assert all(sub.status is denpyo.Status.FAILED for sub in failed)

    # A person resends with a corrected payload: by the library, and by the command line.
    fixed = person(9)
    payloads.append(fixed)
    old = rejected.payload["to"]
    op.resolve_resend(
        ledger,
        rejected.id,
        payload=fixed,
        by="alice",
        note=f"wrong address {old.upper()}, now {fixed['to']} ({quote(fixed['to'])})",
    )
    fixed_cli = person(10)
    payloads.append(fixed_cli)
    note = f"typo in {rejected_cli.payload['to']}: now {fixed_cli['to'].upper()}"
    ran = CliRunner().invoke(
        main,
        [
            "--db",
            db_url,
            "resolve",
            str(rejected_cli.id),
            "--resend",
            "--by",
            "bob",
            "--payload",
            json.dumps(fixed_cli),
            "--note",
            note,
        ],
    )
    assert ran.exit_code == 0, ran.output
    # A bulk resend of the failed rows; an abandon whose note quotes the row.
    plan = op.plan_bulk(
        ledger,
        ActionKind.RESEND,
        Filter(channel="sms", statuses=(denpyo.Status.FAILED,), in_doubt=False, resolved=False),
        note="provider outage INC-7 over",
        by="carol",
        target="failed sms",
    )
    assert plan.acting == 3
    started = op.confirm_bulk(ledger, plan.action.id, by="carol")
    assert isinstance(started, ActionRecord)
    op.carry_out(ledger, started.id)  # (its resends fail again: their payloads are the rows' own)
    # A resend of a row in doubt waits for a second person, who approves it.
    fixed_doubt = person(11)
    payloads.append(fixed_doubt)
    asked = op.resolve_resend(
        ledger,
        doubt.id,
        payload=fixed_doubt,
        force_in_doubt=True,
        by="alice",
        approval=Approval(),
        note=f"{doubt.payload['phone']} never got it; send to {fixed_doubt['phone']}",
    )
    assert asked.requested is not None
    op.approve(
        ledger,
        asked.requested.action.id,
        by="dave",
        note=f"checked with {doubt.payload['to']}: {fixed_doubt['to']} is right",
    )
    ledger.work(until_idle=True)
    for sub, payload in ((rejected, fixed), (rejected_cli, fixed_cli), (doubt, fixed_doubt)):
        resent = op.find(ledger, f"sms:{sub.key}~resend1")  # sent as corrected
        assert (resent.payload, resent.status) == (payload, denpyo.Status.SYNCED)
    # What still needs a person is abandoned, with notes quoting the rows.
    for sub in op.list_submissions(ledger, Filter(needs_person=True)):
        op.resolve_abandon(
            ledger, sub.id, by="erin", note=f"gave up on {json.dumps(sub.payload)[:60]}"
        )
    assert not op.list_submissions(ledger, Filter(needs_person=True))
    # Everything settled is archived.
    folder = tmp_path / "archive"
    ledger.archive(str(folder), older_than=0)
    seen.texts.append(metrics.render().decode())
    seen.texts += [record.getMessage() for record in caplog.records]
    seen.texts += [str(record.exc_info) for record in caplog.records if record.exc_info]
    return Scenario(ledger, payloads, calls, folder)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEYS_VARIABLE, KEY)


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_VARIABLE, raising=False)


@pytest.mark.usefixtures("keys")
def test_with_keys_no_value_is_anywhere_in_clear(
    backend: str,
    db_url: str,
    sql: SQL,
    tmp_path: Path,
    provider: FakeProvider,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen = Seen()
    done = run_everything(backend, db_url, sql, tmp_path, provider, seen, caplog)
    with done.ledger:
        spans = exporter.get_finished_spans()
        assert any(e.name == "exception" for span in spans for e in span.events)
        places = dump(backend, sql) | archive_texts(done.archive)
        assert any("denpyo:sealed" in text for text in archive_texts(done.archive).values())
        places["alerts"] = "\n".join(seen.alerts)
        places["log and metrics"] = "\n".join(seen.texts)
        places["spans"] = "\n".join(span_texts(spans))
        assert seen.alerts and "[encrypted]" in places["alerts"]
        assert found(done.values, places) == []
        # The action log says a payload was corrected, not what it holds.
        resends = op.action_log(done.ledger, kind="resend", state="done")
        shown = [op.action_json(entry)["params"].get("payload") for entry in resends]
        assert shown.count("corrected (not shown)") == 3


@pytest.mark.parametrize("with_keys", [True, False], ids=["keys", "no keys"])
def test_after_forget_no_value_is_stored_anywhere(
    backend: str,
    db_url: str,
    sql: SQL,
    tmp_path: Path,
    provider: FakeProvider,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    with_keys: bool,
) -> None:
    if with_keys:
        monkeypatch.setenv(KEYS_VARIABLE, KEY)
    else:
        monkeypatch.delenv(KEYS_VARIABLE, raising=False)
    done = run_everything(backend, db_url, sql, tmp_path, provider, Seen(), caplog)
    with done.ledger:
        if not with_keys:  # in clear before: the search finds them
            assert found(done.values, dump(backend, sql))
        for call in done.calls:
            done.ledger.forget(call, note="erasure request #90", by="frank")
        places = dump(backend, sql) | archive_texts(done.archive)
        assert found(done.values, places) == []


@pytest.mark.usefixtures("keys")
def test_the_dashboards_resend_form_keeps_no_value_in_clear(
    backend: str, db_url: str, sql: SQL
) -> None:
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("sms", max_attempts=1, down_after=None)(send_sms)
        first = person(1, "reject")
        try:
            ledger.submit("sms", "text:1", first)
        except denpyo.SubmissionRejected as exc:
            rejected = exc.submission
        fixed = person(2)
        client = TestClient(create_app(ledger, token=TOKEN), base_url="http://127.0.0.1:8470")
        client.headers.update({"authorization": f"Bearer {TOKEN}", "x-denpyo-by": "alice"})
        sent = client.post(
            f"/submissions/{rejected.id}/resend",
            data={
                "payload": json.dumps(fixed, ensure_ascii=False),
                "note": f"{first['to']} bounced, now {quote(fixed['to'])}",
                "confirm": "yes",
            },
            follow_redirects=False,
        )
        assert sent.status_code == 303, sent.text
        assert op.find(ledger, "sms:text:1~resend1").payload == fixed
        values = set(values_of(first)) | set(values_of(fixed))
        assert found(values, dump(backend, sql)) == []
        [entry] = op.action_log(ledger, kind="resend")
        assert entry.note == "[encrypted] bounced, now [encrypted]"


@pytest.mark.usefixtures("keys")
def test_a_resend_of_an_archived_row_keeps_no_value_in_clear(
    backend: str, db_url: str, sql: SQL, tmp_path: Path
) -> None:
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("sms", max_attempts=1, down_after=None)(send_sms)
        first, fixed = person(1, "reject"), person(2)
        with pytest.raises(denpyo.SubmissionRejected):
            ledger.submit("sms", "text:1", first)
        ledger.archive(str(tmp_path / "archive"), older_than=0)
        done = op.resolve_resend(
            ledger,
            "sms:text:1",
            payload=fixed,
            by="alice",
            note=f"{first['to'].upper()} was archived; now {fixed['to']}",
        )
        assert done.created is not None and done.created.payload == fixed
        values = set(values_of(first)) | set(values_of(fixed))
        assert found(values, dump(backend, sql)) == []
        [entry] = op.action_log(ledger, kind="resend")
        assert entry.note == "[encrypted] was archived; now [encrypted]"
