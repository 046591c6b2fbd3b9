"""The documented SQL (docs/reference/tables.md) answers its questions, on every database."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import denpyo
from doc_pages import blocks, named


def queries_for(backend: str) -> list[str]:
    found = [b.code for b in blocks("reference/tables.md", "query") if b.name in ("all", backend)]
    assert len(found) >= 5
    return found


def test_readme_queries_run_and_answer(
    ledger: denpyo.Ledger, backend: str, sql: Callable[[str], list[tuple[Any, ...]]]
) -> None:
    def provider(sub: denpyo.Submission) -> str:
        if sub.key == "order:7":
            raise denpyo.Rejected("address bounced")
        return f"msg-{sub.key}"

    ledger.channel("invoice-email")(provider)
    for n in (41, 42, 7):
        with contextlib.suppress(denpyo.SubmissionRejected):
            ledger.submit("invoice-email", f"order:{n}", {"order": n})
    ledger.enqueue("invoice-email", "order:43", {"order": 43})
    results = [sql(query) for query in queries_for(backend)]
    sent = results[0]
    assert sent[0][0] == "synced" and sent[0][1] == "msg-order:42"
    not_settled = results[1]
    assert [row[2] for row in not_settled] == ["order:43"]
    monthly = results[2]
    assert sum(row[2] for row in monthly) == 2
    failures = results[3]
    assert [row[1] for row in failures] == ["order:7"] and "bounced" in failures[0][3]
    attention = results[4]
    assert [row[2] for row in attention] == ["order:7"]


def test_the_tables_page_s_own_queries_run(
    ledger: denpyo.Ledger, sql: Callable[[str], list[tuple[Any, ...]]]
) -> None:
    """The queries beside each table's description, as printed, on every database."""
    ledger.channel("invoice-email")(lambda sub: "msg")
    ledger.submit("invoice-email", "order:1", {"order": 1})
    ledger.pause("invoice-email", note="the provider's maintenance", by="ann")
    queries = {block.name: block.code for block in blocks("reference/tables.md", "tables")}
    assert set(queries) == {"removed", "paused", "marked"}, queries
    assert sql(queries["removed"]) == []  # nothing was created in March 2026
    [(channel, _, actor, note)] = sql(queries["paused"])
    assert (channel, actor, note) == ("invoice-email", "operator:ann", "the provider's maintenance")
    assert sql(queries["marked"]) == []


def test_the_tracing_page_finds_a_request_s_rows_by_its_trace_id(
    ledger: denpyo.Ledger, sql: Callable[[str], list[tuple[Any, ...]]]
) -> None:
    ledger.channel("invoice-email")(lambda sub: "msg")
    for n in (1, 2):
        ledger.enqueue("invoice-email", f"order:{n}", {"order": n})
    sql(  # the trace context a request under OpenTelemetry leaves on its row
        "UPDATE denpyo_submissions SET traceparent = "
        "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' WHERE id = 1"
    )
    query = named("guide/tracing.md", "tracing")["by-trace"]
    assert [row[1:] for row in sql(query)] == [("invoice-email", "order:1", "requesting")]
