"""The floor under denpyo's store through asyncpg (see floor.py)."""

from peers.floor import dispatch_asyncpg as dispatch
from peers.floor import done, enqueue, setup

NAME = "the floor: two statements on bare asyncpg (no engine, no call; not a peer)"
DURABLE = True
CALLS = False
__all__ = ["CALLS", "DURABLE", "NAME", "dispatch", "done", "enqueue", "setup"]
