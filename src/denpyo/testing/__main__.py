"""``python -m denpyo.testing``: run a fake provider as a process until SIGTERM/SIGINT;
``python -m denpyo.testing wait URL [--accepted N]``: wait for one (see _wait.py)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from denpyo.errors import ConfigurationError
from denpyo.testing import _wait
from denpyo.testing._provider import TRANSPORTS, FakeProvider


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m denpyo.testing",
        description="Run denpyo's fake HTTP provider.",
        epilog="python -m denpyo.testing wait URL [--accepted N]: wait until it answers, "
        "or has accepted N calls (wait --help).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    p.add_argument("--honour-idempotency", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    p.add_argument("--fail-rate", type=float, default=0.0, help="503 + Retry-After, no effect")
    p.add_argument("--reject-rate", type=float, default=0.0, help="422, no effect")
    p.add_argument("--drop-rate", type=float, default=0.0, help="effect, then no reply")
    p.add_argument("--slow-rate", type=float, default=0.0, help="effect, then a late reply")
    p.add_argument("--slow-seconds", type=float, default=30.0)
    p.add_argument("--retry-after", type=float, default=1.0, help="the 503s' Retry-After (0: none)")
    p.add_argument("--lookup-unknown-rate", type=float, default=0.0, help="lookup answers 503")
    p.add_argument("--key-header", default="Idempotency-Key", help="'' for none")
    p.add_argument("--key-field", default=None, help="read the key from this body field")
    p.add_argument("--key-ttl", type=float, default=None, help="seconds a key is remembered")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="auto",
        help="the HTTP server: aiohttp when installed (auto), or the standard library",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["wait"]:
        return _wait.main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        provider = FakeProvider(
            honour_idempotency=args.honour_idempotency,
            latency=args.latency,
            fail_rate=args.fail_rate,
            reject_rate=args.reject_rate,
            drop_rate=args.drop_rate,
            slow_rate=args.slow_rate,
            slow_seconds=args.slow_seconds,
            retry_after=args.retry_after,
            lookup_unknown_rate=args.lookup_unknown_rate,
            key_header=args.key_header or None,
            key_field=args.key_field,
            key_ttl=args.key_ttl,
            seed=args.seed,
            host=args.host,
            port=args.port,
            transport=args.transport,
        )
    except (ValueError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        provider.start()
    except OSError as exc:  # the port is taken, or the host is not this machine's
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # set even where a shell ignores them (`&`)
        signal.signal(sig, lambda *_: stop.set())
    with provider:
        print(f"listening on {provider.url}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
