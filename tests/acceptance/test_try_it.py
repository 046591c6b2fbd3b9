"""The guide's "Try it against the fake provider", run as a reader runs it: its
`shop.py` written out, its shell session line by line, in a fresh folder."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from doc_pages import named, summary
from waiting import wait_until

PORT = 8765  # the fake provider's default, which the page's commands use


def test_the_fake_provider_session_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.fail("the page's session uses curl: install it")
    code = named("guide/using.md", "try")
    (tmp_path / "shop.py").write_text(code["shop"])
    lines = [line for line in code["session"].splitlines() if not line.startswith("#")]
    start, *steps, stop = lines
    assert start.split("#")[0].strip().endswith("&") and stop == "kill %1"
    # `python` and `denpyo` as a reader's activated virtualenv has them
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable),
                                                   os.environ["PATH"]])}  # fmt: skip
    provider = subprocess.Popen(
        shlex.split(start.split("&")[0]), cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for_port(PORT)
        said = {}
        for step in steps:
            done = subprocess.run(step, shell=True, cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert done.returncode == 0, (step, done.stdout, done.stderr)
            said[step.split("#")[0].strip()] = done.stdout
    finally:
        provider.terminate()
        provider.wait(10)
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


def _wait_for_port(port: int) -> None:
    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(listening, f"something listening on {port}", every=0.1)
