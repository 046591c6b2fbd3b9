"""``python -m denpyo.testing wait URL``: block until a server answers, or until the
fake provider at URL has accepted N calls. A page's session prints it, so that a
reader's shell waits for what it started, on a machine of any speed, rather than
for a fixed number of seconds."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request

from denpyo.testing._client import FakeProviderClient

POLL = 0.05  # seconds between two looks


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m denpyo.testing wait",
        description="Wait until URL answers (any HTTP status), or with --accepted, until "
        "the fake provider at URL has accepted at least N calls (its /stats).",
    )
    p.add_argument("url", help="e.g. http://127.0.0.1:8765")
    p.add_argument("--accepted", type=int, default=None, metavar="N")
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="give up (exit 1) after this many seconds with no progress",
    )
    return p


def answers(url: str) -> bool:
    """True when something at `url` answers HTTP, whatever its status."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:  # refused, reset, timed out: not listening yet
        return False


def accepted(url: str) -> int | None:
    """The fake provider's `accepted` count, or None while it does not answer."""
    try:
        return FakeProviderClient(url, timeout=2).stats().accepted
    except (OSError, RuntimeError):
        return None


def wait(url: str, *, calls: int | None = None, timeout: float = 60.0) -> bool:
    """Wait for `url` to answer (with `calls`: for its provider to have accepted that
    many); False after `timeout` seconds in which nothing moved."""
    last: int | None = None
    moved = time.monotonic()
    while True:
        if calls is None:
            if answers(url):
                return True
        else:
            now = accepted(url)
            if now is not None and now >= calls:
                return True
            if now != last:
                last, moved = now, time.monotonic()
        if time.monotonic() - moved > timeout:
            return False
        time.sleep(POLL)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if wait(args.url, calls=args.accepted, timeout=args.timeout):
        return 0
    what = "answer" if args.accepted is None else f"accept {args.accepted} calls"
    print(
        f"error: {args.url} did not {what} (nothing moved for {args.timeout:g} s)", file=sys.stderr
    )
    return 1
