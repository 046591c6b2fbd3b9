"""The code blocks of "Using it" (docs/guide/using.md) run as a reader runs them:
each written to the file its first line names, run by `python` in a fresh folder,
against a fake provider (on a free port instead of the page's 8765), on SQLite as
printed and on PostgreSQL (the page's "or postgresql://…")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from denpyo.testing import FakeProvider
from doc_pages import named

PAGE = "guide/using.md"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> str | None:
    """None: the page's SQLite file as printed; else a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


def _run(folder: Path, name: str, database: str | None) -> tuple[str, FakeProvider]:
    """Run the page's block `name` as its own file; what it printed, and the provider."""
    code = named(PAGE, "using")[name]
    file = re.match(r"# (\S+\.py)", code)
    assert file is not None, code
    provider = FakeProvider(port=0).start()
    code = code.replace("http://127.0.0.1:8765", provider.url)
    if database is not None:
        code = code.replace('"sqlite:///app.db"', repr(database))
    (folder / file.group(1)).write_text(code)
    try:
        done = subprocess.run(
            [sys.executable, file.group(1)],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        provider.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert (folder / "app.db").exists() == (database is None)
    return done.stdout, provider


def test_the_first_example_sends_one_email(tmp_path: Path, database: str | None) -> None:
    printed, provider = _run(tmp_path, "first", database)
    assert re.fullmatch(r"synced msg_\w+\n", printed), printed
    assert provider.stats().accepted == 1


def test_a_channel_of_your_own_sends_and_verifies(tmp_path: Path, database: str | None) -> None:
    pytest.importorskip("httpx")
    printed, provider = _run(tmp_path, "own-channel", database)
    assert re.fullmatch(r"synced Delivered\(remote_id='msg_\w+'\)\n", printed), printed
    assert (provider.stats().accepted, provider.stats().lookups) == (1, 1)
