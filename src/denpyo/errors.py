"""Every error denpyo raises, and the two signals a channel raises.

::

    DenpyoError
    ├── ConfigurationError          wired wrongly (a URL, a setting out of range); nothing written
    │   ├── InvalidDatabaseURL      a URL denpyo cannot open
    │   ├── UnknownChannel          a channel name no one registered
    │   └── SchemaError             tables missing, or newer than this denpyo
    ├── InvalidInput (ValueError)   bad input to submit/enqueue; nothing was written
    │   ├── PayloadNotJSON          no JSON form, not valid Unicode, a NUL, or nested too deep
    │   ├── PayloadTooLarge
    │   ├── InvalidKey              empty, too long, not text, or not valid Unicode
    │   ├── KeyReused               the channel and key exist with another payload
    │   └── SubmissionNotFound      no row has that id, or that channel and key
    ├── TransitionNotAllowed        a status move the statuses forbid
    ├── LeaseLost                   another process settled or took the row first
    │   └── LeaseExpired            this process's hold may have run out: the call was not started
    ├── StoreError                  the database said no; the driver error is __cause__
    │   ├── StoreUnavailable        the database could not be reached, or hung up: try later
    │   └── StoreConflict           a serialization failure or a deadlock: run the transaction again
    ├── ArchiveError                the archive cannot be written, or did not read back as written
    ├── DemoError                   the demo could not play its story
    ├── SubmissionError             submit() ended without `synced`; .submission tells the state
    │   ├── SubmissionRejected      the provider refused on business grounds
    │   ├── SubmissionFailed        a transient or ambiguous failure, recorded as `failed`
    │   ├── SubmissionInDoubt       the call may have arrived; a verify or a person must decide
    │   └── SubmissionResolved      a person resolved the row; the engine never calls for it again
    └── ChannelSignal               raised *by channel code* to classify an outcome
        ├── Transient               the provider did not act (5xx, 429, refused); retry later
        └── Rejected                the provider refused on business grounds; do not resend

Any other exception escaping a channel is *ambiguous*: the request may have
arrived, so it is verified (or resent only on an idempotent channel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from denpyo.domain.submission import Submission


class DenpyoError(Exception):
    """Base class of everything denpyo raises."""


class ConfigurationError(DenpyoError):
    """The program is wired wrongly (URL, channel or worker settings, schema)."""


def require(ok: bool, message: str) -> None:
    """A setting out of range is a wiring mistake, refused where it is made."""
    if not ok:
        raise ConfigurationError(message)


class InvalidDatabaseURL(ConfigurationError):
    """The database URL is malformed or names a database kind denpyo does not support."""


class UnknownChannel(ConfigurationError):
    """No channel of that name is registered on this ledger."""


class SchemaError(ConfigurationError):
    """The denpyo tables are missing (run `migrate`) or newer than this version."""


class InvalidInput(DenpyoError, ValueError):
    """Input to submit or enqueue was refused before anything was written."""


class PayloadNotJSON(InvalidInput):
    """The payload cannot be kept as JSON on every database: no JSON form, text that
    is not valid Unicode (a lone surrogate), a NUL, or nesting past 31 levels."""


class PayloadTooLarge(InvalidInput):
    """The encoded payload exceeds the ledger's `max_payload_bytes`."""


class InvalidKey(InvalidInput):
    """The business key or ordering key is empty, too long, or not a string."""


class KeyReused(InvalidInput):
    """The channel and key exist with a different payload: one key names one intended call."""


class SubmissionNotFound(InvalidInput):
    """No submission has that id, or that channel and key."""


class TransitionNotAllowed(DenpyoError):
    """A status move that the statuses do not allow was asked for (domain/status.py)."""


class LeaseLost(DenpyoError):
    """The compare-and-set failed: the row is no longer where this process left it."""


class LeaseExpired(LeaseLost):
    """This process's hold on the row may have run out (it stalled, or could not renew
    the lease): another sender may hold the row now, so the call was not started."""


class StoreError(DenpyoError):
    """The database refused an operation; the driver's exception is `__cause__`."""


class StoreUnavailable(StoreError):
    """The database could not be reached (refused, timed out, starting up, full) or
    dropped the connection: nothing is wrong with the call or the settings, so a
    command line says "try again later" apart from a usage error."""


class StoreConflict(StoreError):
    """The database refused the transaction for a concurrent one: a serialization
    failure or a deadlock (PostgreSQL 40001, 40P01; MariaDB 1213, and 1205, a lock
    wait that timed out). Rolled back and run again from its start, the transaction
    may well succeed. denpyo does so a few times for its own transactions before it
    raises this; in yours (`conn=`) it is yours to do (MariaDB's 1205 undid only the
    statement: roll back first). The driver's error is `__cause__`."""

    waited: bool = False
    """The transaction waited for a lock until the database gave up on it (MariaDB's
    1205, after `innodb_lock_wait_timeout`): denpyo runs such a transaction once more
    only, where a try costs that long."""


class ArchiveError(DenpyoError):
    """An archive target cannot be written (missing, read-only, refused), or a file
    written there did not read back as written: nothing may be deleted from the
    database on its account."""


class DemoError(DenpyoError):
    """The demo could not play its story (a sender died early, a wait ran out)."""


class SubmissionError(DenpyoError):
    """`submit()` could not end in `synced`; `.submission` is the row as recorded."""

    def __init__(self, message: str, submission: Submission) -> None:
        super().__init__(message)
        self.submission = submission


class SubmissionRejected(SubmissionError):
    """The provider refused the call; the row is `rejected` and waits for a person."""


class SubmissionFailed(SubmissionError):
    """The call failed and was recorded as `failed`; a worker retries it if allowed."""


class SubmissionInDoubt(SubmissionError):
    """The earlier call may have arrived; denpyo will not resend it blindly."""


class SubmissionResolved(SubmissionError):
    """A person resolved the row (abandoned it, or marked it by hand) and nothing
    resends it: the engine never calls the provider for it again."""


class ChannelSignal(DenpyoError):
    """Raised by channel code to say how a call ended."""


class Transient(ChannelSignal):
    """The provider did not act (5xx, 429, refused connection): retry after back-off.

    `retry_after` (seconds), when the provider said it, is a floor for the back-off:
    the next attempt waits the longer of the two, and the whole channel waits that
    long on every worker. `throttled`: the provider answered that it limits the
    rate (HTTP 429): it is up, so the failure is no sign of an outage (`down_after`).
    """

    def __init__(
        self,
        message: str = "transient failure",
        *,
        retry_after: float | None = None,
        throttled: bool = False,
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.throttled = throttled


class Rejected(ChannelSignal):
    """The provider refused on business grounds: resending is pointless, a person decides."""
