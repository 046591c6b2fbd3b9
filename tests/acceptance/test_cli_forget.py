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
import time
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
    assert "pruned" not in people.stdout, "nothing was pruned: nothing to say of it"
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


def test_where_says_it_cannot_search_pruned_rows_only_when_some_were(db_url: str) -> None:
    """A --where passes over pruned rows (their payloads are gone): it says so when
    the channel searched has one not forgotten, and not otherwise."""
    story(db_url)
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("sms")(lambda sub: f"r-{sub.key}")
        ledger.submit("sms", "text:1", {"to": "dan@example.com"})
        ledger.prune(older_than=0)  # the synced rows, sms's and mail's
    where = ["--where", f"to={ANN}", "--note", "#885", "--dry-run"]
    said = "some rows were pruned: their payloads are gone, so --where cannot tell"
    assert said in ok(cli("forget", *where, db=db_url)).stdout
    assert as_json(cli("forget", *where, "--json", db=db_url))["pruned_unsearched"] is True
    dan = ["--where", "to=dan@example.com", "--channel", "sms", "--note", "#886"]
    nothing = cli("forget", *dan, db=db_url)
    assert nothing.returncode == 2 and "a pruned row's payload is gone" in nothing.stderr
    ok(cli("forget", "sms:text:1", "--note", "#886", db=db_url))
    nothing = cli("forget", *dan, db=db_url)
    assert nothing.returncode == 2 and "no payload has that value" in nothing.stderr
    assert "pruned" not in nothing.stderr, "sms has no pruned row left to forget"
    assert said in ok(cli("forget", *where, "--channel", "mail", db=db_url)).stdout
    for key in ("mail:order:1", "mail:order:2"):
        ok(cli("forget", key, "--note", "#887", db=db_url))
    quiet = ok(cli("forget", *where, db=db_url)).stdout
    assert "would forget the payloads of 1 live row(s)" in quiet and "pruned" not in quiet


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


KILLED_MID_FORGET = """
import os, signal, sys
import denpyo
from denpyo.engine.forgetting import forget

with denpyo.Ledger(sys.argv[1]) as ledger:
    real = ledger.store.forget_rows

    def forget_rows(*args, **kwargs):
        done = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # after its first batch committed
        return done

    ledger.store.forget_rows = forget_rows
    forget(ledger, where="to=ann@example.com", note="#883", batch=1, lease=1.0)
"""


def test_a_forget_killed_mid_run_is_ended_and_carried_on_by_the_next(db_url: str) -> None:
    """A forget whose process is killed (SIGKILL) between two batches: its entry in the
    action log stays `running` only until its lease runs out; `bulk continue` says to
    run it again; the next forget of those rows ends it and forgets the rest."""
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("mail")(lambda sub: f"r-{sub.key}")
        ids = [ledger.submit("mail", f"order:{n}", {"to": ANN}).id for n in range(3)]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MID_FORGET, db_url], capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    [cut] = as_json(cli("actions", "--json", db=db_url))
    assert (cut["kind"], cut["state"], cut["done"], cut["rows"]) == ("forget", "in_progress", 1, 3)
    refused = cli("bulk", "continue", str(cut["id"]), db=db_url)
    assert refused.returncode == 2 and "is a forget: run it again" in refused.stderr

    with denpyo.Ledger(db_url) as ledger:  # its process is dead: its lease runs out
        held = ledger.store.action(cut["id"])
        assert held is not None and held.locked_until is not None
        time.sleep(max(0.0, (held.locked_until - ledger.store.now()).total_seconds()) + 0.2)
    again = as_json(cli("forget", "--where", f"to={ANN}", "--note", "#883", "--json", db=db_url))
    assert again["counts"]["live"] == 2 and again["action"] != cut["id"]
    log = {entry["id"]: entry for entry in as_json(cli("actions", "--json", db=db_url))}
    assert log[cut["id"]]["state"] == "cancelled" and log[again["action"]]["state"] == "done"
    assert log[again["action"]]["params"]["carries_on"] == [cut["id"]]
    for sid in ids:
        shown = as_json(cli("show", str(sid), "--json", "--full", db=db_url))
        assert shown["submission"]["payload"] is None
