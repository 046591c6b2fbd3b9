"""Instructions per inline submit, counted by valgrind: a measure that a busy or
noisy machine does not move, for comparing two trees where wall time cannot.

    PYTHONPATH=src .venv/bin/python bench/instructions.py [--database postgresql]
        [--n 500] [--ways submit,statements]

Each way runs in a process of its own under `valgrind --tool=callgrind`, twice:
with `--n` calls after 300 warm-up calls, and with none. The difference, divided
by `--n`, is what one call costs this process (Python, the driver and SQLite,
which runs in it; not PostgreSQL's server). The provider's call is left out (the
channel returns at once): the figure is denpyo's own work around a call.

The ways are `bench/submit_floor.py`'s: `hand-written`, `hand-written with its
history`, `denpyo's statements` (`statements`) and `submit()` (`submit`). Hash
randomisation is off, so that two runs of the same tree count the same.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

WAYS = ("hand", "history", "statements", "submit")
LABELS = {
    "hand": "hand-written",
    "history": "hand-written with its history",
    "statements": "denpyo's statements",
    "submit": "submit()",
}
WARM = 300


def remote_id(_key: str, _payload: Any) -> str:
    """The provider's answer in every way: the call itself is left out."""
    return "remote-1"


def way(name: str, url: str) -> Callable[[str, Any], None]:
    """One call of the way `name` on the ledger database at `url`."""
    from child import _handwritten, _statements_alone

    import denpyo

    if name in ("hand", "history"):
        hand, _ = _handwritten(url, history=name == "history")
        return lambda key, payload: hand(key, payload, lambda: remote_id(key, payload))
    if name == "statements":
        return _statements_alone(url, remote_id)
    ledger = denpyo.Ledger(url)
    ledger.add_channel("inline", lambda sub: remote_id(sub.idempotency_key, sub.payload))
    return lambda key, payload: ledger.submit("inline", key, payload) and None


def child(name: str, n: int, database: str) -> None:
    """Run in the counted process: a fresh database, the warm-up, then `n` calls."""
    from common import job_payload
    from submit_floor import migrated, pg_migrated

    if database == "postgresql":
        url = pg_migrated(f"instructions_{name}", [])
    else:
        url = migrated(Path(tempfile.mkdtemp(prefix="denpyo-instructions-")), name, [])
    call = way(name, url)
    for i in range(WARM):
        call(f"warm:{i}", job_payload(i))
    for i in range(n):
        call(str(i), job_payload(i))


def counted(name: str, n: int, database: str) -> int:
    """Instructions the whole child process ran (callgrind's `Collected`)."""
    out = Path(tempfile.mkdtemp(prefix="denpyo-callgrind-")) / "callgrind.out"
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        name,
        "--n",
        str(n),
        "--database",
        database,
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    shutil.rmtree(out.parent, ignore_errors=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{name}: valgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=500, help="calls counted per way")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"some of {','.join(WAYS)}")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.n, args.database)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    names = [name.strip() for name in args.ways.split(",")]
    unknown = sorted(set(names) - set(WAYS))
    if unknown:
        raise SystemExit(f"unknown ways {unknown}: choose among {', '.join(WAYS)}")
    per_call = {
        name: (counted(name, args.n, args.database) - counted(name, 0, args.database)) / args.n
        for name in names
    }
    base = per_call.get("hand")
    print(f"{args.database}: {args.n} calls counted per way, after {WARM} to warm up\n")
    print("| way | instructions per call | ÷ hand-written |")
    print("|---|---|---|")
    for name, count in per_call.items():
        ratio = f"{count / base:.2f}×" if base else "–"
        print(f"| {LABELS[name]} | {count:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()
