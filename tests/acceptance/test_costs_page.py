"""The costs page (docs/costs.md) quotes what `bench/costs.py` printed: the command
runs here in its quick mode (20 rows) on every database, so that it cannot rot, and
every line the page quotes has the form of a line it prints (numbers aside, never
their values); the page's tables quote those lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from doc_pages import named

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def form(line: str) -> str:
    """A line with its numbers left open: the pattern every run's line matches."""
    parts = NUMBER.split(line)
    return r"\d+(?:[.,]\d+)*".join(re.escape(part) for part in parts)


def quoted(backend: str) -> list[str]:
    """The lines the page quotes for `backend`, without the command."""
    code = named("costs.md", "costs")[backend]
    return [line for line in code.splitlines() if line and not line.startswith("$ ")]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_the_page_quotes_what_the_command_prints(backend: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/costs.py"), "--backend", backend, "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    lines = quoted(backend)
    assert len(lines) == len(printed), (lines, printed)
    for line, said in zip(lines, printed, strict=True):
        assert re.fullmatch(form(line), said), (line, said)


def test_the_tables_quote_the_command_s_lines() -> None:
    page = (ROOT / "docs/costs.md").read_text()
    columns = {"SQLite": "sqlite", "PostgreSQL": "postgresql", "MariaDB": "mysql"}
    values = {
        backend: dict(line.split(": ", 1) for line in quoted(backend)[1:])
        for backend in columns.values()
    }
    header = re.search(r"^\| figure \| what it counts \|(.*)\|$", page, re.M)
    assert header is not None
    names = [columns[cell.strip()] for cell in header.group(1).split("|")]
    checked = 0
    for label, cells in re.findall(r"^\| ([a-zA-Z ]+) \| [^|]+ \|(.*)\|$", page, re.M):
        if label == "figure":
            continue
        for backend, cell in zip(names, cells.split("|"), strict=True):
            assert cell.strip() == values[backend][label], (label, backend)
            checked += 1
    assert checked == 21
    for step, label in (
        ("remembering the keys (no lock)", "partition drop, remembering the keys"),
        ("the drop itself (its lock held)", "partition drop, the drop itself (lock held)"),
    ):
        seconds = values["postgresql"][label].split()[0]
        assert f"| {step} | {seconds} |" in page
