"""The home page's example (docs/index.md) run as printed, in a fresh folder: the
order and its slip are written in one transaction of the application's own
sqlite3 connection; nothing is sent (a worker would)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import denpyo
from doc_pages import named


def test_the_home_page_example_writes_the_order_and_its_slip_together(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(named("index.md", "home")["example"])
    done = subprocess.run(
        [sys.executable, "shop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "shop.db") as db:
        assert db.execute("SELECT id FROM orders").fetchall() == [("42",)]
    with denpyo.Ledger(f"sqlite:///{tmp_path / 'shop.db'}") as ledger:
        sub = ledger.get("invoice-email", "order:42")
    assert sub is not None and sub.status == denpyo.Status.REQUESTING and sub.attempts == 0
