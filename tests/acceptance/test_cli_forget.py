"""`denpyo forget` from the command line, each command a fresh interpreter as a person
runs it, on every database: the dry run writes nothing, the forget keeps the slip
and the report, `show` says who forgot the row, the action log never holds the
value searched for, and every bad input is one line on stderr, exit 2, nothing
written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import denpyo

ANN = "ann@example.com"


def cli(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "denpyo.cli", "--db", db, *args]
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr
    return proc


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(proc).stdout)


def story(url: str) -> dict[str, int]:
    """A synced call and an abandoned failure for Ann, a call for Bob, and one row
    still waiting for a worker."""
    with denpyo.Ledger(url) as ledger:

        def send(sub: denpyo.Submission) -> str:
            if sub.key.startswith("fail"):
                raise denpyo.Transient(f"503 for {sub.payload['to']}")
            return f"r-{sub.key}"

        ledger.channel("mail", max_attempts=1, down_after=None)(send)
        ids = {"synced": ledger.submit("mail", "order:1", {"to": ANN}).id}
        try:
            ledger.submit("mail", "fail:1", {"to": ANN})
        except denpyo.SubmissionFailed as exc:
            ids["failed"] = exc.submission.id
        ids["bob"] = ledger.submit("mail", "order:2", {"to": "bob@example.com"}).id
        ids["waiting"] = ledger.enqueue("mail", "order:3", {"to": "carol@example.com"}).id
        return ids


def test_forget_keeps_the_slip_and_never_writes_the_value(db_url: str) -> None:
    ids = story(db_url)
    ok(cli("resolve", str(ids["failed"]), "--abandon", "--note", f"{ANN} left", db=db_url))
    report = as_json(cli("report", "--json", db=db_url))

    where = ["--where", f"to={ANN}"]
    dry = as_json(cli("forget", *where, "--note", "#881", "--dry-run", "--json", db=db_url))
    assert (dry["dry_run"], dry["counts"]) == (True, {"live": 2, "archived": 0, "removed": 0})
    before = as_json(cli("show", str(ids["synced"]), "--json", "--full", db=db_url))
    assert before["submission"]["payload"] == {"to": ANN}, "a dry run writes nothing"

    note = ["--note", f"erasure request from {ANN}", "--by", "alice"]
    people = ok(cli("forget", *where, *note, db=db_url))
    assert "forgot the payloads of 2 live row(s)" in people.stdout
    assert "--where cannot find one" in people.stdout
    shown = ok(cli("show", str(ids["failed"]), db=db_url)).stdout
    assert "payload forgotten on" in shown and "by alice: erasure request from [forgotten]" in shown
    assert ANN not in shown
    data = as_json(cli("show", "mail:order:1", "--json", db=db_url))
    assert data["submission"]["payload"] is None and data["submission"]["status"] == "synced"
    assert data["forgotten"]["by"] == "alice" and data["events"][-1]["kind"] == "forgotten"
    assert as_json(cli("report", "--json", db=db_url)) == report
    log = ok(cli("actions", "--json", db=db_url)).stdout
    assert ANN not in log and '"where": "to"' in log
    refused = cli("retry", str(ids["failed"]), "--note", "again", db=db_url)
    assert refused.returncode == 2 and "its payload was forgotten on" in refused.stderr

    by_key = as_json(cli("forget", "mail:order:2", "--note", "#882", "--json", db=db_url))
    assert by_key["counts"] == {"live": 1, "archived": 0, "removed": 0}
    assert by_key["action"] is not None and by_key["live"] == [ids["bob"]]


def test_bad_input_is_one_line_exit_2_and_nothing_is_written(db_url: str) -> None:
    ids = story(db_url)
    where = ["--where", f"to={ANN}"]
    cases = [
        (["mail:order:1"], "a note (--note) is required"),
        (["mail:order:1", "--note", "  "], "a note (--note) is required"),
        (["mail:order:1", *where, "--note", "x"], "CHANNEL:KEY) or the person"),
        (["--note", "x"], "CHANNEL:KEY) or the person"),
        (["--where", "to", "--note", "x"], "--where takes FIELD=VALUE"),
        (["--where", "a b=c", "--note", "x"], "is not a field"),
        (["mail:order:9", "--note", "x"], "nothing to forget: no submission"),
        (["--where", "to=nobody@example.com", "--note", "x"], "nothing to forget: no payload"),
        (["mail:order:3", "--note", "x"], f"#{ids['waiting']} (mail:order:3) is still open"),
        (["mail:order:1", "--channel", "mail", "--note", "x"], "--channel goes with --where"),
    ]
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda case: cli("forget", *case[0], db=db_url), cases))
    for (args, words), proc in zip(cases, done, strict=True):
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
    assert "abandon it first: denpyo resolve" in done[8].stderr
    assert '"kind": "forget"' not in ok(cli("actions", "--json", db=db_url)).stdout
    shown = as_json(cli("show", "mail:order:1", "--json", "--full", db=db_url))
    assert shown["submission"]["payload"] == {"to": ANN}
