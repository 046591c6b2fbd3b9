"""The `--app` of the `fleet` scenario (bench/fleet.py): one HTTP channel, `fleet`,
with the limits the measurement sets, for
`python -m denpyo.cli --app fleet_app:ledger worker --processes N` (bench/ on
PYTHONPATH; the database, the provider and the channel's settings come from the
environment: FLEET_DB_URL, FLEET_PROVIDER_URL, FLEET_CHANNEL as JSON)."""

from __future__ import annotations

import json
import os

import denpyo
from denpyo.channels.http import HttpChannel

CHANNEL = "fleet"

ledger = denpyo.Ledger(os.environ["FLEET_DB_URL"])
# Each request says which process sent it (the provider's timeline, `--timeline`).
channel = HttpChannel(
    os.environ["FLEET_PROVIDER_URL"] + "/send", headers={"X-Worker": str(os.getpid())}
)
ledger.add_channel(CHANNEL, channel.send, **json.loads(os.environ.get("FLEET_CHANNEL", "{}")))
