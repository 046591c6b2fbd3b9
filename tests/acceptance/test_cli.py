"""The `denpyo` command line, each command in a subprocess against SQLite and PostgreSQL:
its output for people, its `--json` parsed back, its exit codes, and its refusals
(exit 2, one line on stderr, nothing written)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import denpyo
from database_records import database_record
from denpyo.cli import main
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move
from denpyo.store import NewSubmission
from denpyo.store.queries import load_migrations
from denpyo.testing import FakeProvider
from waiting import wait_until

APP = """
import os

import denpyo
from denpyo.channels.http import HttpChannel

ledger = denpyo.Ledger(os.environ["DENPYO_DATABASE_URL"])
_http = HttpChannel(
    os.environ["TEST_PROVIDER"] + "/send",
    lookup_url=os.environ["TEST_PROVIDER"] + "/lookup/{idempotency_key}",
)
ledger.channel("email", verify=_http.verify, lease=30)(_http.send)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The CLI is the same code on every database; the dialects' differences are in the
    store, which tests/integration/test_operator.py runs on every backend. Here, SQLite
    and PostgreSQL keep this file (a fresh interpreter per command) quick."""
    return str(request.param)


def denpyo_cli(
    *args: str, db: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "denpyo.cli", *(["--db", db] if db else []), *args]
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=120)


def run_all(
    commands: list[list[str]], db: str | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Independent invocations at once (each is a fresh interpreter: startup dominates)."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda args: denpyo_cli(*args, db=db), commands))


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr
    return proc


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(proc).stdout)


def script_channel(ledger: denpyo.Ledger, **options: Any) -> dict[str, str]:
    modes: dict[str, str] = {}

    def send(sub: denpyo.Submission) -> str:
        mode = modes.get(sub.key, "ok")
        if mode == "transient":
            raise denpyo.Transient("503")
        if mode == "reject":
            raise denpyo.Rejected("422 bad address")
        if mode == "boom":
            raise RuntimeError("connection dropped")
        return f"r-{sub.key}"

    ledger.channel("email", **options)(send)
    return modes


def in_doubt(ledger: denpyo.Ledger, key: str, idempotency_key: str | None = None) -> int:
    """A row as a crash leaves it: attempted, its lease run out, due for the reconciler."""
    new = NewSubmission("email", key, idempotency_key or f"idem-{key}", json.dumps({"k": key}))
    sub, _ = ledger.store.record(new, actor="w/1", lease=60)
    S = denpyo.Status
    expire = Move(
        sub.id,
        S.REQUESTING,
        S.REQUESTING,
        "w/1",
        holder="w/1",
        new_holder="w/1",
        lease=0,
        retry_in=0,
        keep_error=True,
    )
    ledger.store.move([expire])
    return sub.id


def snapshot(db_url: str) -> list[Any]:
    with denpyo.Ledger(db_url) as ledger:
        return [
            (sub, ledger.events(sub.id))
            for sub in ledger.store.list_submissions(Filter(limit=10_000))
        ]


@pytest.fixture
def seeded(db_url: str) -> Iterator[dict[str, int]]:
    """One row in each state a person meets, on channel `email`."""
    with denpyo.Ledger(db_url) as ledger:
        modes = script_channel(ledger, max_attempts=1)
        modes.update({"k-failed": "transient", "k-rejected": "reject", "k-ambiguous": "boom"})
        ids = {}
        for key in ("k-ok", "k-failed", "k-rejected", "k-ambiguous"):
            try:
                ids[key] = ledger.submit("email", key, {"k": key}).id
            except denpyo.SubmissionError as exc:
                ids[key] = exc.submission.id
        ids["k-doubt"] = in_doubt(ledger, "k-doubt")
        yield ids


def test_every_command_has_help_with_an_example() -> None:
    runner = CliRunner()
    assert set(main.every_command()) >= {
        "migrate",
        "sql",
        "status",
        "list",
        "show",
        "retry",
        "resolve",
        "reconcile",
        "worker",
        "demo",
        "prune",
        "dashboard",
    }
    for name, command in main.every_command().items():
        assert command.help and "Example:" in command.help, f"`denpyo {name}` has no example"
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0 and "Example:" in result.output, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"`denpyo {name} {param.opts[0]}` has no help"
    top = ok(denpyo_cli("--help")).stdout
    assert "Exit codes" in top and "Example:" in top


def test_the_dashboard_listens_on_a_port_of_its_own_by_default() -> None:
    """Not 8000, where uvicorn serves an application by default."""
    [port] = [p for p in main.every_command()["dashboard"].params if p.name == "port"]
    assert port.default == 8470


def test_the_commands_that_log_take_a_level() -> None:
    for name in ("worker", "reconcile", "audit"):
        options = {opt for p in main.every_command()[name].params for opt in p.opts}
        assert {"-v", "--verbose", "--log-level"} <= options, name


def test_migrate_and_sql(empty_url: str, backend: str) -> None:
    every = [version for version, _ in load_migrations("sqlite")]
    assert as_json(denpyo_cli("migrate", "--json", db=empty_url))["applied"] == every
    again, people, ddl, *others = run_all(
        [
            ["--db", empty_url, "migrate", "--json"],
            ["--db", empty_url, "migrate"],
            ["--db", empty_url, "sql"],  # the dialect of --db
            ["sql", "--dialect", "sqlite"],
            ["sql", "--dialect", "postgresql"],
            ["sql", "--dialect", "oracle"],
        ]
    )
    assert as_json(again) == {"applied": [], "version": every[-1]}
    assert "already up to date" in ok(people).stdout
    script = ok(ddl).stdout
    assert "CREATE TABLE" in script and "denpyo_submissions" in script
    assert f"schema for {backend}" in script
    sqlite, postgresql, oracle = others
    assert "schema for sqlite" in ok(sqlite).stdout
    assert "schema for postgresql" in ok(postgresql).stdout
    assert oracle.returncode == 2 and "oracle" in oracle.stderr


def test_status(db_url: str, seeded: dict[str, int]) -> None:
    as_json_, people, check, check_json = run_all(
        [["status", "--json"], ["status"], ["status", "--check"], ["status", "--check", "--json"]],
        db_url,
    )
    report = as_json(as_json_)
    assert report["channels"]["email"] == {
        "requesting": 1,
        "synced": 1,
        "failed": 2,
        "rejected": 1,
    }
    assert (report["in_doubt"], report["exhausted"], report["needs_person"]) == (2, 1, 4)
    assert report["oldest_pending_age_seconds"] >= 0
    text = ok(people).stdout
    assert "email" in text and "needs a person 4" in text and "ago" in text
    assert check.returncode == 1 and "needs a person 4" in check.stdout
    assert check_json.returncode == 1 and json.loads(check_json.stdout)["needs_person"] == 4


def test_status_check_is_0_when_all_is_well(db_url: str) -> None:
    assert ok(denpyo_cli("status", "--check", db=db_url)).returncode == 0


def test_list_and_show(db_url: str, seeded: dict[str, int]) -> None:
    queries = [
        ["--status", "failed"],
        ["--status", "failed,rejected", "--key-prefix", "k-re"],
        ["--in-doubt"],
        ["--since", "1h", "--limit", "2"],
        ["--until", "2000-01-01"],
    ]
    *found, table, check, empty_check, shown, people, doubt = run_all(
        [
            *(["list", *q, "--json"] for q in queries),
            ["list", "--needs-person"],
            ["list", "--needs-person", "--check"],
            ["list", "--channel", "sms", "--check"],
            ["show", str(seeded["k-rejected"]), "--json"],
            ["show", "email:k-ok"],
            ["show", "email:k-ambiguous"],
        ],
        db_url,
    )
    keys = [[row["key"] for row in as_json(proc)] for proc in found]
    assert keys == [
        ["k-ambiguous", "k-failed"],
        ["k-rejected"],
        ["k-doubt", "k-ambiguous"],
        ["k-doubt", "k-ambiguous"],
        [],
    ]
    text = ok(table).stdout
    assert "k-rejected" in text and "in doubt" in text and "k-ok" not in text
    assert "just now" in text or "ago" in text
    assert check.returncode == 1 and empty_check.returncode == 0
    history = as_json(shown)
    assert history["submission"]["status"] == "rejected"
    assert [e["kind"] for e in history["events"]] == ["created", "attempt", "settle"]
    text = ok(people).stdout
    assert "history" in text and "r-k-ok" in text and "synced" in text
    assert [line.split() for line in text.splitlines() if " actions " in line] == [
        ["│", "actions", "none", "│"]
    ]
    offered = (
        "retry --force-in-doubt, resolve --abandon, resolve --resend --force-in-doubt, "
        "resolve --mark-synced"
    )
    assert offered in ok(doubt).stdout


def piped(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    """The command as a script or a pipe runs it: no terminal, and no COLUMNS set."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    command = [sys.executable, "-m", "denpyo.cli", "--db", db, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_long_payloads_are_cut_unless_full(db_url: str) -> None:
    """A payload near the 1 MiB limit shows as a few KB, with a marker; --full shows it."""
    blob = "x" * 1_000_000
    with denpyo.Ledger(db_url) as ledger:
        script_channel(ledger)
        ids = [ledger.enqueue("email", f"big{i}", {"blob": blob, "n": i}).id for i in range(3)]
    shown, shown_full, rows, rows_full, history = run_all(
        [
            ["show", str(ids[0])],
            ["show", str(ids[0]), "--full"],
            ["list", "--json", "--limit", "3"],
            ["list", "--json", "--limit", "3", "--full"],
            ["show", str(ids[0]), "--json"],
        ],
        db_url,
    )
    text = ok(shown).stdout
    assert len(text) < 20_000 and "bytes more, --full to show all)" in text
    assert blob in ok(shown_full).stdout
    cut = as_json(rows)
    assert len(rows.stdout) < 60_000 and len(cut) == 3
    for row in cut:
        assert row["payload_truncated"] is True and row["payload"]["n"] in (0, 1, 2)
        assert row["payload"]["blob"].endswith("bytes more, --full to show all)")
    assert [row["payload"] for row in as_json(rows_full)] == [
        {"blob": blob, "n": i} for i in (2, 1, 0)
    ]
    assert all(row["payload_truncated"] is False for row in as_json(rows_full))
    assert as_json(history)["submission"]["payload_truncated"] is True


def test_piped_list_prints_one_plain_line_per_row(db_url: str, seeded: dict[str, int]) -> None:
    key = "order:2026-11-30:customer-4242:invoice-email-with-a-long-business-key"
    with denpyo.Ledger(db_url) as ledger:
        script_channel(ledger)
        ledger.enqueue("email", key, {})
    listed, shown = piped("list", db=db_url), piped("show", f"email:{key}", db=db_url)
    header, *lines = ok(listed).stdout.splitlines()
    assert header.split("\t")[:4] == ["id", "channel", "key", "status"]
    assert len(lines) == len(seeded) + 1 and listed.stderr == f"{len(lines)} rows\n"
    rows = {line.split("\t")[2]: line.split("\t") for line in lines}
    assert all(len(row) == 8 for row in rows.values()), lines
    assert rows[key][3] == "requesting" and rows["k-doubt"][3] == "requesting in doubt"
    assert rows["k-failed"][7] == "Transient: 503"
    assert not any(box in listed.stdout for box in "┃│━")
    assert any(key in line and "│" in line for line in ok(shown).stdout.splitlines())


def test_list_in_doubt_says_why_a_held_row_has_no_tries(
    db_url: str, seeded: dict[str, int]
) -> None:
    """A row whose holder's lease ran out before a settle shows tries 0, and says why:
    its attempt is not counted until a verify finds the call."""
    _, *lines = ok(
        piped("list", "--in-doubt", "--status", "requesting", db=db_url)
    ).stdout.splitlines()
    rows = {line.split("\t")[2]: line.split("\t") for line in lines}
    assert list(rows) == ["k-doubt"]
    assert rows["k-doubt"][4] == "0"
    assert rows["k-doubt"][7] == "attempt 1 never settled: not counted until verified"
    ambiguous = ok(piped("list", "--in-doubt", "--status", "failed", db=db_url)).stdout
    assert "never settled" not in ambiguous, "a failed row's last error says what happened"
    shown = ok(denpyo_cli("show", str(seeded["k-doubt"]), db=db_url)).stdout
    assert "0 (attempt 1 never settled: not counted until verified)" in shown


def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    ids = {key: str(value) for key, value in seeded.items()}
    before = snapshot(db_url)
    cases: list[tuple[list[str], str]] = [
        (["show", "99999"], "no submission with id 99999"),
        (["show", "nonsense"], "neither an id"),
        (["show", "email:nope"], "no submission"),
        (["list", "--status", "bogus"], "unknown status"),
        (["list", "--since", "last tuesday"], "cannot read"),
        (["list", "--limit", "0"], "limit"),
        (["list", "--channel", "bad name!"], "channel name"),
        (["list", "--since", "1h", "--until", "2h"], "must be before"),
        (["retry", ids["k-ambiguous"]], "in doubt"),
        (["retry", ids["k-doubt"]], "in doubt"),
        (["retry", ids["k-rejected"]], "rejected"),
        (["retry", ids["k-ok"]], "synced"),
        (["retry", ids["k-failed"], ids["k-rejected"]], "rejected"),
        (["retry", ids["k-ambiguous"], "--force-in-doubt"], "note"),
        (["resolve", ids["k-failed"], "--abandon"], "note"),
        (["resolve", ids["k-failed"], "--abandon", "--note", " "], "note"),
        (["resolve", ids["k-ok"], "--abandon", "--note", "x"], "synced"),
        (
            ["resolve", ids["k-rejected"], "--mark-synced", "--remote-id", "m", "--note", "x"],
            "rejected to synced",
        ),
        (["resolve", ids["k-failed"], "--mark-synced", "--note", "x"], "remote-id"),
        (["resolve", ids["k-failed"], "--resend", "--note", "x", "--payload", "{bad"], "JSON"),
        (
            ["resolve", ids["k-failed"], "--resend", "--note", "x", "--payload", "@/nope.json"],
            "cannot read",
        ),
        (["resolve", ids["k-doubt"], "--resend", "--note", "x"], "in doubt"),
        (
            ["resolve", ids["k-failed"], "--abandon", "--note", "x", "--remote-id", "m"],
            "--remote-id goes with",
        ),
        (["show", "email:k-\udcff"], "'email:k-\\udcff' is not valid UTF-8 text"),
        (["resolve", ids["k-failed"], "--abandon", "--note", "\udcff"], "not valid UTF-8"),
        (["list", "--key-prefix", "k-\udcff"], "not valid UTF-8"),
    ]

    procs = run_all([args for args, _ in cases], db_url)
    for (args, text), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert text in proc.stderr, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stdout == "", (args, proc.stdout)
    assert snapshot(db_url) == before


def test_resend_refuses_a_payload_no_database_can_store(
    db_url: str, seeded: dict[str, int], tmp_path: Path
) -> None:
    """A corrected payload is checked like any other: exit 2, one line, nothing written."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"to": "café"}'.encode("latin-1"))
    resend = ["resolve", str(seeded["k-failed"]), "--resend", "--note", "fixed", "--payload"]
    cases = [
        ('{"to": "\\ud800"}', "lone surrogate"),
        ('{"to": "a\\u0000b"}', "NUL"),
        (f"@{deep}", "nested more than"),
        ("[" * 5_000 + "]" * 5_000, "nested more than"),
        (f"@{latin1}", "cannot read the payload file"),
    ]
    before = snapshot(db_url)
    procs = run_all([[*resend, payload] for payload, _ in cases], db_url)
    for (payload, text), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 2, (payload[:40], proc.stderr[-500:])
        assert text in proc.stderr and proc.stderr.startswith("error: "), proc.stderr[-500:]
        assert proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stderr[-500:]
    assert snapshot(db_url) == before


def test_usage_and_configuration_errors(tmp_path: Path) -> None:
    """Refusals that happen before any row is read: the same on every backend."""
    db = f"sqlite:///{tmp_path}/none.db"
    cases = [
        (
            ["--db", db, "list", "--limit", "many"],
            "error: Invalid value for '--limit': 'many' is not a valid integer. "
            "(see `denpyo list --help`)",
        ),
        (["--db", db, "nosuch"], "error: No such command 'nosuch'. (see `denpyo --help`)"),
        (["--db", db, "retry", "--status"], "(see `denpyo retry --help`)"),
        (["--db", db, "show"], "error: Missing argument"),
        (["--db", db, "retry"], "error: name the submissions"),
        (["--db", db, "retry", "1", "--channel", "email"], "error: name the submissions to retry"),
        (["--db", db, "resolve", "1"], "error: choose one of"),
        (["--db", db, "resolve", "1", "--abandon", "--resend", "--note", "n"], "choose one of"),
        (["--db", db, "resolve", "1", "--mark-synced", "--abandon", "--note", "n"], "choose one"),
        (["--db", db, "resolve", "1", "--abandon", "--remote-id", "m"], "error: --remote-id goes"),
        (["--db", db, "reconcile"], "error: reconcile needs the application's channels"),
        (["--db", db, "worker"], "error: the worker needs the application's channels"),
        (["--db", "nonsense", "status"], "error: not a database URL"),
        (["--db", "", "migrate"], "error: the database URL is empty"),
        (["--db", "x://y/z", "status"], "error: unsupported database"),
        (["--db", db, "--app", "m:x", "status"], "error: give --db or --app, not both"),
        (["--app", "nomodule_here:ledger", "status"], "error: --app 'nomodule_here:ledger'"),
        (["--app", "json:dumps", "status"], "not a denpyo.Ledger"),
        (["--app", "json", "status"], "expected module:attribute"),
    ]
    for (args, text), proc in zip(cases, run_all([a for a, _ in cases]), strict=True):
        assert proc.returncode == 2, (args, proc.stderr)
        assert text in proc.stderr, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "none.db").exists()  # nothing was even created


def test_an_app_module_that_fails_or_registers_nothing_is_one_line_and_exit_2(
    db_url: str, tmp_path: Path
) -> None:
    """Whatever a user's --app module raises while it is imported (exit 1 would read
    as "needs a person"), and a module whose ledger has no channel, said as such."""
    modules = {
        "app_name_error": "import denpyo\nledger = denpyo.Ledger()\nundefined_name\n",
        "app_syntax_error": "import denpyo\nledger = denpyo.Ledger(\n",
        "app_raises": 'raise RuntimeError("no config file\\nsecond line")\n',
        "app_exits": "import sys\nsys.exit(3)\n",
        "app_no_channel": "import os, denpyo\nledger = denpyo.Ledger(os.environ['DENPYO_DB'])\n",
        "app_zero_rate": "import os, denpyo\nledger = denpyo.Ledger(os.environ['DENPYO_DB'])\n"
        "ledger.channel('sms', fleet_rate_limit=0)(lambda sub: 'r')\n",
        "app_negative": "import os, denpyo\nledger = denpyo.Ledger(os.environ['DENPYO_DB'])\n"
        "ledger.channel('sms', fleet_concurrency=-2)(lambda sub: 'r')\n",
    }
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "DENPYO_DB": db_url}
    cases = [
        (["--app", "app_name_error:ledger", "status"], "NameError: name 'undefined_name'"),
        (["--app", "app_syntax_error:ledger", "list"], "SyntaxError"),
        (["--app", "app_raises:ledger", "worker"], "RuntimeError: no config file / second line"),
        (["--app", "app_exits:ledger", "status"], "SystemExit: 3"),
        (
            ["--app", "app_no_channel:ledger", "reconcile"],
            "module app_no_channel registered no channel with ledger ledger; reconcile needs",
        ),
        (
            ["--app", "app_no_channel:ledger", "worker"],
            "module app_no_channel registered no channel with ledger ledger; the worker needs",
        ),
        (
            ["--app", "app_zero_rate:ledger", "worker"],
            "channel 'sms': fleet_rate_limit must be positive calls/second, not 0",
        ),
        (
            ["--app", "app_negative:ledger", "pause", "sms", "--note", "x"],
            "channel 'sms': fleet_concurrency must be a whole number of at least 1, not -2",
        ),
    ]
    _refused_apps(cases, env)
    assert ok(denpyo_cli("--app", "app_no_channel:ledger", "status", env=env))


def test_a_channel_filter_naming_a_channel_with_no_rows_is_never_a_silent_nothing(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path}/typo.db"
    with denpyo.Ledger(db) as ledger:
        ledger.migrate()
        script_channel(ledger)
        ledger.submit("email", "k", {})
    (tmp_path / "typo_app.py").write_text(
        "import os, denpyo\nledger = denpyo.Ledger(os.environ['DENPYO_DB'])\n"
        "ledger.channel('email')(lambda sub: 'r')\nledger.channel('sms')(lambda sub: 'r')\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "DENPYO_DB": db}
    for command in (["list"], ["status"], ["retry", "--all", "--note", "n"]):
        refused = denpyo_cli("--app", "typo_app:ledger", *command, "--channel", "emial", env=env)
        assert refused.returncode == 2 and refused.stdout == "", (command, refused.stderr)
        assert refused.stderr == (
            "error: no channel named 'emial': the application registers email, sms; "
            "channels with rows: email\n"
        ), command
        noted = ok(denpyo_cli(*command, "--channel", "emial", "--json", db=db))
        assert "note: channel 'emial' has no rows (channels with rows: email)" in noted.stderr
        json.loads(noted.stdout)  # the note stays off the output scripts read
    registered = denpyo_cli("--app", "typo_app:ledger", "list", "--channel", "sms", env=env)
    assert "note:" not in ok(registered).stderr  # registered, no rows yet: nothing more to say


def test_retry_and_resolve_record_who_and_why(db_url: str, seeded: dict[str, int]) -> None:
    ids = {key: str(value) for key, value in seeded.items()}

    def cli(*args: str) -> Any:
        return as_json(denpyo_cli(*args, "--json", db=db_url))

    before = snapshot(db_url)
    plan = cli("retry", "--all", "--dry-run")
    assert [s["key"] for s in plan["retried"]] == ["k-failed"] and plan["dry_run"]
    assert snapshot(db_url) == before

    done = cli("retry", ids["k-failed"], "--by", "alice", "--note", "back up")
    assert done["retried"][0]["next_attempt_at"] is not None
    forced = cli("retry", ids["k-doubt"], "--force-in-doubt", "--note", "not at the provider")
    assert forced["retried"][0]["locked_until"] is None
    note = ["--note", "customer cancelled", "--by", "bob"]
    abandoned = cli("resolve", ids["k-ambiguous"], "--abandon", *note)
    assert abandoned["submission"]["resolution"] == "abandoned by operator:bob: customer cancelled"
    payload = ["--payload", '{"to": "fixed@example.com"}', "--note", "address fixed"]
    created = cli("resolve", "email:k-rejected", "--resend", *payload)["created"]
    assert created["key"] == "k-rejected~resend1"
    assert created["payload"] == {"to": "fixed@example.com"}
    assert created["supersedes"] == seeded["k-rejected"]
    people = ok(denpyo_cli("resolve", str(created["id"]), "--abandon", "--note", "no", db=db_url))
    assert "abandoned" in people.stdout
    with denpyo.Ledger(db_url) as ledger:
        retried = ledger.events(seeded["k-failed"])[-1]
        assert (retried.kind, retried.actor, retried.detail) == (
            "retry",
            "operator:alice",
            "back up",
        )
        assert ledger.events(seeded["k-doubt"])[-1].actor == f"operator:{getpass.getuser()}"
        assert ledger.events(seeded["k-ambiguous"])[-1].actor == "operator:bob"
        old = ledger.get_by_id(seeded["k-rejected"])
        assert old is not None and old.resolution is not None
        assert old.resolution.startswith(f"resent as #{created['id']}")
    found = ["--remote-id", "msg_42", "--note", "seen in the console"]
    synced = cli("resolve", ids["k-ambiguous"], "--mark-synced", *found)["submission"]
    assert (synced["status"], synced["remote_id"]) == ("synced", "msg_42")


def test_abandon_says_what_happened_to_the_row(db_url: str, seeded: dict[str, int]) -> None:
    """A `requesting` row given up becomes `failed`: the message says so, and why."""
    with denpyo.Ledger(db_url) as ledger:
        script_channel(ledger)
        waiting = ledger.enqueue("email", "k-waiting", {}).id
    note = ["--abandon", "--note", "customer cancelled"]
    doubt, never, failed, as_json_ = run_all(
        [
            ["resolve", str(seeded["k-doubt"]), *note],
            ["resolve", str(waiting), *note],
            ["resolve", str(seeded["k-failed"]), *note],
            ["resolve", str(seeded["k-rejected"]), *note, "--json"],
        ],
        db_url,
    )
    text = " ".join(ok(doubt).stdout.split())
    assert "moved from requesting to failed" in text and "may have arrived" in text, text
    assert "stays" not in text.replace("stays counted in doubt", "")
    text = " ".join(ok(never).stdout.split())
    assert "moved from requesting to failed (never sent)" in text, text
    assert "it stays failed" in " ".join(ok(failed).stdout.split())
    done = as_json(as_json_)
    assert (done["from_status"], done["submission"]["status"]) == ("rejected", "rejected")


def channel_changes(db_url: str, channel: str) -> list[tuple[str, str, str | None]]:
    with denpyo.Ledger(db_url) as ledger:
        return [(e.kind, e.actor, e.note) for e in ledger.store.channel_history(channel)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_pause_and_resume_a_channel_with_who_and_why(db_url: str) -> None:
    """`pause` and `resume` say what they did; `status` shows the paused channel on a
    line of its own (its note escaped), `--json` its state, and `status --channel`
    its latest changes; a second pause or resume says what holds and writes nothing."""
    with denpyo.Ledger(db_url) as ledger:
        script_channel(ledger)
        ledger.enqueue("email", "k1", {})
    note = "provider incident\x1b[2J INC-7"
    paused = ok(denpyo_cli("pause", "email", "--note", note, "--by", "alice", db=db_url))
    assert " ".join(paused.stdout.split()) == (
        "email paused by operator:alice: workers stop starting its calls within one poll "
        "interval; calls already sent finish"
    )
    assert paused.stderr == ""  # a channel with rows: nothing more to say
    people, as_json_, again = run_all(
        [["status"], ["status", "--json"], ["pause", "email", "--note", "me too", "--by", "bob"]],
        db_url,
    )
    shown = ok(people).stdout.splitlines()
    first = shown[1].rstrip()  # first, right under the database
    assert first == "Channels that start no call now", shown
    assert " ".join(shown[2].split()[:4]) == "email paused by operator:alice", shown
    assert shown[2].endswith(": provider incident\\x1b[2J INC-7"), shown
    assert "\x1b" not in people.stdout
    state = as_json(as_json_)["channel_states"]["email"]
    assert (state["mode"], state["paused_by"], state["note"]) == ("paused", "operator:alice", note)
    assert state["paused_at"] is not None and state["throttled_until"] is None
    text = " ".join(ok(again).stdout.split())
    assert text.startswith("email is already paused by operator:alice at "), text
    assert text.endswith(": provider incident\\x1b[2J INC-7; nothing written"), text
    assert channel_changes(db_url, "email") == [("paused", "operator:alice", note)]

    resumed = as_json(
        denpyo_cli("resume", "email", "--note", "fixed", "--by", "carol", "--json", db=db_url)
    )
    assert (resumed["changed"], resumed["by"], resumed["state"]["mode"]) == (
        True,
        "operator:carol",
        "active",
    )
    twice, shown, shown_json, status = run_all(
        [
            ["resume", "email", "--note", "again"],
            ["status", "--channel", "email"],
            ["status", "--channel", "email", "--json"],
            ["status"],
        ],
        db_url,
    )
    assert " ".join(ok(twice).stdout.split()) == "email is not paused (active); nothing written"
    history = [(e["kind"], e["actor"], e["note"]) for e in as_json(shown_json)["channel_history"]]
    assert history == [("resumed", "operator:carol", "fixed"), ("paused", "operator:alice", note)]
    assert history == channel_changes(db_url, "email")  # newest first
    table = ok(shown).stdout
    assert "channel email: latest changes" in table
    resumed_line = next(line for line in table.splitlines() if "resumed" in line)
    assert "operator:carol" in resumed_line and "fixed" in resumed_line
    assert "start no call" not in table and "start no call" not in ok(status).stdout  # running


def test_pause_and_resume_refuse_bad_input_and_write_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/pause.db"
    with denpyo.Ledger(db) as ledger:
        ledger.migrate()
        script_channel(ledger)
        ledger.enqueue("email", "k", {})
        ledger.channel("legacy")(lambda sub: "r")
        ledger.enqueue("legacy", "k", {})  # rows, but the application no longer has it
    (tmp_path / "pause_app.py").write_text(
        "import os, denpyo\nledger = denpyo.Ledger(os.environ['DENPYO_DB'])\n"
        "ledger.channel('email')(lambda sub: 'r')\nledger.channel('sms')(lambda sub: 'r')\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "DENPYO_DB": db}
    app = ["--app", "pause_app:ledger"]
    cases = [
        (["--db", db, "pause", "email"], "a note (--note) is required for a pause"),
        (["--db", db, "pause", "email", "--note", "  "], "a note (--note) is required"),
        (["--db", db, "resume", "email"], "a note (--note) is required for a resume"),
        (["--db", db, "pause", "bad name!", "--note", "x"], "channel name 'bad name!' must be"),
        (["--db", db, "pause", "nowhere"], "a note (--note) is required"),  # not the note: line
        (
            [*app, "pause", "emial", "--note", "x"],
            "no channel named 'emial': the application registers email, sms; channels with rows: "
            "email, legacy",
        ),
        ([*app, "resume", "emial", "--note", "x", "--json"], "no channel named 'emial'"),
        (
            [*app, "pause", "legacy", "--note", "x"],
            "no channel named 'legacy': the application registers email, sms",
        ),
    ]
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda case: denpyo_cli(*case[0], env=env), cases))
    for (args, text), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ") and text in proc.stderr, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stdout == "", (args, proc.stderr)
    with denpyo.Ledger(db) as ledger:
        assert ledger.store.channel_states() == []
        assert [
            ledger.store.channel_history(n) for n in ("email", "emial", "nowhere", "legacy")
        ] == [[], [], [], []]
    registered = ok(denpyo_cli(*app, "pause", "sms", "--note", "not yet", env=env))
    assert "sms paused by" in registered.stdout and registered.stderr == ""  # no rows, registered


def test_a_channel_with_no_rows_yet_may_be_paused_ahead(db_url: str) -> None:
    """Without --app, a channel with no rows may be a typo: the command goes on, and
    says so on stderr as a filter naming it does."""
    with denpyo.Ledger(db_url) as ledger:
        script_channel(ledger)
        ledger.enqueue("email", "k", {})
    people, scripted = run_all(
        [
            ["pause", "sms", "--note", "launch on Monday"],
            ["pause", "push", "--note", "x", "--json"],
        ],
        db_url,
    )
    said = "note: channel '{}' has no rows (channels with rows: email)\n"
    assert ok(people).stderr == said.format("sms")
    assert "sms paused by operator:" in people.stdout
    assert ok(scripted).stderr == said.format("push")
    assert json.loads(scripted.stdout)["state"]["mode"] == "paused"
    with denpyo.Ledger(db_url) as ledger:
        assert sorted(s.channel for s in ledger.store.channel_states()) == ["push", "sms"]


ROW_FILTERS = {
    "statuses",
    "channel",
    "in_doubt",
    "needs_person",
    "resolved",
    "since",
    "until",
    "key_prefix",
    "limit",
}


def test_retry_selects_rows_with_the_filters_of_list(db_url: str, seeded: dict[str, int]) -> None:
    """`retry ID… | --status … | --all`, as documented: every row filter of `list`,
    each meaning the same, and a filter that can only match rows a retry may not take
    is refused rather than matching nothing."""
    for name in ("list", "retry"):
        assert {p.name for p in main.every_command()[name].params} >= ROW_FILTERS, name
    listed, retry = (
        {p.name: p.opts for p in main.every_command()[n].params if p.name in ROW_FILTERS}
        for n in ("list", "retry")
    )
    assert listed == retry
    plans = [
        ["--status", "failed"],
        ["--status", "failed", "--needs-person", "--key-prefix", "k-f"],
        ["--status", "failed,requesting", "--in-doubt", "--force-in-doubt", "--note", "checked"],
        ["--channel", "email", "--since", "1h"],
        ["--all"],
    ]
    refused = [
        (["--status", "rejected"], "not rejected"),
        (["--status", "failed", "--in-doubt"], "--force-in-doubt"),
        (["--resolved"], "never retried"),
    ]
    procs = run_all(
        [["retry", *args, "--dry-run", "--json"] for args in plans]
        + [["retry", *args] for args, _ in refused],
        db_url,
    )
    keys = [sorted(s["key"] for s in as_json(proc)["retried"]) for proc in procs[: len(plans)]]
    assert keys == [
        ["k-failed"],
        ["k-failed"],
        ["k-ambiguous", "k-doubt"],
        ["k-failed"],
        ["k-failed"],
    ]
    for (args, text), proc in zip(refused, procs[len(plans) :], strict=True):
        assert proc.returncode == 2 and text in proc.stderr, (args, proc.stderr)
    done = as_json(
        denpyo_cli("retry", "--status", "failed", "--note", "back up", "--json", db=db_url)
    )
    assert [s["id"] for s in done["retried"]] == [seeded["k-failed"]]


@pytest.fixture
def app(db_url: str, tmp_path: Path) -> Iterator[tuple[dict[str, str], FakeProvider]]:
    """A user's module with a Ledger and an HTTP channel against a fake provider."""
    (tmp_path / "cli_test_app.py").write_text(APP)
    with FakeProvider(honour_idempotency=False) as provider:
        env = {
            "DENPYO_DATABASE_URL": db_url,
            "DENPYO_APP": "cli_test_app:ledger",
            "TEST_PROVIDER": provider.url,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        }
        yield env, provider


def test_reconcile_with_app(db_url: str, app: tuple[dict[str, str], FakeProvider]) -> None:
    env, provider = app
    with denpyo.Ledger(db_url) as ledger:
        arrived = in_doubt(ledger, "arrived", "idem-arrived")
        in_doubt(ledger, "lost", "idem-lost")
    with FakeProviderHttp(provider) as http:
        http.post("idem-arrived")
    logged = ok(denpyo_cli("reconcile", "--json", "-v", env=env))  # INFO: each pass, counted
    assert "reconcile pass: 2 rows in doubt taken to verify (email 2)" in logged.stderr
    assert "reconcile pass of 2 rows in doubt (email 2) done: synced 2" in logged.stderr
    summary = as_json(logged)
    assert summary == {
        "due": 2,
        "checked": 2,
        "synced": 2,
        "failed": 0,
        "rejected": 0,
        "requesting": 0,
        "errors": 0,
        "in_doubt_after": 0,
    }
    assert provider.stats().duplicates == 0 and provider.stats().distinct_keys == 2
    with denpyo.Ledger(db_url) as ledger:
        row = ledger.get_by_id(arrived)
        assert row is not None and row.remote_id == provider.accepted_ids_for("idem-arrived")[0]
    again = ok(denpyo_cli("reconcile", "--log-level", "debug", env=env))
    assert "checked" in again.stdout
    assert "reconcile pass: no row in doubt is due" in again.stderr
    quiet = ok(denpyo_cli("reconcile", env=env))  # WARNING: nothing to say
    assert "reconcile pass" not in quiet.stderr


def test_worker_runs_until_a_signal(
    db_url: str, backend: str, app: tuple[dict[str, str], FakeProvider]
) -> None:
    """SIGTERM (what a service manager sends) on PostgreSQL, Ctrl-C's SIGINT on SQLite:
    either stops claiming, lets the calls in flight settle, and exits 0."""
    env, provider = app
    stop = database_record(backend).stop_signal
    with denpyo.Ledger(db_url) as ledger:
        script_channel(ledger)  # to enqueue; the worker sends with the app's channel
        ids = [ledger.enqueue("email", f"w{i}", {"i": i}).id for i in range(5)]
    command = [sys.executable, "-m", "denpyo.cli", "worker", "--poll-interval", "0.05"]
    worker = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with denpyo.Ledger(db_url) as ledger:

            def synced() -> bool:
                rows = [ledger.get_by_id(i) for i in ids]
                return all(r is not None and r.status is denpyo.Status.SYNCED for r in rows)

            wait_until(synced, "the worker sending its rows", alive=lambda: worker.poll() is None)
        worker.send_signal(stop)
        _, stderr = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert "worker stopped" in stderr and "synced 5" in stderr
    assert provider.stats().distinct_keys == 5


class FakeProviderHttp:
    """Post one call to the provider directly, as a sender that crashed would have."""

    def __init__(self, provider: FakeProvider) -> None:
        self.provider = provider

    def __enter__(self) -> FakeProviderHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def post(self, idempotency_key: str) -> None:
        import urllib.request

        request = urllib.request.Request(
            self.provider.send_url,
            data=b"{}",
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


def test_prune(db_url: str) -> None:
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("c")(lambda sub: "r")
        ledger.submit("c", "old", {})
        ledger.enqueue("c", "open", {})
    assert as_json(denpyo_cli("prune", "--older-than", "90d", "--json", db=db_url))["deleted"] == 0
    assert as_json(denpyo_cli("prune", "--older-than", "0s", "--json", db=db_url))["deleted"] == 1
    bad = denpyo_cli("prune", "--older-than", "ninety days", db=db_url)
    assert bad.returncode == 2 and "duration" in bad.stderr
    with denpyo.Ledger(db_url) as ledger:
        old, still = ledger.get("c", "old"), ledger.get("c", "open")
        assert old is not None and old.removed_at is not None, "its key and outcome stay"
        assert still is not None and still.removed_at is None


def test_prune_and_archive_are_logged_and_have_a_dry_run(db_url: str, tmp_path: Path) -> None:
    """A dry run counts what would go and changes nothing; a prune and an archive are
    each an entry of the action log: who, the ages, how many rows went."""
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("c")(lambda sub: "r")
        for key in ("a", "b", "c"):
            ledger.submit("c", key, {})
        ledger.enqueue("c", "open", {})
    dry = as_json(denpyo_cli("prune", "--older-than", "0s", "--dry-run", "--json", db=db_url))
    assert (dry["dry_run"], dry["rows"]) == (True, 3)
    assert dry["counts"] == [{"channel": "c", "status": "synced", "rows": 3}]
    said = ok(denpyo_cli("prune", "--older-than", "0s", "--dry-run", db=db_url)).stdout
    assert "dry run: would remove 3 settled row(s) (older than 0s)" in said
    where = tmp_path / "not-written"
    dry = as_json(
        denpyo_cli(
            "archive", "--to", str(where), "--older-than", "0s", "--dry-run", "--json", db=db_url
        )
    )
    assert (dry["rows"], where.exists()) == (3, False)
    assert as_json(denpyo_cli("actions", "--json", db=db_url)) == []  # nothing written
    with denpyo.Ledger(db_url) as ledger:
        assert ledger.get("c", "a").removed_at is None  # type: ignore[union-attr]
    done = as_json(
        denpyo_cli(
            "prune",
            "--synced",
            "0s",
            "--by",
            "ops\x1b[2J",
            "--note",
            "monthly",
            "--json",
            db=db_url,
        )
    )
    assert done["deleted"] == 3
    archived = ok(
        denpyo_cli(
            "archive", "--to", str(tmp_path / "a"), "--older-than", "0s", "--by", "ada", db=db_url
        )
    )
    assert "(action #" in archived.stdout
    log = as_json(denpyo_cli("actions", "--json", db=db_url))
    assert [(r["kind"], r["by"], r["state"], r["rows"], r["done"]) for r in log] == [
        ("archive", "ada", "done", 0, 0),
        ("prune", "ops[2J", "done", 3, 3),
    ]
    assert log[1]["id"] == done["action"] and log[1]["note"] == "monthly"
    assert log[1]["target"] == "settled rows, synced 0s"
    assert log[1]["params"] == {"ages": {"synced": 0.0}}
    assert log[0]["params"]["to"] == str(tmp_path / "a")
    refused = denpyo_cli("prune", db=db_url)
    assert refused.returncode == 2 and "how old" in refused.stderr
    assert len(as_json(denpyo_cli("actions", "--json", db=db_url))) == 2  # a refusal: no entry


def test_prune_by_state_report_and_archive(db_url: str, tmp_path: Path) -> None:
    """Per-state ages, the report before and after, the archive, `show` of an
    archived key, and bad input: one line, exit 2, nothing removed."""
    with denpyo.Ledger(db_url) as ledger:
        ledger.channel("c")(lambda sub: "r")
        ledger.channel("p")(lambda sub: (_ for _ in ()).throw(denpyo.Rejected("no")))
        ledger.submit("c", "a", {})
        ledger.submit("c", "b", {})
        with contextlib.suppress(denpyo.SubmissionRejected):
            ledger.submit("p", "x", {})
    before = as_json(denpyo_cli("report", "--by", "day", "--json", db=db_url))
    assert {(r["channel"], r["status"], r["count"]) for r in before} == {
        ("c", "synced", 2),
        ("p", "rejected", 1),
    }
    for args, says in (
        (["prune", "--synced", "-1d"], "duration"),
        (["prune", "--bogus", "1d"], "No such option"),
        (["prune"], "how old"),
        (["report", "--by", "week"], "week"),
        (["archive", "--to", str(tmp_path / "f" / "x"), "--older-than", "0s"], "cannot write"),
        (["archive", "--to", "ftp://h/x", "--older-than", "0s"], "ftp"),
    ):
        if args[0] == "archive" and "cannot" in says:
            (tmp_path / "f").write_text("a file, not a folder")
        bad = denpyo_cli(*args, db=db_url)
        assert bad.returncode == 2, (args, bad.stderr)
        assert says in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    done = as_json(denpyo_cli("prune", "--synced", "0s", "--rejected", "1d", "--json", db=db_url))
    assert done["deleted"] == 2
    archived = denpyo_cli(
        "archive", "--to", str(tmp_path / "archive"), "--older-than", "0s", db=db_url
    )
    assert archived.returncode == 0 and "archived and removed 0 row(s)" in archived.stdout
    assert as_json(denpyo_cli("report", "--by", "day", "--json", db=db_url)) == before
    shown = denpyo_cli("show", "c:a", db=db_url)
    assert shown.returncode == 0 and "pruned" in shown.stdout
    table = denpyo_cli("report", db=db_url)
    assert table.returncode == 0 and "synced" in table.stdout


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
"""A provider's error page that retitles the terminal, clears it and prints a link."""


def test_stored_text_reaches_the_terminal_escaped(db_url: str) -> None:
    """A key, a provider's error and a note hold what others wrote: every command
    shows their control characters escaped (`\\x1b`, `\\n`), so that nothing stored
    retitles, clears or links the terminal, nor starts a line of its own; `--json`
    keeps them exact, as JSON escapes. A name given with `--by` is stored cleaned,
    without its control characters, and shown as stored."""
    key = "order:7\nINFO nothing needs attention\x1b[1;31m"
    with denpyo.Ledger(db_url) as ledger:

        def send(sub: denpyo.Submission) -> str:
            if sub.key == key:
                raise denpyo.Rejected(HOSTILE)
            raise denpyo.Transient(HOSTILE)

        ledger.channel("email", max_attempts=1)(send)
        ids = {}
        for k in (key, "k-failed"):
            with pytest.raises(denpyo.SubmissionError) as raised:
                ledger.submit("email", k, {"k": k, "at": "\x1b[2J\x9b2J"})
            ids[k] = str(raised.value.submission.id)
    rejected, failed = ids[key], ids["k-failed"]
    note = ["--note", "gave up\x1b]0;owned\x07\nINFO forged", "--by", "eve\x1b[2J"]
    resolved = ok(denpyo_cli("resolve", rejected, "--abandon", *note, db=db_url))
    procs = run_all(
        [
            ["list"],
            ["show", rejected],
            ["show", failed],
            ["status"],
            ["report"],
            ["retry", "--dry-run", failed],
            ["retry", "--dry-run", "--all"],
            ["retry", rejected],
        ],
        db_url,
    )
    listed, shown, shown_failed, status, report, dry_run, dry_run_all, refused = procs
    for proc in (resolved, *procs):
        assert not any(c in proc.stdout + proc.stderr for c in "\x1b\x07\x9b"), proc.args
    assert refused.returncode == 2 and "\\x1b]0;owned\\x07" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    for proc in procs[:-1]:
        ok(proc)
    escaped_key = "order:7\\nINFO nothing needs attention\\x1b[1;31m"
    escaped_error = "\\x1b]0;owned\\x07\\x1b[2J\\x1b]8;;http://evil.example\\x1b\\click"
    assert escaped_key in resolved.stdout
    _, *lines = listed.stdout.splitlines()
    assert len(lines) == 2 and all(len(line.split("\t")) == 8 for line in lines), lines
    assert escaped_key in listed.stdout and "\\x1b]0;owned\\x07\\x1b[2J" in listed.stdout
    assert not any(line.startswith("INFO") for line in listed.stdout.splitlines())
    for text in (escaped_key, escaped_error, "gave up\\x1b]0;owned\\x07\\nINFO forged"):
        assert text in shown.stdout, text
    # a name typed with `--by` is stored cleaned (no control character), shown as stored
    assert "operator:eve[2J" in shown.stdout and "operator:eve\\x1b" not in shown.stdout
    with denpyo.Ledger(db_url) as ledger:
        assert ledger.events(int(rejected))[-1].actor == "operator:eve[2J"
    assert "\\u001b[2J\\u009b2J" in shown.stdout  # the payload, as JSON writes it
    assert escaped_error in shown_failed.stdout
    assert "k-failed" in dry_run.stdout and "\\x1b]0;owned\\x07\\x1b[2J" in dry_run.stdout
    assert "k-failed" in dry_run_all.stdout
    assert "email" in status.stdout and "email" in report.stdout
    as_json_list, as_json_show = run_all([["list", "--json"], ["show", rejected, "--json"]], db_url)
    rows = {row["key"]: row for row in as_json(as_json_list)}
    assert rows[key]["last_error"].endswith(HOSTILE) and rows[key]["payload"]["at"] == (
        "\x1b[2J\x9b2J"
    )
    resolution = as_json(as_json_show)["submission"]["resolution"]
    assert resolution.startswith("abandoned by operator:eve[2J: ")
    assert resolution.endswith("\nINFO forged")
    for proc in (as_json_list, as_json_show):
        assert not any(c in proc.stdout for c in "\x1b\x07\x9b")


def test_stored_text_is_never_read_as_markup(db_url: str) -> None:
    """A remote id, a key or a note with square brackets is shown as written: `[/]`
    is no markup error, `[link=…]` no link."""
    link = "[link=http://evil.example]msg_123[/link]"
    keys = ("k-close", "k-link", "[bold]k-resent[/]")
    with denpyo.Ledger(db_url) as ledger:
        modes = script_channel(ledger, max_attempts=1)
        modes.update(dict.fromkeys(keys, "transient"))
        ids = {}
        for key in keys:
            with pytest.raises(denpyo.SubmissionError) as raised:
                ledger.submit("email", key, {})
            ids[key] = str(raised.value.submission.id)
    close, marked, resent = run_all(
        [
            ["resolve", ids["k-close"], "--mark-synced", "--remote-id", "[/]", "--note", "[/]"],
            ["resolve", ids["k-link"], "--mark-synced", "--remote-id", link, "--note", "x"],
            ["resolve", ids[keys[2]], "--resend", "--note", "[red]fixed[/red]"],
        ],
        db_url,
    )
    assert "(remote id [/])" in ok(close).stdout
    assert f"(remote id {link})" in ok(marked).stdout
    assert "[bold]k-resent[/]~resend1" in ok(resent).stdout
    shown_close, shown_link, shown_old = run_all(
        [["show", ids["k-close"]], ["show", ids["k-link"]], ["show", ids[keys[2]]]], db_url
    )
    for proc in (shown_close, shown_link, shown_old):
        assert ok(proc).stderr == "" and "Traceback" not in proc.stdout
    panel = [line.split()[1:4] for line in shown_close.stdout.splitlines()]
    assert ["remote", "id", "[/]"] in panel
    assert link in shown_link.stdout and "\x1b]8" not in shown_link.stdout
    assert "[bold]k-resent[/]~resend1" in shown_old.stdout
    assert "[red]fixed[/red]" in shown_old.stdout


def test_a_url_or_a_time_it_cannot_read_is_one_line_without_a_password(tmp_path: Path) -> None:
    """The driver's reasons included: exit 2, one line, no traceback, no password."""
    db = f"sqlite:///{tmp_path}/times.db"
    with denpyo.Ledger(db) as ledger:
        ledger.migrate()
    cases = [
        (["--db", "postgresql://u:SecretPw@127.0.0.1:99999/x", "status"], "malformed port"),
        (["--db", "mysql://u:SecretPw@127.0.0.1:abc/x", "status"], "malformed port"),
        (["--db", "postgresql://u:Secret%ZZPw@127.0.0.1/x", "status"], "percent-encoded"),
        (["--db", "postgresql://[::1", "status"], "Invalid IPv6 URL"),
        (["--db", "mysql://root@127.0.0.1:3306/x?charset=%ZZ", "list"], "unknown charset"),
        (["--db", db, "list", "--since", "0001-01-01"], "'0001-01-01'"),
        (["--db", db, "list", "--until", "9999-12-31T23:00-05:00"], "out of the range"),
    ]
    for (args, text), proc in zip(cases, run_all([a for a, _ in cases]), strict=True):
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert text in proc.stderr and "Secret" not in proc.stderr, (args, proc.stderr)


def test_app_takes_a_ledger_or_a_function_returning_one_and_calls_nothing_else(
    db_url: str, tmp_path: Path
) -> None:
    """`--app sys:exit` once ended `status --check` with exit 0: "fine"."""
    (tmp_path / "factories.py").write_text(
        "import os, sys, denpyo\n"
        "def make():\n    return denpyo.Ledger(os.environ['DENPYO_DB'])\n"
        "def nothing():\n    return None\n"
        "def leaves():\n    sys.exit(0)\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "DENPYO_DB": db_url}
    cases = [
        (["--app", "sys:exit", "status", "--check"], "is a builtin_function_or_method, not a"),
        (["--app", "factories:nothing", "status"], "nothing() returned a NoneType, not a"),
        (["--app", "factories:leaves", "status", "--check"], "leaves() raised SystemExit: 0"),
        (["--app", "factories:denpyo.Ledger", "status"], "is a type, not a denpyo.Ledger"),
    ]
    _refused_apps(cases, env)
    assert ok(denpyo_cli("--app", "factories:make", "status", "--check", env=env))


def _refused_apps(cases: list[tuple[list[str], str]], env: dict[str, str]) -> None:
    """Each `--app` case is refused: exit 2, one line naming what it found, nothing on stdout."""
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda case: denpyo_cli(*case[0], env=env), cases))
    for (args, text), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: --app ") and text in proc.stderr, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stdout == "", (args, proc.stderr)


def test_a_password_in_any_form_is_never_printed(postgres_url: str) -> None:
    """In the user's part, the query string (`password`, `passwd`) or a libpq key/value
    string; whether the server takes it (this one trusts: the password is not even
    needed), refuses it, or cannot be reached."""
    base, _, name = postgres_url.rpartition("/")
    server = base.partition("://")[2].rpartition("@")[2]
    cases = [
        [f"postgresql://{server}/{name}?user=postgres&password=S3cretQ", "status"],
        [f"postgresql://postgres:S3cretQ@{server}/{name}", "status", "--json"],
        [f"postgresql://{server}/no_such_db?user=postgres&password=S3cretQ", "status"],
        ["postgresql://u:S3cretQ@127.0.0.1:1/x?connect_timeout=5", "status"],
        ["postgresql://127.0.0.1:1/x?user=u&password=S3cretQ&connect_timeout=5", "status"],
        ["postgresql://u@127.0.0.1:1,127.0.0.1:2/x?sslpassword=S3cretQ", "status"],
        ["mysql://root@127.0.0.1:3306/test?password=S3cretQ", "status"],
        ["mysql://root@127.0.0.1:3306/test?passwd=S3cretQ", "status"],
        ["mysql://root:S3cretQ@127.0.0.1:3306/test", "status"],
        ["mysql://root:S3cretQ@127.0.0.1:1/test", "status"],
        ["host=127.0.0.1 dbname=x user=postgres password=S3cretQ", "status"],
        ["host=127.0.0.1 dbname=x password='S3cretQ two' user=postgres", "status"],
    ]
    procs = run_all([["--db", *case] for case in cases])
    assert procs[0].returncode == 0 and "***" in procs[0].stdout, procs[0].stderr
    for case, proc in zip(cases, procs, strict=True):
        assert "S3cretQ" not in proc.stdout + proc.stderr, (case, proc.stdout, proc.stderr)
        assert proc.returncode == 0 or "Traceback" not in proc.stderr, (case, proc.stderr)
