"""The action log, two-person requests and bulk actions from the command line, each
command a fresh interpreter as a person runs it."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import denpyo
from denpyo.domain.actions import ActionKind
from denpyo.domain.filters import Filter
from denpyo.engine import operator as op

APP = """
import denpyo

ledger = denpyo.Ledger({url!r}, approval=denpyo.Approval())
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
        cli(
            *app,
            "resolve",
            str(row),
            "--mark-synced",
            "--remote-id",
            "m-1",
            "--note",
            "in the console",
            "--by",
            "ada",
            cwd=tmp_path,
        )
    )
    assert "request #" in asked.stdout and "denpyo approve" in asked.stdout
    [waiting] = as_json(cli(*app, "approvals", "--json", cwd=tmp_path))
    assert (waiting["kind"], waiting["by"], waiting["state"]) == (
        "mark_synced",
        "ada",
        "awaiting_approval",
    )
    refused(
        cli(*app, "approve", str(waiting["id"]), "--note", "me", "--by", "ada", cwd=tmp_path),
        "a second person decides it",
    )
    done = as_json(
        cli(
            *app,
            "approve",
            str(waiting["id"]),
            "--note",
            "seen it",
            "--by",
            "bob",
            "--json",
            cwd=tmp_path,
        )
    )
    assert (done["state"], done["approver"]) == ("done", "bob")
    shown = as_json(cli(*app, "show", str(row), "--json", cwd=tmp_path))
    assert shown["submission"]["status"] == "synced"
    assert "approved by bob" in shown["events"][-1]["detail"]


def test_bad_input_is_one_line_and_exit_2(db_url: str) -> None:
    failed_rows(db_url, 1)
    refused(cli("bulk", "retry", "--note", "n", db=db_url), "select the rows to retry")
    refused(cli("bulk", "retry", "--status", "failed", db=db_url), "a note (--note) is required")
    refused(cli("approve", "999", "--note", "n", db=db_url), "no action #999")
    refused(cli("bulk", "pause", "999", db=db_url), "is not in progress")
    assert as_json(cli("actions", "--json", db=db_url)) == []  # nothing was written


def exhausted(url: str, n: int) -> None:
    """`n` exhausted rows of channel `sms`, recorded by the ledger and failed in one
    statement, as an outage leaves them."""
    with denpyo.Ledger(url) as ledger:
        ledger.channel("sms")(lambda sub: "sms-1")
        ledger.enqueue_many("sms", [(f"k{i}", {"i": i}) for i in range(n)])
    update = (
        "UPDATE denpyo_submissions SET status = 'failed', error_kind = 'transient', "
        "last_error = '503', attempts = 5, next_attempt_at = NULL WHERE channel = 'sms'"
    )
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(update)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(update)


def bulk_under_way(url: str) -> subprocess.Popen[bytes]:
    """`denpyo bulk retry` of every failed row of `sms`, in batches of 20 with a lease of
    1 s, once it has done 200 rows (or a minute has passed)."""
    command = [
        sys.executable,
        "-m",
        "denpyo.cli",
        "--db",
        url,
        "bulk",
        "retry",
        "--status",
        "failed",
        "--channel",
        "sms",
        "--note",
        "outage over",
        "--by",
        "ada",
        "--yes",
        "--batch",
        "20",
        "--lease",
        "1",
        "--json",
    ]
    holder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with denpyo.Ledger(url) as ledger:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = ledger.store.actions(limit=1)
            if found and found[0].done >= 200:
                break
            time.sleep(0.01)
    return holder


def retries_per_row(url: str) -> dict[int, int]:
    with denpyo.Ledger(url) as ledger:
        rows = ledger.store.list_submissions(Filter(channel="sms", limit=10_000))
        return {s.id: [e.kind for e in ledger.events(s.id)].count("retry") for s in rows}


def test_a_bulk_killed_mid_run_is_carried_on_and_acts_on_each_row_once(db_url: str) -> None:
    """SIGKILL while batches commit: what a batch did is all there or not at all, and
    `bulk continue` takes over once the dead holder's lease ends."""
    total = 3000
    exhausted(db_url, total)
    holder = bulk_under_way(db_url)
    with denpyo.Ledger(db_url) as ledger:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        [killed] = ledger.store.actions(limit=1)
    assert killed.state.value == "in_progress" and 200 <= killed.done < total
    counts = retries_per_row(db_url)
    assert set(counts.values()) <= {0, 1}
    assert sum(counts.values()) == killed.done  # the rows moved are exactly those counted
    refused(cli("bulk", "pause", "999", db=db_url), "is not in progress")
    time.sleep(1.2)  # the dead holder's lease ends
    done = as_json(cli("bulk", "continue", str(killed.id), "--json", db=db_url))
    assert (done["state"], done["done"], done["skipped"]) == ("done", total, 0)
    assert set(retries_per_row(db_url).values()) == {1}


def test_bulk_continue_says_when_it_can_take_over_a_live_lease(db_url: str) -> None:
    """A holder that died a moment ago still holds the action until its lease ends:
    `bulk continue` does nothing then, and says so, and when it can take over."""
    failed_rows(db_url, 3)
    with denpyo.Ledger(db_url) as ledger:
        dry = op.plan_bulk(
            ledger, ActionKind.RETRY, Filter(channel="email"), note="n", by="ada", target="x"
        )
        op.confirm_bulk(ledger, dry.action.id, by="ada")
        assert ledger.store.take_action(dry.action.id, holder="gone-host:4242:dead", lease=600)
    proc = cli("bulk", "continue", str(dry.action.id), db=db_url)
    refused(proc, "is held by gone-host:4242:dead until")
    left = re.search(r"takes it over then, in (\d+) s", proc.stderr)
    assert left is not None and 500 <= int(left.group(1)) <= 600, proc.stderr
    with denpyo.Ledger(db_url) as ledger:
        still = ledger.store.action(dry.action.id)
    assert still is not None and still.done == 0


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_bulk_paused_past_its_lease_loses_it_and_no_row_is_acted_on_twice(
    db_url: str,
) -> None:
    """SIGSTOP a holder (perhaps in the middle of a batch's transaction) past its
    lease; `bulk continue` takes the action over; the first, woken, finds its lease
    gone at its next batch, which rolls back whole: each row is retried once."""
    total = 3000
    exhausted(db_url, total)
    first = bulk_under_way(db_url)
    with denpyo.Ledger(db_url) as ledger:
        first.send_signal(signal.SIGSTOP)
        [action] = ledger.store.actions(limit=1)
    try:
        time.sleep(1.5)  # past its lease
        second = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "denpyo.cli",
                "--db",
                db_url,
                "bulk",
                "continue",
                str(action.id),
                "--batch",
                "20",
                "--lease",
                "1",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # it takes over (or waits on the rows the sleeper holds)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=120) == 0
    _, err = second.communicate(timeout=120)
    assert second.returncode in (0, 2), err  # 2: the first finished it first
    with denpyo.Ledger(db_url) as ledger:
        final = ledger.store.action(action.id)
        if final is not None and final.state.value != "done":  # both stopped early: finish
            ok(cli("bulk", "continue", str(action.id), db=db_url))
            final = ledger.store.action(action.id)
    assert final is not None and (final.state.value, final.done) == ("done", total)
    assert set(retries_per_row(db_url).values()) == {1}
