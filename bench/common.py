"""What every benchmark child shares: the context, the job, and the one HTTP call.

Every peer makes exactly the same call with exactly the same client: a JSON
POST of the job's payload to the loopback provider's ``/send`` with an
``Idempotency-Key`` header, through one shared ``aiohttp.ClientSession``, and
reads the provider's id from the reply.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CONNECTION_LIMIT = 2048
"""Connections per session (aiohttp's default is 100): above any number of calls in
flight measured, so that the session never caps them (256 at 200 ms: section 1)."""


@dataclass
class Ctx:
    """What a scenario child is told by `run.py`."""

    db_url: str  # postgresql://… (or sqlite:///…, mysql://… for denpyo's other stores)
    provider_url: str  # http://127.0.0.1:PORT
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def send_url(self) -> str:
        return f"{self.provider_url}/send"

    @property
    def lookup_url(self) -> str:
        return f"{self.provider_url}/lookup/{{idempotency_key}}"


def job_payload(i: int) -> dict[str, Any]:
    """The payload of job i: a small JSON object, like an e-mail request."""
    return {"to": f"customer{i}@example.com", "template": "invoice", "order": i}


def new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=CONNECTION_LIMIT),
        timeout=aiohttp.ClientTimeout(total=10.0),
    )


async def post_job(session: aiohttp.ClientSession, url: str, key: str, payload: Any) -> str:
    """The one call every peer makes; raises on anything but a 2xx."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    async with session.post(url, data=body, headers=headers, allow_redirects=False) as response:
        raw = await response.read()
        if not 200 <= response.status < 300:
            raise RuntimeError(f"provider answered HTTP {response.status}: {raw[:200]!r}")
    return str(json.loads(raw)["id"])


def pg_conninfo(url: str) -> str:
    """A libpq URL (psycopg takes `postgresql://`, not SQLAlchemy's `+psycopg`)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")


# -- CPU accounting (Linux /proc) ------------------------------------------------------

_HZ = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds a process has used (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _HZ


def tree_cpu(pid: int) -> float:
    """CPU seconds used by a process and its live descendants (a supervisor's workers)."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += proc_cpu(current)
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            children = []
        stack.extend(int(child) for child in children)
    return total


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _HZ


def cpu_now(provider_pid: int) -> dict[str, float]:
    """CPU seconds so far: this process's, the provider's, the machine's busy time."""
    return {
        "own": time.process_time(),
        "provider": proc_cpu(provider_pid) if provider_pid else 0.0,
        "machine": machine_busy(),
    }


def cpu_since(before: dict[str, float], provider_pid: int) -> dict[str, float]:
    """CPU seconds used since `before` (from `cpu_now`), by the same three."""
    now = cpu_now(provider_pid)
    return {part: now[part] - before[part] for part in now}


def run_on_a_copy(script: str, argv: list[str], snapshot: str) -> int:
    """Run `script` again on a copy of src/, taken now, with the copy's folder in the
    environment variable `snapshot`: the tree may be edited while a bench runs (another
    session works in it), and every process of one run, those that start minutes later
    included, must run the same code."""
    root = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp(prefix="denpyo-bench-tree-"))
    try:
        shutil.copytree(root / "src", folder / "src", ignore=shutil.ignore_patterns("__pycache__"))
        env = {
            **os.environ,
            snapshot: str(folder),
            "PYTHONPATH": os.pathsep.join([str(folder / "src"), str(root / "bench")]),
        }
        return subprocess.run([sys.executable, script, *argv], env=env).returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def alive(pid: int, marker: bytes) -> bool:
    """A process this bench started is still alive: not a zombie, and its command line
    holds `marker` (not a pid reused by another process)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
