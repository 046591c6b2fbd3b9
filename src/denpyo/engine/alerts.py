"""Alerts: a submission that needs a person, told to callbacks and the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from denpyo.domain.submission import Submission

log = logging.getLogger("denpyo.alerts")


@dataclass(frozen=True, slots=True)
class Alert:
    """Why a person should look at a submission now."""

    reason: str  # "rejected", "exhausted", "in_doubt"; "renewal_failing" (no submission)
    message: str
    submission: Submission | None

    def __str__(self) -> str:
        sub = self.submission
        if sub is None:
            return f"[{self.reason}] {self.message}"
        return f"[{self.reason}] {sub.channel}:{sub.key} (id {sub.id}): {self.message}"


AlertHandler = Callable[[Alert], None]


class Alerts:
    """Fan an alert out to the log and every registered callback.

    A callback that raises is logged and skipped: an alerting bug must not
    undo or block the settle that caused the alert (it is already committed).
    """

    def __init__(self) -> None:
        self.handlers: list[AlertHandler] = []

    def add(self, handler: AlertHandler) -> AlertHandler:
        self.handlers.append(handler)
        return handler

    def raise_alert(self, reason: str, message: str, submission: Submission | None) -> Alert:
        alert = Alert(reason, message, submission)
        log.warning("%s", alert)
        for handler in self.handlers:
            try:
                handler(alert)
            except Exception:
                log.exception("alert handler %r failed", handler)
        return alert
