"""The commands of "Personal data" (docs/guide/personal-data.md) run as printed, in
a fresh folder, on the command line's default ledger (./denpyo.db): a new key,
and the three forgets over rows a test wrote first."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import denpyo
from doc_pages import commands, named, run_session

PAGE = "guide/personal-data.md"
KEY = "@@@ key: "


def test_a_new_key_is_printed_and_exported(tmp_path: Path) -> None:
    steps = commands(named(PAGE, "personal")["new-key"])
    outputs = run_session(tmp_path, steps, end=f'echo "{KEY}$DENPYO_PAYLOAD_KEYS"')
    printed = outputs[0][1].strip()
    assert len(base64.urlsafe_b64decode(printed)) == 32, printed
    exported = re.search(rf"{KEY}(\S+)", outputs[-1][1])
    assert exported is not None and len(base64.urlsafe_b64decode(exported.group(1))) == 32


def test_the_forgets_erase_the_payloads_they_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'denpyo.db'}"
    with denpyo.Ledger(url) as ledger:
        ledger.migrate()
        for channel in ("invoice-email", "billing"):
            ledger.channel(channel)(lambda sub: "msg")
        ledger.submit("invoice-email", "order:42", {"to": "ann@example.com"})
        ledger.submit("invoice-email", "order:43", {"to": "ann@example.com"})
        ledger.submit("billing", "inv:1", {"customer": {"email": "ann@example.com"}})
    steps = commands(named(PAGE, "personal")["forget"])
    said = [text for _, text in run_session(tmp_path, steps, env={"DENPYO_DATABASE_URL": None})]
    assert said[0].startswith("forgot the payloads of 1 live row(s)"), said[0]
    assert said[1].startswith("would forget the payloads of 1 live row(s)"), said[1]
    assert "#2 (invoice-email:order:43)" in said[1]
    assert said[2].startswith("forgot the payloads of 1 live row(s)"), said[2]
    with denpyo.Ledger(url) as ledger:
        forgotten = {
            key: ledger.get(channel, key)
            for channel, key in [
                ("invoice-email", "order:42"),
                ("invoice-email", "order:43"),
                ("billing", "inv:1"),
            ]
        }
    assert {
        key: sub is not None and sub.forgotten_at is not None for key, sub in forgotten.items()
    } == {
        "order:42": True,
        "order:43": False,
        "inv:1": True,
    }
