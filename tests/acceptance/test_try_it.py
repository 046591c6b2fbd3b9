"""The guide's "Try it against the fake provider", run as a reader runs it: its
`shop.py` written out, its shell session in one bash, in a fresh folder, with the
provider on a free port instead of 8765; nothing added (the page's own `wait`
line waits for the provider)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import free_port
from doc_pages import commands, named, run_session, summary


def test_the_fake_provider_session_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.fail("the page's session uses curl: install it")
    code = named("guide/using.md", "try")
    port = str(free_port())
    (tmp_path / "shop.py").write_text(code["shop"].replace("8765", port))
    steps = [step.replace("8765", port) for step in commands(code["session"])]
    assert steps[0].endswith("&") and steps[-1] == "kill %1", steps
    outputs = run_session(tmp_path, steps, end='wait; echo "@@@ all ended"')
    assert "@@@ all ended" in outputs[-1][1], outputs[-1]  # the page stopped what it started
    said = {step.replace(port, "8765"): text for step, text in outputs}
    assert said["python shop.py order:1"].strip() == "synced"
    assert "in doubt" in said["python shop.py order:2"]
    assert "order:2" in said["denpyo --app shop:ledger list --in-doubt"]
    # the row is due once its back-off is over (the page's `sleep 1`): reconcile
    # verified it, found it at the provider, and left nothing in doubt
    reconciled = said["denpyo --app shop:ledger reconcile"]
    assert summary(reconciled, "checked") == 1, reconciled
    assert summary(reconciled, "synced (found at the provider, or resent)") == 1, reconciled
    assert summary(reconciled, "in doubt now, all channels") == 0, reconciled
    stats = json.loads(said["curl -s localhost:8765/stats"])
    assert (stats["accepted"], stats["duplicates"]) == (2, 0), stats
