"""What the ledger's tests share: channels whose every call is scripted. The
ledger's contract holds on every backend; each test runs on a fresh database of
each (the `ledger` fixture of tests/conftest.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from denpyo import Backoff, Submission

NOW = Backoff(initial=0.0, maximum=0.0)  # retries due at once, for tests


class Script:
    """A channel whose behaviour per call is scripted; it counts its calls."""

    def __init__(self, *steps: Callable[[Submission], Any]) -> None:
        self.steps = list(steps)
        self.calls: list[Submission] = []

    def __call__(self, sub: Submission) -> Any:
        self.calls.append(sub)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return step(sub)


def ok(sub: Submission) -> str:
    return f"remote-{sub.key}"


def fail(exc: BaseException) -> Callable[[Submission], Any]:
    def raise_(sub: Submission) -> Any:
        raise exc

    return raise_


SQL = Callable[[str], list[tuple[Any, ...]]]


def as_prepared(query: str) -> tuple[str, str]:
    """A named query for PREPARE (its %(name)s parameters as $1, $2, ...), and an
    argument list for EXECUTE with NULL for each."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", query)
    return numbered, "(" + ", ".join(["NULL"] * len(names)) + ")"
