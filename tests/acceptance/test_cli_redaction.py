"""The command line shows a row through the ledger's redaction: `show`, `list`,
`retry` and `resolve`, for people and with `--json`; $DENPYO_REDACT hides more;
`--full` shows everything, and says so in the log."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

import denpyo
from denpyo.cli import main

CARD = "4111111111111111"
CVV = "737"
ADDRESS = "1 Main Street"


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The command line is the same code on every database: SQLite and PostgreSQL."""
    return str(request.param)


def cli(*args: str, db: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "denpyo.cli", "--db", db, *args]
    inherited = {k: v for k, v in os.environ.items() if k != "DENPYO_REDACT"}
    full_env = {**inherited, "COLUMNS": "200", **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=120)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def rejected_row(db_url: str, signal: type[denpyo.ChannelSignal] = denpyo.Rejected) -> int:
    """A row the provider refused (`Rejected`: rejected; `Transient`: failed, with no
    attempt left) with an error that quotes its card number."""
    with denpyo.Ledger(db_url) as ledger:

        @ledger.channel("pay", max_attempts=1)
        def send(sub: denpyo.Submission) -> str:
            card = sub.payload["card"]["cardNumber"]
            raise signal(f'402 card {card} declined; sent {{"cardNumber": "{card}"}}')

        payload = {
            "to": "ann@example.com",
            "card": {"cardNumber": CARD, "CVV": CVV},
            "address": ADDRESS,
        }
        with pytest.raises(denpyo.SubmissionError) as raised:
            ledger.submit("pay", "order-1", payload)
        assert CARD not in str(raised.value)  # the error's text, for the app's log
        sub = raised.value.submission
        assert sub is not None and sub.payload == payload  # the row itself, whole
        return sub.id


def test_show_and_list_redact_by_default_and_full_shows_everything(db_url: str) -> None:
    row = rejected_row(db_url)
    commands: list[tuple[list[str], dict[str, str] | None]] = [
        (["show", str(row)], None),
        (["show", str(row), "--json"], None),
        (["list", "--json"], None),
        (["list"], None),
        (["show", str(row), "--json"], {"DENPYO_REDACT": "address"}),
        (["show", str(row), "--full"], None),
        (["show", str(row), "--json", "--full"], None),
        (["list", "--json", "--full"], None),
    ]
    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda c: ok(cli(*c[0], db=db_url, env=c[1])), commands))
    show, show_json, list_json, list_text, with_env, *full = runs
    for out in (show, show_json, list_json, list_text, with_env):
        # the CVV as a value: three digits may well occur inside a random key's hex
        assert CARD not in out and not re.search(rf"\b{CVV}\b", out)
        assert "[redacted]" in out
    assert "ann@example.com" in show and ADDRESS in show
    found = json.loads(show_json)
    assert found["submission"]["payload"] == {
        "to": "ann@example.com",
        "card": {"cardNumber": "[redacted]", "CVV": "[redacted]"},
        "address": ADDRESS,
    }
    assert "402 card [redacted] declined" in found["submission"]["last_error"]
    assert any("[redacted]" in (event["detail"] or "") for event in found["events"])
    [listed] = json.loads(list_json)
    assert listed["payload"]["card"]["cardNumber"] == "[redacted]"
    assert json.loads(with_env)["submission"]["payload"]["address"] == "[redacted]"
    show_full, show_json_full, list_json_full = full
    assert CARD in show_full and CVV in show_full
    assert json.loads(show_json_full)["submission"]["payload"]["card"]["cardNumber"] == CARD
    assert CARD in json.loads(show_json_full)["submission"]["last_error"]
    assert json.loads(list_json_full)[0]["payload"]["card"]["CVV"] == CVV


def test_retry_and_resolve_print_the_rows_redacted(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/ledger.db"
    with denpyo.Ledger(db) as ledger:
        ledger.migrate()
    row = rejected_row(db, denpyo.Transient)
    would = json.loads(ok(cli("retry", str(row), "--dry-run", "--json", db=db)))
    assert CARD not in json.dumps(would)
    [retried] = would["retried"]
    assert retried["payload"]["card"]["cardNumber"] == "[redacted]"
    assert "402 card [redacted] declined" in retried["last_error"]
    whole = json.loads(ok(cli("retry", str(row), "--dry-run", "--json", "--full", db=db)))
    assert whole["retried"][0]["payload"]["card"]["cardNumber"] == CARD
    abandon = ["resolve", str(row), "--abandon", "--note", f"card {CARD} is stolen", "--json"]
    done = json.loads(ok(cli(*abandon, db=db)))
    assert CARD not in json.dumps(done)
    assert done["submission"]["payload"]["card"]["cardNumber"] == "[redacted]"
    assert done["submission"]["resolution"].endswith("card [redacted] is stolen")


def test_each_full_view_is_logged_with_who_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path}/ledger.db"
    with denpyo.Ledger(db) as ledger:
        ledger.migrate()
    row = rejected_row(db)
    monkeypatch.delenv("DENPYO_REDACT", raising=False)
    runner = CliRunner()
    with caplog.at_level(logging.INFO, logger="denpyo.cli"):
        plain = runner.invoke(main, ["--db", db, "show", str(row), "--json"])
        assert not [record for record in caplog.records if record.name == "denpyo.cli"]
        whole = runner.invoke(main, ["--db", db, "show", str(row), "--json", "--full"])
        resolved = runner.invoke(
            main,
            ["--db", db, "resolve", str(row), "--abandon", "--note", "n", "--by", "bob", "--full"],
        )
    assert plain.exit_code == whole.exit_code == resolved.exit_code == 0, whole.output
    assert CARD not in plain.output and CARD in whole.output
    lines = [record.getMessage() for record in caplog.records if record.name == "denpyo.cli"]
    assert lines[0].startswith(f"full payload of #{row} (pay:order-1) shown to ")
    assert lines[1] == f"full payload of #{row} (pay:order-1) shown to bob"
    assert all(CARD not in line for line in lines)


def test_a_name_in_denpyo_redact_that_hides_nothing_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path}/ledger.db"
    refused = cli("status", db=db, env={"DENPYO_REDACT": "address,--"})
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: DENPYO_REDACT: '--' is no field name")
    assert len(refused.stderr.splitlines()) == 1
    assert not (tmp_path / "ledger.db").exists()
