"""Whether a row's holder is known to be gone: its process ran on this host and runs
no more. Workers record nothing of themselves besides their rows' leases, which
they renew every third of a lease (no table of workers): a holder elsewhere is
only known by its lease, which ends on its own if the holder is gone."""

from __future__ import annotations

import os
import socket

from denpyo.domain.holders import process_of


def holder_gone(holder: str) -> bool:
    """True only when the holder's process was on this host and no process has its id
    now: it was killed or crashed, and its rows wait for their leases to end. A
    holder of another host, or named otherwise, is never said to be gone."""
    found = process_of(holder)
    if found is None or found[0] != socket.gethostname():
        return False
    try:
        os.kill(found[1], 0)
    except ProcessLookupError:
        return True
    except OSError:  # it runs, as another user
        return False
    return False
