"""The adopting page (docs/how-to/adopting.md), run as written against the fake
provider on SQLite: the old call site, the migration, the ledger's module, the
worker, the call site moved, the adoption of the calls made before, and both paths
side by side, each order sent once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

import denpyo
from denpyo.testing import FakeProvider
from doc_pages import commands, named, run_session

PAGE = "how-to/adopting.md"


class MailApi:
    """The application's existing client of the email API: a request per call, a
    fresh key each time (the API wants one), nothing recorded."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def send_email(self, *, to: str, subject: str, body: str) -> str:
        data = json.dumps({"to": to, "subject": subject, "body": body}).encode()
        headers = {"Idempotency-Key": str(uuid.uuid4()), "Content-Type": "application/json"}
        request = urllib.request.Request(self.url, data=data, headers=headers)
        reply = await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)
        with reply:
            return str(json.load(reply)["id"])


def shop(folder: Path) -> sqlite3.Connection:
    db = sqlite3.connect(folder / "shop.db", check_same_thread=False)
    db.executescript(
        """
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_email TEXT, invoice_text TEXT);
        CREATE TABLE invoice_emails (order_id INTEGER, sent_at TEXT);
        """
    )
    with db:
        db.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            [(n, f"c{n}@example.com", f"invoice {n}: 4200 yen") for n in range(40, 50)],
        )
    return db


def run(namespace: dict[str, Any], block: str) -> None:
    exec(compile(named(PAGE, "adopting")[block], f"{PAGE}: {block}", "exec"), namespace)


def test_the_page_moves_a_call_site_and_sends_each_order_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = named(PAGE, "adopting")
    assert set(blocks) == {"before", "migrate", "ledger", "worker", "after", "adopt", "both"}
    with FakeProvider() as provider:
        db = shop(tmp_path)
        ns: dict[str, Any] = {"db": db, "mail_api": MailApi(provider.send_url)}
        run(ns, "before")
        asyncio.run(ns["send_invoice_email"](41))  # the old code sends order 41
        ns["send_the_old_way"] = ns["send_invoice_email"]
        assert provider.stats().accepted == 1

        [(_, migrated)] = run_session(tmp_path, commands(blocks["migrate"]))
        assert "error" not in migrated.lower(), migrated
        ns["PROVIDER"] = provider.url
        run(ns, "ledger")
        ledger: denpyo.Ledger = ns["ledger"]
        run(ns, "after")
        ns["send_with_denpyo"] = ns["send_invoice_email"]

        async def new_code() -> None:
            await ns["send_with_denpyo"](42)
            await ns["send_with_denpyo"](42)  # the same order again: no second call

        asyncio.run(new_code())
        sub = ledger.get("invoice-email", "order:42")
        assert sub is not None and sub.status is denpyo.Status.SYNCED
        assert provider.stats().accepted == 2 and provider.stats().duplicates == 0

        run(ns, "adopt")  # order 41, sent by the old code, becomes a synced row
        adopted = ledger.get("invoice-email", "order:41")
        assert adopted is not None and adopted.status is denpyo.Status.SYNCED
        assert [e.kind for e in ledger.events(adopted.id)][-1] == "adopted"
        asyncio.run(ns["send_with_denpyo"](41))
        assert provider.stats().requests == 2, "an adopted order is not sent again"
        run(ns, "adopt")  # again: nothing adopted twice
        said = capsys.readouterr().out
        assert said == "1 earlier invoices adopted\n0 earlier invoices adopted\n", said

        for share, orders in (("100", (41, 43)), ("0", (42, 44))):
            monkeypatch.setenv("INVOICES_THROUGH_DENPYO", share)
            run(ns, "both")
            for order in orders:
                asyncio.run(ns["send_invoice_email"](order))
        keys = [e["payload"]["to"] for e in provider.accepted()]
        assert sorted(keys) == [f"c{n}@example.com" for n in (41, 42, 43, 44)], keys
        sent_old = db.execute("SELECT order_id FROM invoice_emails ORDER BY 1").fetchall()
        assert sent_old == [(41,), (44,)]

        ledger.enqueue("invoice-email", "order:45", {"to": "c45@example.com"})
        (tmp_path / "invoices.py").write_text(f"PROVIDER = {provider.url!r}\n" + blocks["ledger"])
        wait = (
            f"{sys.executable} -c 'import time, denpyo\n"
            'with denpyo.Ledger("sqlite:///shop.db") as l:\n'
            "    for _ in range(600):\n"
            '        s = l.get("invoice-email", "order:45")\n'
            "        if s.status is denpyo.Status.SYNCED: break\n"
            "        time.sleep(0.2)\n"
            "    print(s.status.value)'"
        )
        [(_, said)] = run_session(
            tmp_path, [f"{commands(blocks['worker'])[0]} &"], end=wait, timeout=150
        )
        assert said.strip().endswith("synced"), said
        db.close()
        ledger.close()
