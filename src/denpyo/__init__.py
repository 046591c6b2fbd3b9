"""denpyo: write the slip before handing over the box.

A durable, queryable record of every call your application makes to an
external API: the row is committed (`requesting`) before the call, then
settled `synced`, `failed` or `rejected`; rows left in doubt by a crash are
verified against the provider, resolved, or raised to a person.

The errors are imported at once; the other names below on first use (PEP 562), so
that `import denpyo` and the command line's start (which lives in this package)
load only what they need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from denpyo.errors import (
    ArchiveError,
    ChannelSignal,
    ConfigurationError,
    DenpyoError,
    InvalidDatabaseURL,
    InvalidInput,
    InvalidKey,
    KeyReused,
    LeaseExpired,
    LeaseLost,
    PayloadNotJSON,
    PayloadTooLarge,
    Rejected,
    SchemaError,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    SubmissionError,
    SubmissionFailed,
    SubmissionInDoubt,
    SubmissionNotFound,
    SubmissionRejected,
    SubmissionResolved,
    Transient,
    TransitionNotAllowed,
    UnknownChannel,
)

if TYPE_CHECKING:
    from denpyo.domain.actions import Approval
    from denpyo.domain.audit import AuditReport, Discrepancy, DiscrepancyKind, RemoteRecord
    from denpyo.domain.backoff import Backoff
    from denpyo.domain.limits import MAX_KEY_LENGTH, MAX_PAYLOAD_BYTES
    from denpyo.domain.policy import Outcome, OutcomeKind
    from denpyo.domain.provider_events import ProviderEvent, Received
    from denpyo.domain.redaction import Redaction
    from denpyo.domain.report import ReportRow
    from denpyo.domain.sealed import SealedPayload
    from denpyo.domain.status import ErrorKind, Status
    from denpyo.domain.submission import Event, Submission
    from denpyo.domain.verdict import Delivered, NotDelivered, Unknown, Verdict
    from denpyo.engine.alerts import Alert
    from denpyo.engine.app_transactions import run_again_on_conflict
    from denpyo.engine.archiving import ArchiveReport
    from denpyo.engine.ledger import Ledger
    from denpyo.engine.payload_keys import KeyRotation
    from denpyo.engine.work_report import WorkReport
    from denpyo.store.sealing import PayloadCodec, new_payload_key

_HOMES = {
    "denpyo.domain.actions": ("Approval",),
    "denpyo.domain.audit": ("AuditReport", "Discrepancy", "DiscrepancyKind", "RemoteRecord"),
    "denpyo.domain.backoff": ("Backoff",),
    "denpyo.domain.limits": ("MAX_KEY_LENGTH", "MAX_PAYLOAD_BYTES"),
    "denpyo.domain.policy": ("Outcome", "OutcomeKind"),
    "denpyo.domain.provider_events": ("ProviderEvent", "Received"),
    "denpyo.domain.redaction": ("Redaction",),
    "denpyo.domain.report": ("ReportRow",),
    "denpyo.domain.sealed": ("SealedPayload",),
    "denpyo.domain.status": ("ErrorKind", "Status"),
    "denpyo.domain.submission": ("Event", "Submission"),
    "denpyo.domain.verdict": ("Delivered", "NotDelivered", "Unknown", "Verdict"),
    "denpyo.engine.alerts": ("Alert",),
    "denpyo.engine.app_transactions": ("run_again_on_conflict",),
    "denpyo.engine.archiving": ("ArchiveReport",),
    "denpyo.engine.ledger": ("Ledger",),
    "denpyo.engine.payload_keys": ("KeyRotation",),
    "denpyo.engine.work_report": ("WorkReport",),
    "denpyo.store.sealing": ("PayloadCodec", "new_payload_key"),
}
"""Each public name's module."""

_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'denpyo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "Alert",
    "Approval",
    "ArchiveError",
    "ArchiveReport",
    "AuditReport",
    "Backoff",
    "ChannelSignal",
    "ConfigurationError",
    "Delivered",
    "DenpyoError",
    "Discrepancy",
    "DiscrepancyKind",
    "ErrorKind",
    "Event",
    "InvalidDatabaseURL",
    "InvalidInput",
    "InvalidKey",
    "KeyReused",
    "KeyRotation",
    "LeaseExpired",
    "LeaseLost",
    "Ledger",
    "NotDelivered",
    "Outcome",
    "OutcomeKind",
    "PayloadCodec",
    "PayloadNotJSON",
    "PayloadTooLarge",
    "ProviderEvent",
    "Received",
    "Redaction",
    "Rejected",
    "RemoteRecord",
    "ReportRow",
    "SchemaError",
    "SealedPayload",
    "Status",
    "StoreConflict",
    "StoreError",
    "StoreUnavailable",
    "Submission",
    "SubmissionError",
    "SubmissionFailed",
    "SubmissionInDoubt",
    "SubmissionNotFound",
    "SubmissionRejected",
    "SubmissionResolved",
    "Transient",
    "TransitionNotAllowed",
    "Unknown",
    "UnknownChannel",
    "Verdict",
    "WorkReport",
    "new_payload_key",
    "run_again_on_conflict",
]
