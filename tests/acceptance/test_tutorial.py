"""The tutorial (docs/tutorial/crash-recovered.md), run as written: shop.py is
written from the page's Python block, and every shell line of the page runs in
order in one bash, in a fresh folder, with the provider on a free port instead of
8765. The install lines are left out (this environment has `denpyo[http]`), and
the provider is waited for once started, as a reader would.

Where the kill lands varies from run to run; the page says so, and shows one
run's figures. What the page says holds in every run is checked here: the rows
add up, the provider's counts are the ledger's, every row in doubt is looked up
once and settled, nothing is sent twice."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import free_port
from doc_pages import blocks

PAGE = "tutorial/crash-recovered.md"
SKIPPED = ("python -m venv", "pip install")
MARK = "@@@ command "


def write_script(folder: Path, port: int) -> list[str]:
    """Write the page's files and its shell lines (as one script, each line after a
    marker) into `folder`; returns the commands, in order."""
    commands: list[str] = []
    lines = []
    for block in blocks(PAGE):
        code = block.code.replace("8765", str(port))
        if block.language == "python":
            name = re.match(r"# (\S+\.py)\n", code)
            assert name is not None, code
            (folder / name.group(1)).write_text(code)
        elif block.language == "sh":
            for line in code.splitlines():
                command = line.split("  #")[0].strip()
                if not command or command.startswith(("#", *SKIPPED)):
                    continue
                commands.append(command)
                lines += [f"echo '{MARK}{len(commands) - 1}'", command]
                if "denpyo.testing" in command and command.endswith("&"):
                    lines.append(
                        f"until curl -sf localhost:{port}/stats >/dev/null; do sleep 0.1; done"
                    )
    lines.append("kill $(jobs -p) 2>/dev/null; wait")  # the provider, started in the background
    (folder / "tutorial.sh").write_text("\n".join(lines) + "\n")
    return commands


def run(folder: Path, commands: list[str]) -> list[tuple[str, str]]:
    """Each command with what it printed (stdout and stderr)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(
        ["bash", "tutorial.sh"], cwd=folder, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    parts = re.split(rf"\n?{MARK}(\d+)\n", out)
    assert len(parts) == 2 * len(commands) + 1, out
    return [(commands[int(i)], text) for i, text in zip(parts[1::2], parts[2::2], strict=True)]


def table_row(output: str, label: str) -> dict[str, int]:
    """A row of a table `denpyo status` prints, by column name."""
    header = re.search(r"^┃(.*)┃$", output, re.M)
    row = re.search(rf"^│ {label} +│(.*)│$", output, re.M)
    assert header is not None and row is not None, output
    names = [cell.strip() for cell in header.group(1).split("┃")][1:]
    return dict(zip(names, (int(cell) for cell in row.group(1).split("│")), strict=True))


def summary(output: str, label: str) -> int:
    """A line of the summary `denpyo reconcile` prints."""
    found = re.search(rf"^│ {re.escape(label)} +│ +(\d+) │$", output, re.M)
    assert found is not None, output
    return int(found.group(1))


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    commands = write_script(tmp_path, free_port())
    outputs = run(tmp_path, commands)

    def printed(prefix: str) -> list[str]:
        return [text for command, text in outputs if command.startswith(prefix)]

    status = printed("denpyo --app shop:ledger status")
    stats = [json.loads(text) for text in printed("curl -s localhost")]
    sql = printed("sqlite3 shop.db")
    assert len(status) == 2 and len(stats) == 2 and len(sql) == 2, outputs

    # 2. "requesting 100: each row written before any call"
    before = table_row(status[0], "all")
    assert before["requesting"] == before["total"] == 100

    # 3. killed mid-flight: the split varies; it adds up, and the provider agrees
    after = table_row(status[1], "all")
    synced, in_doubt = after["synced"], after["requesting"]
    assert synced + in_doubt == 100 and in_doubt > 0, status[1]
    assert stats[0]["accepted"] >= synced and stats[0]["duplicates"] == 0, stats[0]
    arrived_unanswered = stats[0]["accepted"] - synced

    # 4. after the lease: each of the rest in doubt, looked up once, settled
    [listed] = printed("denpyo --app shop:ledger list --in-doubt")
    rows = [line for line in listed.splitlines() if "\tinvoice-email\t" in line]
    assert len(rows) == in_doubt and all("requesting in doubt" in row for row in rows), listed
    [reconciled] = printed("denpyo --app shop:ledger reconcile")
    assert summary(reconciled, "checked") == in_doubt
    assert summary(reconciled, "synced (found at the provider, or resent)") == in_doubt
    final = stats[1]
    assert final["accepted"] == final["distinct_keys"] == 100, final
    assert final["duplicates"] == 0 and final["lookups"] == in_doubt, final

    # the SQL: as the page shows, but for the figures that depend on the kill
    assert sql[0].split() == ["synced|100"]
    events = Counter({kind: int(n) for kind, n in (line.split("|") for line in sql[1].split())})
    assert events["created"] == 100
    assert events["settle"] + events["verify"] == 100
    assert events["verify"] == arrived_unanswered
    assert events["attempt"] == 100 + in_doubt - arrived_unanswered
    [shown] = [b.code for b in blocks(PAGE) if b.language == "text"]
    assert {"synced|100", "created|100", "settle|100"} <= set(shown.split())
