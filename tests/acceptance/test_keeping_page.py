"""The retention commands of "Keeping the ledger for years"
(docs/how-to/keeping-for-years.md) run as printed, in a fresh folder, on the
command line's default ledger (./denpyo.db) that a test filled first: prune keeps
the counts, so the report is the same after it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import denpyo
from doc_pages import commands, named, run_session


def test_prune_then_report_as_printed(tmp_path: Path) -> None:
    with denpyo.Ledger(f"sqlite:///{tmp_path / 'denpyo.db'}") as ledger:
        ledger.migrate()
        ledger.channel("invoice-email")(lambda sub: "msg")
        for n in range(3):
            ledger.submit("invoice-email", f"order:{n}", {"n": n})
    steps = commands(named("how-to/keeping-for-years.md", "retention")["prune"])
    said = [text for _, text in run_session(tmp_path, steps, env={"DENPYO_DATABASE_URL": None})]
    assert said[0].startswith("dry run: would remove 0 settled row(s)"), said[0]
    assert said[1].startswith("removed 0 settled row(s)"), said[1]  # none is 30 days old
    assert "prune" in said[2] and "cron-nightly" in said[2], said[2]  # the action log
    assert "invoice-email" in said[3] and "synced" in said[3], said[3]
    today = datetime.now(UTC).date().isoformat()
    assert json.loads(said[4]) == [
        {"period": today, "channel": "invoice-email", "status": "synced", "count": 3}
    ], said[4]
