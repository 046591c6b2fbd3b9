"""One worker process of the chaos run: `python chaos_worker.py DB_URL PROVIDER_URL
[--lease S] [--concurrency N] [--calls FILE] [--log FILE]`.

With `--calls`, each call this process starts is written to FILE as it starts,
one line each: wall time, pid, row id, idempotency key. The harness reads them
to tell which double sends were already on the wire when this process was paused.
"""

import argparse
import logging
import os
import time
from typing import IO

import denpyo
from denpyo.channels.http import HttpChannel
from denpyo.testing.faults import install_from_env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db_url")
    parser.add_argument("provider_url")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--calls", help="file to log each call start to")
    parser.add_argument("--log", help="file for the worker's warnings and errors")
    args = parser.parse_args()
    if args.log:
        logging.basicConfig(
            filename=args.log, level=logging.WARNING, format="%(created).3f %(name)s %(message)s"
        )
    else:
        logging.basicConfig(level=logging.CRITICAL)  # kills and restarts are expected here
    install_from_env()  # DENPYO_TEST_FAULTS: the distributed profile's chaos run
    ledger = denpyo.Ledger(args.db_url)
    http = HttpChannel(
        url=f"{args.provider_url}/send",
        lookup_url=f"{args.provider_url}/lookup/{{idempotency_key}}",
        timeout=1.0,
    )
    calls: IO[str] | None = open(args.calls, "a", buffering=1) if args.calls else None  # noqa: SIM115
    pid = os.getpid()

    async def send(sub: denpyo.Submission) -> str | None:
        if calls is not None:
            calls.write(f"{time.time():.6f} {pid} {sub.id} {sub.idempotency_key}\n")
        return await http.send(sub)

    ledger.channel(
        "invoice-email",
        verify=http.verifier,
        lease=args.lease,
        max_attempts=50,
        backoff=denpyo.Backoff(initial=0.1, maximum=1.0),
    )(send)
    ledger.work(concurrency=args.concurrency, poll_interval=0.2)


if __name__ == "__main__":
    main()
