"""denpyo: write the slip before handing over the box.

A durable, queryable record of every call your application makes to an
external API: the row is committed (`requesting`) before the call, then
settled `synced`, `failed` or `rejected`; rows left in doubt by a crash are
verified against the provider, settled, or raised to a person.
"""

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
from denpyo.engine.worker import WorkReport
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
from denpyo.store.sealing import PayloadCodec, new_payload_key

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
