"""The floor under denpyo's store through psycopg (see floor.py)."""

from peers.floor import dispatch_psycopg as dispatch
from peers.floor import done, enqueue, setup

NAME = "the floor: two statements on bare psycopg (no engine, no call; not a peer)"
DURABLE = True
CALLS = False
__all__ = ["CALLS", "DURABLE", "NAME", "dispatch", "done", "enqueue", "setup"]
