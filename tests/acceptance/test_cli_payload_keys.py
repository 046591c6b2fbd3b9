"""The command line with payloads encrypted at rest, each command in a subprocess:
`show` and `list --json` decrypt with the keys of DENPYO_PAYLOAD_KEYS and show a
placeholder without them, a malformed key is one line and exit 2 with nothing
written, and `rotate-key` makes a key, re-encrypts, and says what it could not."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

import pytest

import denpyo
from denpyo.store.sealing import key_id

KEY_A, KEY_B, KEY_C = (denpyo.new_payload_key() for _ in range(3))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The commands are the same code on every database (the integration tests run the
    store's side on all three)."""
    return str(request.param)


def kid(key: str) -> str:
    return key_id(base64.urlsafe_b64decode(key))


def cli(*args: str, db: str, keys: str | None) -> subprocess.CompletedProcess[str]:
    """`denpyo --db DB ARGS`, with DENPYO_PAYLOAD_KEYS set to `keys` (None: unset)."""
    env = {name: value for name, value in os.environ.items() if name != "DENPYO_PAYLOAD_KEYS"}
    if keys is not None:
        env["DENPYO_PAYLOAD_KEYS"] = keys
    command = [sys.executable, "-m", "denpyo.cli", "--db", db, *args]
    return subprocess.run(
        command, capture_output=True, text=True, env={**env, "COLUMNS": "200"}, timeout=120
    )


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ")
    return proc.stderr


def stored(db_url: str) -> list[Any]:
    """Every row and its history as the store reads them (payloads as stored)."""
    from denpyo.domain.filters import Filter

    with denpyo.Ledger(db_url, payload_key=[KEY_A, KEY_B, KEY_C]) as ledger:
        return [
            (sub, ledger.events(sub.id))
            for sub in ledger.store.list_submissions(Filter(limit=1000))
        ]


def test_show_and_list_decrypt_with_the_key_and_show_a_placeholder_without(db_url: str) -> None:
    with denpyo.Ledger(db_url, payload_key=KEY_A) as ledger:
        ledger.channel("email")(lambda sub: "r")
        sub = ledger.enqueue("email", "order:1", {"to": "ada@example.com"})
    ref = str(sub.id)
    shown = as_json(cli("show", ref, "--json", db=db_url, keys=f"{KEY_B},{KEY_A}"))
    assert shown["submission"]["payload"] == {"to": "ada@example.com"}
    [row] = as_json(cli("list", "--json", db=db_url, keys=KEY_A))
    assert row["payload"] == {"to": "ada@example.com"}
    text = cli("show", ref, db=db_url, keys=KEY_A)
    assert text.returncode == 0 and "ada@example.com" in text.stdout

    placeholder = f"[encrypted with key {kid(KEY_A)}: not available]"
    for keys in (None, KEY_B):
        [row] = as_json(cli("list", "--json", db=db_url, keys=keys))
        assert row["payload"] == placeholder and row["status"] == "requesting"
        shown = as_json(cli("show", ref, "--json", db=db_url, keys=keys))
        assert shown["submission"]["payload"] == placeholder
        assert [event["kind"] for event in shown["events"]] == ["created"]
        text = cli("show", ref, db=db_url, keys=keys)
        assert text.returncode == 0 and placeholder in text.stdout
        assert "ada@example.com" not in text.stdout


def test_a_malformed_key_is_one_line_exit_2_and_nothing_written(db_url: str) -> None:
    with denpyo.Ledger(db_url, payload_key=KEY_A) as ledger:
        ledger.channel("email")(lambda sub: "r")
        ledger.enqueue("email", "order:1", {"to": "ada@example.com"})
    before = stored(db_url)
    said = one_line_exit_2(cli("list", db=db_url, keys="nonsense"))
    assert "DENPYO_PAYLOAD_KEYS" in said and "not a key" in said and "nonsense" not in said
    said = one_line_exit_2(cli("rotate-key", db=db_url, keys=f"{KEY_B},{KEY_A[:20]}"))
    assert "key 2 of 2" in said and KEY_A[:20] not in said
    assert stored(db_url) == before


def test_a_malformed_key_leaves_an_empty_database_empty(empty_url: str) -> None:
    one_line_exit_2(cli("migrate", db=empty_url, keys="nonsense"))
    if empty_url.startswith("sqlite"):
        assert not os.path.exists(empty_url.removeprefix("sqlite:///"))  # not even the file
        return
    with denpyo.Ledger(empty_url) as ledger:
        assert ledger.store.schema_version() == 0


def test_rotate_key_makes_a_key_re_encrypts_and_says_what_it_could_not(db_url: str) -> None:
    made = cli("rotate-key", "--new-key", db=db_url, keys=None)
    assert made.returncode == 0 and len(base64.urlsafe_b64decode(made.stdout.strip())) == 32
    one_line_exit_2(cli("rotate-key", "--new-key", "--channel", "email", db=db_url, keys=None))
    said = one_line_exit_2(cli("rotate-key", db=db_url, keys=None))
    assert "DENPYO_PAYLOAD_KEYS" in said

    with denpyo.Ledger(db_url) as clear:
        clear.channel("email")(lambda sub: "r")
        clear.enqueue_many("email", [(f"old{n}", {"n": n}) for n in range(3)])
    with denpyo.Ledger(db_url, payload_key=KEY_A) as ledger:
        ledger.channel("email")(lambda sub: "r")
        ledger.enqueue_many("email", [(f"a{n}", {"n": n}) for n in range(4)])

    done = as_json(cli("rotate-key", "--batch", "2", "--json", db=db_url, keys=f"{KEY_B},{KEY_A}"))
    assert (done["kid"], done["reencrypted"], done["from_clear"]) == (kid(KEY_B), 7, 3)
    assert (done["current"], done["unreadable"], done["batches"], done["complete"]) == (
        0,
        0,
        4,
        True,
    )
    again = cli("rotate-key", db=db_url, keys=KEY_B)
    assert again.returncode == 0
    assert f"key {kid(KEY_B)}: 0 re-encrypted (0 of them were in clear), 7 already current" in (
        again.stdout
    )

    with denpyo.Ledger(db_url, payload_key=KEY_C) as other:
        other.channel("email")(lambda sub: "r")
        lost = other.enqueue("email", "lost", {"n": "c"})
    partly = cli("rotate-key", db=db_url, keys=KEY_B)
    assert partly.returncode == 1, partly.stderr
    assert f"unreadable #{lost.id} email:lost: key {kid(KEY_C)} not available" in partly.stdout
    [row] = as_json(cli("list", "--json", "--key-prefix", "lost", db=db_url, keys=KEY_C))
    assert row["payload"] == {"n": "c"}  # left as it was
