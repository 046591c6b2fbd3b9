"""Reading for people: find a row, list rows, count them, show a row's history."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from denpyo.domain.actions import person_of
from denpyo.domain.channel_state import ChannelEvent, ChannelState, Mode
from denpyo.domain.durability import Durability
from denpyo.domain.filters import Filter, parse_when
from denpyo.domain.forgetting import Forgotten
from denpyo.domain.holders import Holding, actor_of, by_actor
from denpyo.domain.limits import (
    MAX_KEY_LENGTH,
    check_channel_name,
    check_search_text,
)
from denpyo.domain.policy import window_closes_at
from denpyo.domain.redaction import Redaction
from denpyo.domain.status import Status
from denpyo.domain.submission import Event, Submission
from denpyo.engine.acting import find
from denpyo.engine.holders import holder_gone
from denpyo.errors import DenpyoError, InvalidInput
from denpyo.store import shown_url
from denpyo.store.base import Page

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

log = logging.getLogger("denpyo.engine")


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Counts for `denpyo status`, read with the database clock (`now`).

    `in_doubt` counts every row in doubt, resolved or not; `exhausted` the
    unresolved exhausted rows; `rejected_open` unresolved `rejected` rows;
    `needs_person` the unresolved rows among all three (`denpyo.domain.rules`
    says what each means, row by row). `pending` counts rows the engine still has to move
    (`requesting`, or `failed` with a next attempt); `oldest_pending` is the
    creation time of the oldest of them. `holdings`: the rows held now under a live
    lease, per channel and holder (a holder known to be gone among them: its rows
    are in doubt once their leases end, and not before). `channel_states`: every
    channel known (registered, with rows, or with a state), with what the fleet
    shares about it (None: never paused, throttled or down, so active);
    `channel_history`: the latest changes of the one channel asked for (else empty).
    `durability`: what the primary says about its commits surviving its loss (None:
    nothing to say, SQLite and MariaDB); `standby_lag`: seconds the counts are behind
    the primary when read from a standby (`read_url`; None: read from the primary).
    """

    channels: dict[str, dict[Status, int]]
    in_doubt: int
    exhausted: int
    rejected_open: int
    needs_person: int
    pending: int
    resolved: int
    oldest_pending: datetime | None
    now: datetime
    database: str = ""  # the URL read, without its password
    holdings: list[Holding] = dataclasses.field(default_factory=list)
    channel_states: dict[str, ChannelState | None] = dataclasses.field(default_factory=dict)
    channel_history: list[ChannelEvent] = dataclasses.field(default_factory=list)
    durability: Durability | None = None
    standby: str | None = None
    standby_lag: float | None = None

    @property
    def stopped(self) -> list[ChannelState]:
        """The channels that start no call now (paused, throttled or down), by name."""
        return [
            state
            for _, state in sorted(self.channel_states.items())
            if state is not None and state.mode is not Mode.ACTIVE
        ]

    @property
    def totals(self) -> dict[Status, int]:
        return {s: sum(counts[s] for counts in self.channels.values()) for s in Status}

    @property
    def oldest_pending_age(self) -> float | None:
        """Seconds since the oldest pending row was created, by the database clock."""
        if self.oldest_pending is None:
            return None
        return max((self.now - self.oldest_pending).total_seconds(), 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "channels": {
                name: {s.value: n for s, n in counts.items()}
                for name, counts in self.channels.items()
            },
            "totals": {s.value: n for s, n in self.totals.items()},
            "in_doubt": self.in_doubt,
            "exhausted": self.exhausted,
            "rejected_open": self.rejected_open,
            "needs_person": self.needs_person,
            "pending": self.pending,
            "resolved": self.resolved,
            "oldest_pending_at": iso(self.oldest_pending),
            "oldest_pending_age_seconds": self.oldest_pending_age,
            "now": iso(self.now),
            "database": self.database,
            "holdings": [holding_json(held) for held in self.holdings],
            "channel_states": {
                name: channel_state_json(state)
                for name, state in sorted(self.channel_states.items())
            },
            "channel_history": [channel_event_json(event) for event in self.channel_history],
            "durability": None
            if self.durability is None
            else {
                "line": self.durability.describe(),
                "at_risk": self.durability.risk,
            },
            "standby": self.standby,
            "standby_lag_seconds": self.standby_lag,
        }


def channel_state_json(state: ChannelState | None) -> dict[str, Any]:
    """A channel's state for scripts: its mode, and who paused it, when and why; until
    when the provider holds it (a hold that has run out is no longer given); since
    when it is down and when the next probe goes."""
    if state is None:
        return {"mode": Mode.ACTIVE.value, **dict.fromkeys(_STATE_FIELDS)}
    throttled = state.throttled_until is not None and state.throttled_until > state.now
    return {
        "mode": state.mode.value,
        "paused_at": iso(state.paused_at),
        "paused_by": state.paused_by,
        "note": state.paused_note,
        "throttled_until": iso(state.throttled_until) if throttled else None,
        "throttled_note": state.throttled_note if throttled else None,
        "down_since": iso(state.down_since),
        "down_note": state.down_note,
        "probe_at": iso(state.probe_at) if state.down_since is not None else None,
    }


_STATE_FIELDS = (
    "paused_at",
    "paused_by",
    "note",
    "throttled_until",
    "throttled_note",
    "down_since",
    "down_note",
    "probe_at",
)


def channel_event_json(event: ChannelEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": iso(event.at),
        "kind": event.kind,
        "actor": event.actor,
        "note": event.note,
    }


def holding_json(held: Holding) -> dict[str, Any]:
    first, last = held.ends_in
    return {
        "channel": held.channel,
        "holder": actor_of(held.holder),
        "rows": held.rows,
        "leases_end_in_seconds": [round(first, 3), round(last, 3)],
        "holder_gone": held.gone,
    }


def status(ledger: Ledger, channel: str | None = None) -> StatusReport:
    """Counts by channel and status, and what needs a person (optionally one channel)."""
    if channel is not None:
        check_channel(channel)
    channels: dict[str, dict[Status, int]] = {}
    for name, st, n in ledger.reader.count_by_status(channel):
        channels.setdefault(name, dict.fromkeys(Status, 0))[st] = n
    counts = ledger.reader.count_attention(channel)
    holdings = [
        dataclasses.replace(held, gone=holder_gone(held.holder))
        for held in by_actor(ledger.reader.holdings(channel))
    ]
    return StatusReport(
        channels=channels,
        database=shown_url(ledger.url),
        holdings=holdings,
        channel_states=_channel_states(ledger, channels, channel),
        channel_history=[] if channel is None else ledger.reader.channel_history(channel, 10),
        durability=ledger.store.durability(),
        standby=None if ledger.reader is ledger.store else shown_url(ledger.reader_url),
        standby_lag=ledger.replica_lag(),
        **counts,
    )


def status_counts(ledger: Ledger, *, reading: bool = True) -> list[tuple[str, Status, int]]:
    """(channel, status, rows) for every pair that has rows (`reading`: from the
    ledger's `reader`, else from the primary)."""
    return (ledger.reader if reading else ledger.store).count_by_status()


def attention_counts(
    ledger: Ledger, channel: str | None = None, *, reading: bool = True
) -> dict[str, Any]:
    """The rows a person may need to see, counted (`Store.count_attention`)."""
    return (ledger.reader if reading else ledger.store).count_attention(channel)


def channels_with_rows(ledger: Ledger) -> list[str]:
    """The channels that have rows, in order."""
    return ledger.reader.channels()


def outcomes(ledger: Ledger, hours: int = 24) -> list[tuple[datetime, str, int]]:
    """The outcomes per minute of the last `hours` (the overview's chart), brought up
    to date first (bounded work); a database this process may only read keeps the
    chart the workers fold."""
    try:
        ledger.store.fold_outcomes()
    except DenpyoError as exc:
        log.debug("cannot fold outcomes here: %s", exc)
    return ledger.reader.outcomes_per_minute(hours)


def replaced(ledger: Ledger, sub: Submission, limit: int = 20) -> list[Submission]:
    """The rows `sub` replaced, newest first (each resend `supersedes` the one before),
    at most `limit` of them."""
    chain: list[Submission] = []
    previous = sub.supersedes
    while previous is not None and len(chain) < limit:
        older = ledger.reader.get(previous)
        if older is None:
            break
        chain.append(older)
        previous = older.supersedes
    return chain


def _channel_states(
    ledger: Ledger, counted: dict[str, Any], channel: str | None
) -> dict[str, ChannelState | None]:
    """Every channel known (registered, with rows, or with a state), or only `channel`,
    with its state (None: it never had one, so it runs)."""
    states = {state.channel: state for state in ledger.reader.channel_states()}
    if channel is not None:
        return {channel: states.get(channel)}
    names = {*ledger.channels, *counted, *states}
    return {name: states.get(name) for name in sorted(names)}


def make_filter(
    ledger: Ledger, *, since: str | None = None, until: str | None = None, **fields: Any
) -> Filter:
    """A `Filter` from what a person typed; relative times count back from the
    database clock ("2h" means two hours before the database's now)."""
    if since is None and until is None:
        return Filter(**fields)
    now = ledger.now()
    return Filter(
        since=None if since is None else parse_when(since, now),
        until=None if until is None else parse_when(until, now),
        **fields,
    )


def list_submissions(ledger: Ledger, flt: Filter, *, reading: bool = False) -> list[Submission]:
    """Submissions matching `flt`, newest first, at most `flt.limit` (`reading`: from
    the ledger's `reader`, for a person to look at; else from the primary)."""
    return (ledger.reader if reading else ledger.store).list_submissions(flt)


def page(ledger: Ledger, flt: Filter, before: int | None = None) -> Page:
    """One page of `flt`'s rows, newest first, below id `before` (see `Store.list_page`)."""
    return ledger.reader.list_page(flt, before=before)


def search(ledger: Ledger, channel: str, prefix: str, after: str | None = None) -> Page:
    """Rows of `channel` whose key starts with `prefix`, in key order after `after`.
    Both are typed (or carried in a URL): text no key can hold is refused here."""
    check_channel(channel)
    prefix = prefix.strip()
    if not prefix or len(prefix) > MAX_KEY_LENGTH:
        raise InvalidInput(f"search for a key of 1 to {MAX_KEY_LENGTH} characters")
    check_search_text(prefix, "the search")
    if after is not None:
        check_search_text(after, "the key to search after")
    return ledger.reader.search_keys(channel, prefix, after=after)


def attention(ledger: Ledger, before: int | None = None, limit: int = 50) -> Page:
    """The needs-a-person queue, newest first: in doubt, exhausted, unresolved rejections."""
    return ledger.reader.attention_page(before=before, limit=limit)


@dataclass(frozen=True, slots=True)
class History:
    """A submission, its events oldest first, and the resend that replaced it, if any.

    `window_closes_at`: when the provider forgets the row's idempotency key, if its
    channel declares an `idempotency_window` (known only with the application's
    channels, `--app`) and the row was attempted: past it, nothing resends the row
    on the strength of its key.
    """

    submission: Submission
    events: list[Event]
    superseded_by: Submission | None
    now: datetime
    window_closes_at: datetime | None = None
    forgotten: Forgotten | None = None
    """Who forgot the row's payload, when and why (None: it was not)."""

    def redacted(self, redaction: Redaction) -> History:
        """The history as a person sees it by default: the row through `redaction`, and
        its events' details scrubbed of the row's hidden values."""
        payload = self.submission.payload
        return dataclasses.replace(
            self,
            submission=redaction.submission(self.submission),
            events=[redaction.event(event, payload) for event in self.events],
        )

    def to_json(self, *, full: bool = True) -> dict[str, Any]:
        return {
            "submission": submission_json(self.submission, full=full),
            "events": [event_json(e, full=full) for e in self.events],
            "superseded_by": self.superseded_by.id if self.superseded_by else None,
            "now": iso(self.now),
            "idempotency_window_closes_at": iso(self.window_closes_at),
            "forgotten": None
            if self.forgotten is None
            else {
                "at": iso(self.forgotten.at),
                "by": self.forgotten.by,
                "note": self.forgotten.note,
            },
        }


def history(ledger: Ledger, ref: str | int) -> History:
    """`find(ref)` with its events, the resend that replaced it, and when the
    provider's idempotency window for it closes."""
    sub = find(ledger, ref, reading=True)
    events = ledger.reader.events(sub.id)
    spec = ledger.channels.get(sub.channel)
    attempts = [event.at for event in events if event.kind == "attempt"]
    return History(
        submission=sub,
        events=events,
        superseded_by=ledger.reader.find_superseding(sub.id),
        now=ledger.reader.now(),
        window_closes_at=window_closes_at(
            min(attempts, default=None), spec.idempotency_window if spec else None
        ),
        forgotten=forgotten(ledger, sub, events),
    )


def forgotten(ledger: Ledger, sub: Submission, events: Sequence[Event]) -> Forgotten | None:
    """Who forgot a row's payload, when and why: its `forgotten` event, or, for a
    removed row (no history left), the forget's entry in the action log."""
    if sub.forgotten_at is None:
        return None
    for event in reversed(events):
        if event.kind == "forgotten":
            return Forgotten(event.at, person_of(event.actor), event.detail)
    record = ledger.reader.forget_action_of(sub.id)
    if record is None:
        return Forgotten(sub.forgotten_at)
    return Forgotten(sub.forgotten_at, record.person, record.note)


def check_channel(channel: str) -> None:
    """A channel name a person typed: `InvalidInput` unless it is one."""
    check_channel_name(channel)


# -- JSON for scripts -------------------------------------------------------------------------


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


PREVIEW_CHARS = 4096
"""About how much of a payload, an error or a note is shown unless everything is asked for."""


def clip_text(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text[limit:].encode())} bytes more, --full to show all)"


def clip_value(value: Any, limit: int = PREVIEW_CHARS) -> tuple[Any, bool]:
    """A JSON value cut to about `limit` characters of JSON, keeping its shape: a long
    string cut to a quarter of that (so that one does not hide its neighbours), arrays
    and objects cut after the items that fit, each cut marked. Returns the value and
    whether anything was cut."""
    if len(json.dumps(value, ensure_ascii=False, default=str)) <= limit:
        return value, False
    return _Clipper(limit).clip(value), True


class _Clipper:
    def __init__(self, limit: int) -> None:
        self.room = limit
        self.longest = limit // 4

    def clip(self, value: Any) -> Any:
        if isinstance(value, str):
            kept = clip_text(value, min(max(self.room, 0), self.longest))
            self.room -= min(len(value), self.longest) + 2
            return kept
        if isinstance(value, list):
            items: list[Any] = []
            for n, item in enumerate(value):
                if self.room <= 0:
                    items.append(f"… ({len(value) - n} more items, --full to show all)")
                    break
                items.append(self.clip(item))
            return items
        if isinstance(value, dict):
            fields: dict[str, Any] = {}
            for n, (name, item) in enumerate(value.items()):
                if self.room <= 0:
                    fields["…"] = f"{len(value) - n} more fields, --full to show all"
                    break
                self.room -= len(name) + 4
                fields[name] = self.clip(item)
            return fields
        self.room -= len(json.dumps(value, default=str))
        return value


def submission_json(sub: Submission, *, full: bool = True) -> dict[str, Any]:
    """A submission as plain JSON values (times in ISO 8601, UTC). Unless `full`, a long
    payload is cut (`payload_truncated` says so) and so are a long error and note."""
    payload, truncated = (sub.payload, False) if full else clip_value(sub.payload)
    return {
        "id": sub.id,
        "channel": sub.channel,
        "key": sub.key,
        "idempotency_key": sub.idempotency_key,
        "payload": payload,
        "payload_truncated": truncated,
        "status": sub.status.value,
        "attempts": sub.attempts,
        "next_attempt_at": iso(sub.next_attempt_at),
        "locked_by": sub.locked_by,
        "locked_until": iso(sub.locked_until),
        "remote_id": sub.remote_id,
        "last_error": _text(sub.last_error, full),
        "error_kind": sub.error_kind.value if sub.error_kind else None,
        "ordering_key": sub.ordering_key,
        "created_at": iso(sub.created_at),
        "updated_at": iso(sub.updated_at),
        "synced_at": iso(sub.synced_at),
        "resolution": _text(sub.resolution, full),
        "supersedes": sub.supersedes,
        "in_doubt": sub.in_doubt,
        "in_flight": sub.in_flight,
        "removed_at": iso(sub.removed_at),
        "archived_to": sub.archived_to,
        "superseded_by_id": sub.superseded_by,
        "forgotten_at": iso(sub.forgotten_at),
    }


def event_json(event: Event, *, full: bool = True) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": iso(event.at),
        "kind": event.kind,
        "from_status": event.from_status.value if event.from_status else None,
        "to_status": event.to_status.value if event.to_status else None,
        "attempt": event.attempt,
        "actor": event.actor,
        "detail": _text(event.detail, full),
        "duration_ms": event.duration_ms,
    }


def _text(text: str | None, full: bool) -> str | None:
    return text if full or text is None else clip_text(text)
