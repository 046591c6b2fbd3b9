"""The tutorial (docs/tutorial/crash-recovered.md), run as written: shop.py is
written from the page's Python block, and every shell line of the page runs in
order in one bash, in a fresh folder, with the provider on a free port instead of
8765. The folder and install lines are left out (this environment has
`denpyo[http]`); nothing is added: the page's own `wait` lines wait for the
provider, and for its twentieth call before the kill. The page's last line must
stop the provider.

Where the kill lands varies from run to run; the page says so, and shows one
run's figures. What the page says holds in every run is checked here: the rows
add up, the provider's counts are the ledger's, every row in doubt is looked up
once and settled, nothing is sent twice."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from conftest import free_port
from doc_pages import blocks, commands, run_session, summary, table_row

PAGE = "tutorial/crash-recovered.md"
SKIPPED = ("mkdir shop", "python3 -m venv", "pip install")
STOPPED = "@@@ provider ended: "


def write_files(folder: Path, port: int) -> list[str]:
    """Write the page's Python files into `folder`; returns its shell commands, in
    order, with the provider on `port`."""
    steps: list[str] = []
    for block in blocks(PAGE):
        code = block.code.replace("8765", str(port))
        if block.language == "python":
            name = re.match(r"# (\S+\.py)\n", code)
            assert name is not None, code
            (folder / name.group(1)).write_text(code)
        elif block.language == "sh":
            steps += commands(code, SKIPPED)
    return steps


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    steps = write_files(tmp_path, free_port())
    # The page's `kill $PROVIDER` ended it: `wait` returns at once, with its status.
    outputs = run_session(tmp_path, steps, end=f'wait $PROVIDER; echo "{STOPPED}$?"')

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
    assert stats[0]["accepted"] >= 20, stats[0]  # `wait --accepted 20`, then the kill
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

    # 5. the provider stopped by the page's own last line: `wait` returned (the
    # provider exits 0 on SIGTERM); had it run on, the script would not have ended
    assert steps[-1] == "kill $PROVIDER", steps[-1]
    assert f"{STOPPED}0" in outputs[-1][1], outputs[-1]
