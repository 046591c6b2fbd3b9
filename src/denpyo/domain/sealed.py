"""A payload encrypted at rest that cannot be opened here, and what the engine does
with its row (store/sealing.py seals and opens them)."""

from __future__ import annotations

SEALED = "denpyo:sealed"
"""The one field of the JSON object a sealed payload is stored as:
`{"denpyo:sealed": "v1.<kid>.<nonce and ciphertext>"}`. Reserved: a payload of one's
own may not have it at its top level (`encode_payload` refuses it)."""

UNREADABLE_RETRY_IN = 600.0
"""Seconds after which a worker looks again, the first time, at a row whose payload it
could not open (its key is not configured): long enough not to spin on a backlog of
such rows, short enough that a key configured again soon sends them within minutes."""
UNREADABLE_RETRY_MAX = 86_400.0
"""The longest wait between two looks: once a day. Each look writes two history lines
(its attempt and its release); a row waiting years for its key adds two a day."""


NOT_SENT = "not sent: "
"""How the last error of a row given back unsent begins."""


def missing_key(kid: str) -> str:
    """What a row whose payload no key here opens is missing (`SealedPayload.why`)."""
    return f"its payload is encrypted with key {kid}, which is not configured here"


def waiting_for_key(kid: str) -> str:
    """How the last error of a row given back for want of key `kid` begins: what a
    worker that has the key looks for, to send such rows at once (`make_payload_due_now`)."""
    return NOT_SENT + missing_key(kid)


def unreadable_retry_in(looks: int) -> float:
    """Seconds to the next look at a row found unreadable `looks` times in a row
    (1 the first time): 10 minutes, doubling at each look, up to a day."""
    doublings = min(max(looks, 1) - 1, 16)
    return min(UNREADABLE_RETRY_IN * float(2**doublings), UNREADABLE_RETRY_MAX)


QUOTED = "[encrypted]"
"""What a provider's error keeps, where the ledger encrypts payloads, of a value of the
row's payload it quoted (`invalid address ann@example.com`): the error is stored and
shown in clear, and must not give back what the payload's encryption hides."""

NOT_AVAILABLE = "not available"
"""Why a payload is not shown: no key configured here has its key id."""
DOES_NOT_OPEN = "does not open for this row"
"""Why a payload is not shown: its key is configured, but the ciphertext does not
authenticate with it for this row's channel and key (moved from another row, or
altered)."""


class SealedPayload(str):
    """The payload of a row that is encrypted with a key not configured here (or that
    does not open for its row), in place of the payload.

    It is text, `[encrypted with key <kid>: not available]`, so that `denpyo show`,
    `list --json`, the dashboard and a log print it as it is; `kid` names the key
    (the first 8 hex digits of its SHA-256), `stored` is the payload as the table
    keeps it (written back unchanged, by the archive). The engine never sends such a
    row (`Flows.attempt` gives it back), never resends its payload, and an inline
    submit of its key is a `ConfigurationError`."""

    kid: str
    reason: str
    stored: dict[str, str]

    def __new__(cls, kid: str, token: str, reason: str = NOT_AVAILABLE) -> SealedPayload:
        shown = super().__new__(cls, f"[encrypted with key {kid}: {reason}]")
        shown.kid, shown.reason, shown.stored = kid, reason, {SEALED: token}
        return shown

    def __repr__(self) -> str:
        return f"SealedPayload(kid={self.kid!r}, reason={self.reason!r})"

    def to_json(self) -> str:
        """Its JSON form: the text it shows."""
        return str.__str__(self)

    def why(self) -> str:
        """A sentence for an error or an alert: what is missing, and what to do."""
        if self.reason == NOT_AVAILABLE:
            return (
                f"{missing_key(self.kid)}: add that key to DENPYO_PAYLOAD_KEYS (or the "
                "ledger's payload_key)"
            )
        return (
            f"its payload, encrypted with key {self.kid}, does not open for this row "
            "(copied from another row, or altered)"
        )
