"""``python -m denpyo.demo naive|denpyo ...``: one of the demo's senders, as the child
process that the demo kills with SIGKILL (see `denpyo.demo.senders`)."""

from __future__ import annotations

import argparse
import sys

from denpyo.demo.senders import demo_ledger, send_denpyo, send_naive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m denpyo.demo")
    parser.add_argument("way", choices=["naive", "denpyo"])
    parser.add_argument("--send-url", required=True)
    parser.add_argument("--lookup-url", default="")
    parser.add_argument("--db", required=True, help="the SQLite file")
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pause", type=float, default=0.05, help="after the reply")
    parser.add_argument("--prepare", type=float, default=0.02, help="before the call")
    args = parser.parse_args(argv)
    orders = range(1, args.orders + 1)
    if args.way == "naive":
        send_naive(args.send_url, args.db, orders, args.concurrency, args.pause, args.prepare)
        return 0
    db_url = f"sqlite:///{args.db}"
    with demo_ledger(db_url, args.send_url, args.lookup_url, args.pause, args.prepare) as ledger:
        send_denpyo(ledger, orders, args.concurrency)
    return 0


sys.exit(main())
