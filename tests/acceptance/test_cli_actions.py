"""The action log, two-person requests and bulk actions from the command line, each
command a fresh interpreter as a person runs it."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import denpyo

APP = """
import denpyo
from denpyo.domain.actions import Approval

ledger = denpyo.Ledger({url!r}, approval=Approval())
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def cli(
    *args: str, db: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "denpyo.cli", *(["--db", db] if db else []), *args]
    env = {**os.environ, "COLUMNS": "200"}
    if cwd is not None:
        env["PYTHONPATH"] = f"{cwd}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=cwd)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr
    return proc


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(proc).stdout)


def refused(proc: subprocess.CompletedProcess[str], words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def failed_rows(url: str, n: int) -> list[int]:
    with denpyo.Ledger(url) as ledger:

        def send(sub: denpyo.Submission) -> str:
            raise denpyo.Transient("503")

        ledger.channel("email", max_attempts=1, down_after=None)(send)
        ids = []
        for i in range(n):
            try:
                ledger.submit("email", f"k{i}", {"to": f"{i}@example.com"})
            except denpyo.SubmissionError as exc:
                ids.append(exc.submission.id)
        return ids


def test_the_log_lists_each_action_and_exports_it(db_url: str) -> None:
    [a, b] = failed_rows(db_url, 2)
    ok(cli("retry", str(a), "--note", "provider back", "--by", "ada", db=db_url))
    ok(cli("resolve", str(b), "--abandon", "--note", '=HYPERLINK("x")', "--by", "bob", db=db_url))
    ok(cli("pause", "email", "--note", "incident", "--by", "ada", db=db_url))
    log = as_json(cli("actions", "--json", db=db_url))
    assert [(r["kind"], r["by"], r["rows"]) for r in log] == [
        ("pause", "ada", 0),
        ("abandon", "bob", 1),
        ("retry", "ada", 1),
    ]
    assert [r["kind"] for r in as_json(cli("actions", "--by", "ada", "--json", db=db_url))] == [
        "pause",
        "retry",
    ]
    exported = list(csv.DictReader(io.StringIO(ok(cli("actions", "--csv", db=db_url)).stdout)))
    assert exported[1]["note"] == '\'=HYPERLINK("x")'  # a spreadsheet reads no formula
    table = ok(cli("actions", db=db_url)).stdout
    assert "bob" in table and "abandon" in table
    refused(cli("actions", "--kind", "retyr", db=db_url), "no kind named 'retyr'")


def test_bulk_retry_dry_run_then_batches(db_url: str) -> None:
    ids = failed_rows(db_url, 30)
    flags = ["--status", "failed", "--channel", "email", "--note", "outage over", "--by", "ada"]
    dry = as_json(cli("bulk", "retry", *flags, "--dry-run", "--json", db=db_url))
    assert dry["counts"] == {"will retry": 30} and dry["dry_run"] is True
    with denpyo.Ledger(db_url) as ledger:
        assert all(ledger.store.get(i).next_attempt_at is None for i in ids)  # type: ignore[union-attr]
    done = as_json(cli("bulk", "retry", *flags, "--yes", "--batch", "7", "--json", db=db_url))
    assert (done["state"], done["done"], done["skipped"]) == ("done", 30, 0)
    rows = as_json(cli("action", str(done["id"]), "--limit", "100", "--json", db=db_url))
    assert len(rows["row_outcomes"]) == 30
    assert {r["outcome"] for r in rows["row_outcomes"]} == {"done"}


def test_a_two_person_rule_makes_a_request(db_url: str, tmp_path: Path) -> None:
    [row] = failed_rows(db_url, 1)
    (tmp_path / "shop_app.py").write_text(APP.format(url=db_url))
    app = ["--app", "shop_app:ledger"]
    asked = ok(
        cli(*app, "resolve", str(row), "--mark-synced", "--remote-id", "m-1", "--note",
            "in the console", "--by", "ada", cwd=tmp_path)
    )  # fmt: skip
    assert "request #" in asked.stdout and "denpyo approve" in asked.stdout
    [waiting] = as_json(cli(*app, "approvals", "--json", cwd=tmp_path))
    assert (waiting["kind"], waiting["by"], waiting["state"]) == ("mark_synced", "ada", "requested")
    refused(
        cli(*app, "approve", str(waiting["id"]), "--note", "me", "--by", "ada", cwd=tmp_path),
        "a second person decides it",
    )
    done = as_json(
        cli(*app, "approve", str(waiting["id"]), "--note", "seen it", "--by", "bob", "--json",
            cwd=tmp_path)
    )  # fmt: skip
    assert (done["state"], done["approver"]) == ("done", "bob")
    shown = as_json(cli(*app, "show", str(row), "--json", cwd=tmp_path))
    assert shown["submission"]["status"] == "synced"
    assert "approved by bob" in shown["events"][-1]["detail"]


def test_bad_input_is_one_line_and_exit_2(db_url: str) -> None:
    failed_rows(db_url, 1)
    refused(cli("bulk", "retry", "--note", "n", db=db_url), "select the rows to retry")
    refused(cli("bulk", "retry", "--status", "failed", db=db_url), "a note (--note) is required")
    refused(cli("approve", "999", "--note", "n", db=db_url), "no action #999")
    refused(cli("bulk", "pause", "999", db=db_url), "is not running")
    assert as_json(cli("actions", "--json", db=db_url)) == []  # nothing was written
