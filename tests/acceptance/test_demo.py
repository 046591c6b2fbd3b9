"""`denpyo demo`, as the README runs it: senders really killed with SIGKILL, and the
figures it prints checked against what the providers recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BLOCKED = ("aiohttp", "yarl")


def without_aiohttp(tmp_path: Path) -> dict[str, str]:
    """An environment where aiohttp and yarl cannot be imported, as after `pip install
    denpyo` (the core): modules of their names that raise ImportError, first on the
    path of the demo and of the senders it starts."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in BLOCKED:
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not installed')\n")
    path = os.pathsep.join(filter(None, [str(blocked), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path}


@pytest.mark.parametrize("installed", ["with aiohttp", "the core alone"])
def test_demo_tells_the_story_and_its_counts_match_the_provider(
    tmp_path: Path, installed: str
) -> None:
    env = {**os.environ, "COLUMNS": "120"}
    if installed == "the core alone":
        env |= without_aiohttp(tmp_path)
    workdir = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "demo", "--json", "--dir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    n = r["orders"]
    assert n == 200

    # The naive way lies: the provider sent more than the table says...
    assert 0 < r["naive_table"] < r["provider_naive"] < n
    assert r["naive_lost"] == r["provider_naive"] - r["naive_table"]
    # ...and "resend whatever the table lacks" emails those customers twice,
    assert r["naive_resent"] == n - r["naive_table"]
    assert r["duplicates_after_resend"] == r["naive_lost"] > 0
    # while the table ends up looking perfect.
    assert r["naive_table_after"] == n

    # denpyo, killed the same way: nothing sent is unrecorded; the doubt is in plain sight.
    assert r["denpyo_sent_unrecorded"] == 0
    assert r["in_doubt_found"] >= 1
    assert r["denpyo_synced_after_kill"] + r["in_doubt_found"] == r["denpyo_rows_after_kill"]
    assert r["resolved_by_verify"] + r["resent_after_verify"] == r["in_doubt_found"]
    assert r["resolved_by_verify"] >= 1  # the kill lands after the provider accepted
    # Every order ends synced exactly once, and the counts match the provider's.
    assert r["resubmitted_calls"] == n - r["denpyo_rows_after_kill"]
    assert r["denpyo_synced"] == r["provider_denpyo"] == n
    assert r["provider_denpyo_duplicates"] == 0
    assert r["remote_ids_matching"] == n

    # The files stay where --dir put them, with the senders' logs (empty: no crash
    # other than the kill) and the ledger that the SQL on screen ran against.
    assert (workdir / "app.db").exists()
    assert (workdir / "naive-sender.log").read_text() == ""
    assert (workdir / "denpyo-sender.log").read_text() == ""


def test_demo_for_people_prints_each_figure_with_its_sql(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "demo", "--orders", "40", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in (
        "1. The naive way",
        "2. The denpyo way",
        "3. denpyo reconcile",
        "SELECT COUNT(*) FROM invoice_emails",
        "SELECT COUNT(*) FROM denpyo_submissions WHERE status = 'synced'",
        "side by side",
        "none twice",
    ):
        assert text in out, text
    again = subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "demo", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2 and "give an empty folder" in again.stderr


def test_demo_piped_keeps_its_lines_to_a_page_width(tmp_path: Path) -> None:
    """`make demo > demo.txt`: no terminal and no COLUMNS. Piped commands get 1,000
    columns so that wide tables keep their rows whole; the story's rules and prose
    must not fill all of them, and read as they do on a roomy terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "demo", "--orders", "20", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rules = [line for line in lines if line.startswith(("1. The naive way", "side by side"))]
    assert len(rules) == 2 and all(rule.endswith("───") for rule in rules), rules
    tables = "┏┃┡│└━┗┣┠┌├"  # a table row is as wide as its cells, whatever the console
    too_wide = [line for line in lines if len(line) > 100 and not line.startswith(tuple(tables))]
    assert not too_wide, too_wide
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "none twice" in proc.stdout
