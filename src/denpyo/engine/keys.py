"""Idempotency keys: the key a provider sees on every attempt of one row."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator


class IdempotencyKeys:
    """Random (version 4) UUIDs as text, the form `str(uuid.uuid4())` gives, drawn
    from the OS `batch` at a time: one system call per batch, not per key, and about
    a third of the time of `str(uuid.uuid4())` (bench/CHANGES.md). Shared by the
    threads of a process; a forked child forgets the batch it inherited (and the
    lock, which another thread may have held), so that parent and child never hand
    out the same key."""

    def __init__(self, batch: int = 256) -> None:
        self.batch = batch
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._keys: Iterator[str] = iter(())

    def __call__(self) -> str:
        with self._lock:
            key = next(self._keys, None)
            if key is None:
                self._keys = iter(self._drawn())
                key = next(self._keys)
            return key

    def _drawn(self) -> list[str]:
        raw = bytearray(os.urandom(16 * self.batch))
        raw[6::16] = raw[6::16].translate(_VERSION_4)
        raw[8::16] = raw[8::16].translate(_RFC_4122)
        text = raw.hex()
        return [
            f"{text[i : i + 8]}-{text[i + 8 : i + 12]}-{text[i + 12 : i + 16]}-"
            f"{text[i + 16 : i + 20]}-{text[i + 20 : i + 32]}"
            for i in range(0, 32 * self.batch, 32)
        ]


_VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))
"""The seventh byte of a random UUID: its high four bits say version 4."""
_RFC_4122 = bytes(b & 0x3F | 0x80 for b in range(256))
"""The ninth byte: its high two bits say the RFC 4122 variant."""
new_idempotency_key = IdempotencyKeys()
"""A fresh idempotency key, for every row the engine records."""
