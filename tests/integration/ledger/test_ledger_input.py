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
from conftest import driver_connection
from denpyo import ErrorKind, Status, Submission
from denpyo.engine import operator as op


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


@pytest.mark.parametrize(
    ("item", "shape"),
    [
        ("abc", "a str"),
        (("k", {}, None, "extra"), "a tuple of 4"),
        (("k",), "a tuple of 1"),
        ({"k": {}}, "a dict"),
        (None, "a NoneType"),
    ],
    ids=["str", "4-tuple", "1-tuple", "dict", "none"],
)
def test_enqueue_many_takes_only_the_documented_item_shapes(
    ledger: denpyo.Ledger, sql: SQL, item: Any, shape: str
) -> None:
    """A string was unpacked into key, payload and ordering key (`"abc"`: key `a`), a
    longer tuple lost its extra parts: each is refused by its position, nothing kept."""
    ledger.channel("c")(ok)
    items = [("first", {}), ["second", {"as": "list"}, "group"], item]
    expected = rf"items\[2\] must be \(key, payload\) .*, not {shape}$"
    with pytest.raises(denpyo.InvalidInput, match=expected):
        ledger.enqueue_many("c", items)
    with pytest.raises(denpyo.InvalidInput, match=expected):
        asyncio.run(ledger.aenqueue_many("c", items))
    assert sql("SELECT COUNT(*) FROM denpyo_submissions") == [(0,)]
    assert ledger.enqueue_many("c", items[:2]) == 2  # a list of 3 is an item
    assert ledger.get("c", "second").ordering_key == "group"  # type: ignore[union-attr]


def test_a_payload_differing_only_in_json_type_is_another_call(ledger: denpyo.Ledger) -> None:
    """`1 == True == 1.0` in Python, but each is other JSON: the provider would get
    another body, so the key is `KeyReused`, on every database (jsonb included)."""
    ledger.channel("c")(ok)
    values: list[Any] = [1, True, 1.0, "1", 0, False, 0.0, None]
    for first in values:
        for second in values:
            if first is second:
                continue
            key = f"{first!r}-then-{second!r}"
            ledger.enqueue("c", key, {"a": first})
            with pytest.raises(denpyo.KeyReused):
                ledger.enqueue("c", key, {"a": second})
            with pytest.raises(denpyo.KeyReused):
                ledger.enqueue_many("c", [(key, {"a": second})])
            with pytest.raises(denpyo.KeyReused):
                ledger.submit("c", key, {"a": second})


def test_the_same_payload_again_is_the_same_call(ledger: denpyo.Ledger) -> None:
    """The same JSON however the database keeps it: jsonb reorders keys, keeps a
    number's value rather than its spelling (`1e+300` reads back as an integer) and
    drops the sign of zero."""
    ledger.channel("c")(ok)
    payloads: list[Any] = [
        {"b": 1, "a": [0.1, 0.30000000000000004, 1e-7, 2.5e-300, 123456789.125]},
        {"big": [1e16, 1e300, -1.7976931348623157e308, 1.2345678901234567e20]},
        {"ints": [10**30, -(2**63), 0], "zero": -0.0, "t": True, "n": None},
        {"z": {"y": {"x": "é\U0001f600"}}, "a": "text"},
        [1.5, "1.5", {"k": 1.0}],
    ]
    for n, payload in enumerate(payloads):
        first = ledger.enqueue("c", f"k{n}", payload)
        reordered = dict(reversed(payload.items())) if isinstance(payload, dict) else payload
        assert ledger.enqueue("c", f"k{n}", reordered).id == first.id
        assert ledger.enqueue_many("c", [(f"k{n}", payload)]) == 0
    sent = ledger.submit("c", "sent", payloads[1])
    assert sent.status is Status.SYNCED
    assert ledger.submit("c", "sent", dict(reversed(payloads[1].items()))).id == sent.id


def test_a_closed_ledger_refuses_instead_of_reopening(ledger: denpyo.Ledger, backend: str) -> None:
    ledger.channel("c")(ok)
    sub = ledger.submit("c", "before", {})
    ledger.close()
    entries: list[Callable[[], Any]] = [
        lambda: ledger.submit("c", "k", {}),
        lambda: ledger.enqueue("c", "k", {}),
        lambda: ledger.enqueue_many("c", [("k", {})]),
        lambda: ledger.get("c", "before"),
        lambda: ledger.get_by_id(sub.id),
        lambda: ledger.events(sub.id),
        lambda: ledger.work(until_idle=True),
        lambda: ledger.reconcile(),
        lambda: ledger.prune(older_than=0),
        lambda: ledger.report(),
        lambda: ledger.migrate(),
        lambda: asyncio.run(ledger.asubmit("c", "k", {})),
        lambda: asyncio.run(ledger.aget("c", "before")),
        lambda: asyncio.run(ledger.awork(until_idle=True)),
    ]
    for entry in entries:
        with pytest.raises(denpyo.ConfigurationError, match="this ledger is closed"):
            entry()
    conn = driver_connection(backend, ledger.url)
    try:
        with pytest.raises(denpyo.ConfigurationError, match="this ledger is closed"):
            ledger.enqueue("c", "k", {}, conn=conn)
    finally:
        conn.close()
    assert not ledger.bridge.started and ledger._db is None  # nothing started again
    ledger.close()  # twice: harmless


@pytest.mark.parametrize("submission_id", [2**63, 2**64, -(2**63) - 1, -1, 0])
def test_an_id_no_row_can_have_finds_nothing(ledger: denpyo.Ledger, submission_id: int) -> None:
    """An id past 64 bits was an OverflowError from SQLite's driver: no row has it."""
    ledger.channel("c")(ok)
    ledger.enqueue("c", "k", {})
    assert ledger.get_by_id(submission_id) is None
    assert ledger.events(submission_id) == []
    assert asyncio.run(ledger.aget_by_id(submission_id)) is None
    assert asyncio.run(ledger.aevents(submission_id)) == []
    with pytest.raises(denpyo.SubmissionNotFound):
        ledger.enqueue("c", "new", {}, supersedes=submission_id)


@pytest.mark.parametrize("submission_id", ["1", 1.0, True, None])
def test_an_id_that_is_not_a_whole_number_is_invalid_input(
    ledger: denpyo.Ledger, submission_id: Any
) -> None:
    with pytest.raises(denpyo.InvalidInput, match="whole number"):
        ledger.get_by_id(submission_id)
    with pytest.raises(denpyo.InvalidInput, match="whole number"):
        ledger.events(submission_id)


@pytest.mark.parametrize("text", ["\ud800", "order\udcff", "a\x00b"])
def test_a_key_search_for_text_no_key_can_hold_is_invalid_input(
    ledger: denpyo.Ledger, text: str
) -> None:
    """PostgreSQL's driver raised UnicodeEncodeError on a lone surrogate."""
    ledger.channel("c")(ok)
    ledger.enqueue("c", "order:1", {})
    with pytest.raises(denpyo.InvalidInput):
        op.search(ledger, "c", text)
    with pytest.raises(denpyo.InvalidInput):
        op.search(ledger, "c", "order", after=text)
    with pytest.raises(denpyo.InvalidInput):
        op.list_submissions(ledger, op.make_filter(ledger, key_prefix=text))
    with pytest.raises(denpyo.InvalidInput):
        op.find(ledger, f"c:{text}")
    with pytest.raises(denpyo.InvalidKey):
        ledger.get("c", text)
    with pytest.raises(denpyo.InvalidKey):
        asyncio.run(ledger.aget("c", text))
    assert [sub.key for sub in op.search(ledger, "c", "order").rows] == ["order:1"]
