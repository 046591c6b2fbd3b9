"""One worker process of the chaos run: `python chaos_worker.py DB_URL PROVIDER_URL`."""

import logging
import sys

import denpyo
from denpyo.channels.http import HttpChannel


def main() -> None:
    db_url, provider_url = sys.argv[1:3]
    logging.basicConfig(level=logging.CRITICAL)  # kills and restarts are expected here
    ledger = denpyo.Ledger(db_url)
    http = HttpChannel(
        url=f"{provider_url}/send",
        lookup_url=f"{provider_url}/lookup/{{idempotency_key}}",
        timeout=1.0,
    )
    ledger.channel(
        "invoice-email",
        verify=http.verifier,
        lease=2.0,
        max_attempts=50,
        backoff=denpyo.Backoff(initial=0.1, maximum=1.0),
    )(http.send)
    ledger.work(concurrency=16, poll_interval=0.2)


if __name__ == "__main__":
    main()
