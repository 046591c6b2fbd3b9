"""The documented SQL (docs/reference/tables.md) answers its questions, on every database."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import denpyo
from doc_pages import blocks


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
