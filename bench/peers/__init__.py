"""One module per peer. Each exposes the same coroutines:

- ``setup(ctx)``: create the peer's tables in a fresh database;
- ``enqueue(ctx, n, bulk=False)``: record n jobs (one transaction each, or the
  peer's bulk API; ``NotImplementedError`` when it has none);
- ``dispatch(ctx, n, concurrency)``: start a worker and return once all n jobs
  are recorded as done in the database;
- ``done(ctx)``: how many jobs the database records as done (the check).

``NAME`` is the label in the report; ``DURABLE`` says whether it records anything;
``CALLS = False`` marks a peer that makes no call (the provider is not checked).
"""

PEERS = {
    "fire_and_forget": "peers.fire_and_forget",
    "outbox": "peers.outbox",
    "pgqueuer": "peers.pgqueuer_peer",
    "procrastinate": "peers.procrastinate_peer",
    "dbos": "peers.dbos_peer",
    "denpyo": "peers.denpyo_peer",
    "denpyo_nocall": "peers.denpyo_nocall",
    "denpyo_store": "peers.denpyo_store",
    "floor_psycopg": "peers.floor_psycopg",
    "floor_asyncpg": "peers.floor_asyncpg",
    "floor_call": "peers.floor_call",
}
