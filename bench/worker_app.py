"""The `--app` of the `processes` scenario: the `denpyo` peer's ledger and channel,
for `python -m denpyo.cli --app worker_app:ledger worker --processes N` (run with
bench/ on PYTHONPATH; the database and provider come from the environment)."""

from __future__ import annotations

import os

from common import Ctx
from peers.denpyo_peer import ledger_for

ledger, channel = ledger_for(Ctx(os.environ["BENCH_DB_URL"], os.environ["BENCH_PROVIDER_URL"]))
