"""The `--app` of the `bulk` scenario (bench/bulk.py): one HTTP channel, `live`, to the
fake provider, for `python -m denpyo.cli --app bulk_app:ledger worker` (bench/ on
PYTHONPATH; the database and the provider come from the environment: BULK_DB_URL,
BULK_PROVIDER_URL). The rows a bulk action retries are on another channel, `bulk`,
which this worker does not serve: it measures what the bulk action costs the
workers, not the sending of its rows."""

from __future__ import annotations

import os

from common import CONNECTION_LIMIT

import denpyo
from denpyo.channels.http import HttpChannel

CHANNEL = "live"

ledger = denpyo.Ledger(os.environ["BULK_DB_URL"])
channel = HttpChannel(os.environ["BULK_PROVIDER_URL"] + "/send", connection_limit=CONNECTION_LIMIT)
ledger.add_channel(CHANNEL, channel.send)
