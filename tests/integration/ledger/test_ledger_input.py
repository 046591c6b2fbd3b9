"""Bad input is refused before anything is written, by every entry; text no
database can store is the package's own error in a payload or a key, and is
escaped in an outcome, which is still recorded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from ledger_helpers import SQL, Script, fail, ok

import denpyo
from denpyo import ErrorKind, Status, Submission


@pytest.mark.parametrize(
    ("channel", "key", "payload", "error"),
    [
        ("nope", "k", {}, denpyo.UnknownChannel),
        ("c", "k", {"when": object()}, denpyo.PayloadNotJSON),
        ("c", "k", {"blob": "x" * (1024 * 1024)}, denpyo.PayloadTooLarge),
        ("c", "k" * 256, {}, denpyo.InvalidKey),
        ("c", "", {}, denpyo.InvalidKey),
    ],
)
def test_bad_input_writes_nothing(
    ledger: denpyo.Ledger, sql: SQL, channel: str, key: str, payload: Any, error: type[Exception]
) -> None:
    calls = Script(ok)
    ledger.channel("c")(calls)
    with pytest.raises(error):
        ledger.submit(channel, key, payload)
    with pytest.raises(error):
        ledger.enqueue(channel, key, payload)
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)] and calls.calls == []


def nested(depth: int) -> list[Any]:
    """Arrays `depth` levels deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("key", "payload", "ordering_key", "error"),
    [
        ("k", {"to": "\ud800"}, None, denpyo.PayloadNotJSON),
        ("k", {"\udfff": "a lone surrogate as a field name"}, None, denpyo.PayloadNotJSON),
        ("k", {"to": "a\x00b"}, None, denpyo.PayloadNotJSON),
        ("k", nested(100_000), None, denpyo.PayloadNotJSON),
        ("k", nested(32), None, denpyo.PayloadNotJSON),
        ("\ud800", {}, None, denpyo.InvalidKey),
        ("k", {}, "\udfff", denpyo.InvalidKey),
    ],
    ids=["surrogate", "surrogate-name", "nul", "deep-100000", "deep-32", "key", "ordering-key"],
)
def test_text_no_database_can_store_is_refused_by_every_entry_and_writes_nothing(
    ledger: denpyo.Ledger,
    sql: SQL,
    key: str,
    payload: Any,
    ordering_key: str | None,
    error: type[Exception],
) -> None:
    """Lone surrogates, NUL and nesting past what every database keeps are the
    package's own errors, never a driver's UnicodeEncodeError or a RecursionError."""
    calls = Script(ok)
    ledger.channel("c")(calls)
    entries: list[Callable[[], Any]] = [
        lambda: ledger.submit("c", key, payload, ordering_key=ordering_key),
        lambda: ledger.enqueue("c", key, payload, ordering_key=ordering_key),
        lambda: ledger.enqueue_many("c", [("first", {}), (key, payload, ordering_key)]),
        lambda: asyncio.run(ledger.asubmit("c", key, payload, ordering_key=ordering_key)),
        lambda: asyncio.run(ledger.aenqueue("c", key, payload, ordering_key=ordering_key)),
    ]
    for entry in entries:
        with pytest.raises(error):
            entry()
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)] and calls.calls == []


def test_payloads_up_to_the_nesting_limit_are_kept_and_read_back(ledger: denpyo.Ledger) -> None:
    ledger.channel("c")(ok)
    deepest = nested(31)
    text = {"escaped": "\\u0000 is text here, not a NUL", "é": "\U0001f600"}
    assert ledger.enqueue("c", "deep", deepest).payload == deepest
    assert ledger.enqueue("c", "text", text).payload == text
    assert ledger.get("c", "deep").payload == deepest  # type: ignore[union-attr]
    assert ledger.get("c", "text").payload == text  # type: ignore[union-attr]


def test_an_outcome_whose_text_no_database_can_store_is_still_recorded(
    ledger: denpyo.Ledger,
) -> None:
    """An exception's message or a remote id holding a NUL or a lone surrogate is
    written escaped: the store refused the whole settle, and the outcome was lost."""
    outcomes: dict[str, Callable[[Submission], Any]] = {
        "transient": fail(denpyo.Transient("503 \x00 from the proxy")),
        "ambiguous": fail(RuntimeError("reply cut at \udcff")),
        "synced": lambda sub: "msg_\ud800\x00",
    }
    ledger.channel("c", idempotent=True)(lambda sub: outcomes[sub.key](sub))
    for key in outcomes:
        with contextlib.suppress(denpyo.SubmissionError):
            ledger.submit("c", key, {})
    rows = {key: ledger.get("c", key) for key in outcomes}
    assert {k: (r.status, r.error_kind) for k, r in rows.items() if r} == {
        "transient": (Status.FAILED, ErrorKind.TRANSIENT),
        "ambiguous": (Status.FAILED, ErrorKind.AMBIGUOUS),
        "synced": (Status.SYNCED, None),
    }
    assert rows["transient"].last_error == "Transient: 503 \\x00 from the proxy"  # type: ignore[union-attr]
    assert rows["ambiguous"].last_error == "RuntimeError: reply cut at \\udcff"  # type: ignore[union-attr]
    assert rows["synced"].remote_id == "msg_\\ud800\\x00"  # type: ignore[union-attr]


def test_an_outcome_whose_text_is_longer_than_a_column_holds_is_cut_not_lost(
    ledger: denpyo.Ledger,
) -> None:
    """A provider's whole error page (70,000 characters) as the error, and a remote
    id as long: MariaDB's TEXT holds 65,535 bytes and refused the settle, so the
    outcome was lost and the row went in doubt. The text is kept cut, saying so."""
    from denpyo.domain.limits import MAX_STORED_TEXT

    page = "é" * 70_000  # two bytes each in UTF-8: past the column on MariaDB
    outcomes: dict[str, Callable[[Submission], Any]] = {
        "transient": fail(denpyo.Transient(page)),
        "synced": lambda sub: page,
    }
    ledger.channel("c")(lambda sub: outcomes[sub.key](sub))
    with contextlib.suppress(denpyo.SubmissionError):
        ledger.submit("c", "transient", {})
    ledger.submit("c", "synced", {})
    failed, synced = ledger.get("c", "transient"), ledger.get("c", "synced")
    assert failed is not None and synced is not None
    assert (failed.status, failed.error_kind) == (Status.FAILED, ErrorKind.TRANSIENT)
    assert synced.status is Status.SYNCED
    for text in (failed.last_error, synced.remote_id):
        assert text is not None and len(text) <= MAX_STORED_TEXT
        assert text.endswith("more characters cut]")
    [settle] = [e for e in ledger.events(failed.id) if e.kind == "settle"]
    assert settle.detail == failed.last_error
