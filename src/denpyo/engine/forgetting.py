"""A person forgets a customer (`denpyo forget`, `Ledger.forget`): the payloads of a
call's rows, or of every row whose payload names the person, are erased, live and
archived; the slip stays (domain/forgetting.py says what goes and what stays).

Everything is found and checked before anything is written: the rows of the key
with its chain of resends (a resend is the same call), or the rows whose payload
has the value at the field (`--where`), in the table (a SQL match, and the
encrypted payloads read and matched one by one) and in every archive the ledger
wrote to; an open row refuses the whole forget. Then one entry of the action log
(kind `forget`: who, when, why, the rows; never the searched value) holds the
rows, and they are forgotten a batch at a time, each batch one transaction: the
live rows first, then the archive files are rewritten, and only then the removed
rows' memories are marked forgotten, so that a forget cut short is finished by
running it again (by its key: a `--where` no longer finds an archived copy whose
payload is gone).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from denpyo.domain.actions import (
    ActionKind,
    ActionRecord,
    ActionState,
    RowOutcome,
    Scope,
)
from denpyo.domain.forgetting import Scrubber, Where, is_open, open_refusal
from denpyo.domain.limits import check_channel_name
from denpyo.domain.submission import Submission
from denpyo.engine.acting import BATCH, LEASE, check_note, find, new_holder, operator_actor
from denpyo.errors import InvalidInput, SubmissionNotFound
from denpyo.store.actions import NewAction

if TYPE_CHECKING:
    from denpyo.archive import Archive, ArchivedRow
    from denpyo.engine.ledger import Ledger

CHAIN = 100
"""The longest chain of resends followed from a row (a chain is short)."""


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """What a forget found (a dry run) or did: the live rows (as they are after it),
    the ids of the archived ones (their memories, and copies found in archives), the
    pruned ones (a memory only), the action log's entry, and the rows it skipped with
    why (changed meanwhile)."""

    dry_run: bool
    target: str
    live: list[Submission] = field(default_factory=list)
    archived: list[int] = field(default_factory=list)
    removed: list[Submission] = field(default_factory=list)
    action: ActionRecord | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)
    files: int = 0
    """Archive files rewritten."""
    unsearched: bool = False
    """A search by a payload's field (`--where`) passed over pruned rows in its scope,
    not forgotten: their payloads are gone, so it cannot tell whether they matched."""

    @property
    def counts(self) -> dict[str, int]:
        return {
            "live": len(self.live),
            "archived": len(self.archived),
            "removed": len(self.removed),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "target": self.target,
            "counts": self.counts,
            "live": [sub.id for sub in self.live],
            "archived": self.archived,
            "removed": [sub.id for sub in self.removed],
            "action": None if self.action is None else self.action.id,
            "skipped": [{"id": sid, "reason": why} for sid, why in self.skipped],
            "files_rewritten": self.files,
            "pruned_unsearched": self.unsearched,
        }


@dataclass
class _Found:
    """The rows a forget acts on, by where they are, and the payloads they quote."""

    live: dict[int, Submission] = field(default_factory=dict)
    kept: dict[int, Submission] = field(default_factory=dict)
    copies: dict[str, list[ArchivedRow]] = field(default_factory=dict)
    unsearched: bool = False
    """Pruned rows in the search's scope, not forgotten (`ForgetResult.unsearched`)."""

    def add(self, sub: Submission) -> None:
        (self.kept if sub.removed_at is not None else self.live)[sub.id] = sub


def forget(
    ledger: Ledger,
    ref: str | int | None = None,
    *,
    where: str | None = None,
    channel: str | None = None,
    note: str,
    by: str | None = None,
    dry_run: bool = False,
    batch: int = BATCH,
    lease: float = LEASE,
) -> ForgetResult:
    """Forget the payloads of a call (`ref`: CHANNEL:KEY or an id, with its resends)
    or of a person (`where`: FIELD=VALUE, in `channel` or every channel), live and
    archived (module docstring). `InvalidInput`, nothing written, for a missing note,
    both or neither of `ref` and `where`, a malformed `where`, nothing to forget, or
    an open row. With `dry_run`, what it would forget, nothing written. `lease`:
    seconds its entry in the action log is held from one batch to the next; after
    that long, a forget cut short (its process killed) is ended by the next forget
    of its rows, which carries them on."""

    text = check_note(note, "forgetting")
    if not lease > 0:
        raise InvalidInput("a forget needs a lease above 0 seconds")
    if (ref is None or ref == "") == (where is None):
        raise InvalidInput(
            "name the call to forget (CHANNEL:KEY) or the person (--where FIELD=VALUE): one"
        )
    if where is not None:
        searched = Where.parse(where)
        if channel is not None:
            check_channel_name(channel)
        found = _by_where(ledger, searched, channel)
        target = f"--where {searched.field}=…" + (f" --channel {channel}" if channel else "")
        return _forget(ledger, found, target, text, by, dry_run, batch, lease, searched)
    if channel is not None:
        raise InvalidInput("--channel goes with --where: CHANNEL:KEY names its channel")
    assert ref is not None
    found, target = _by_ref(ledger, ref)
    return _forget(ledger, found, target, text, by, dry_run, batch, lease, None)


def _by_ref(ledger: Ledger, ref: str | int) -> tuple[_Found, str]:
    try:
        sub = find(ledger, ref)
    except SubmissionNotFound as exc:
        raise InvalidInput(f"nothing to forget: {exc}") from None
    found = _Found()
    for row in _chain(ledger, sub):
        found.add(row)
    _read_copies(ledger, found)
    return found, f"{sub.channel}:{sub.key}"


def _read_copies(ledger: Ledger, found: _Found) -> None:
    """The archived copies of the archived rows found (not forgotten yet) that no search
    read already: their files are rewritten, and their payloads scrubbed from the texts."""
    read = {copy.id for copies in found.copies.values() for copy in copies}
    rows = [sub for sub in found.kept.values() if sub.archived_to and not sub.forgotten_at]
    rows = [sub for sub in rows if sub.id not in read]
    for url in sorted({sub.archived_to for sub in rows if sub.archived_to}):
        copies = _archive(url).rows_of([sub for sub in rows if sub.archived_to == url])
        found.copies.setdefault(url, []).extend(_opened(ledger, copies))


def _opened(ledger: Ledger, copies: Iterable[ArchivedRow]) -> list[ArchivedRow]:
    """Archived copies with their payloads opened with the ledger's keys, where the
    archive keeps them encrypted as the table does."""
    open_value = ledger.store.sealing.open_value
    return [
        replace(copy, payload=open_value(copy.payload, copy.channel, copy.key)) for copy in copies
    ]


def _chain(ledger: Ledger, sub: Submission) -> list[Submission]:
    """The row, the rows it replaced (`supersedes`), and its resends: one call."""
    rows = {sub.id: sub}
    older = sub
    for _ in range(CHAIN):
        if older.supersedes is None or (before := ledger.store.get(older.supersedes)) is None:
            break
        rows[before.id] = older = before
    newer = sub
    for _ in range(CHAIN):
        if (after := ledger.store.find_superseding(newer.id)) is None or after.id in rows:
            break
        rows[after.id] = newer = after
    return [rows[sid] for sid in sorted(rows)]


def _by_where(ledger: Ledger, where: Where, channel: str | None) -> _Found:
    """The live rows whose payload has the value (clear ones matched by SQL, sealed
    ones read and matched here), the archived copies that have it, and the chains of
    resends of them all."""
    store = ledger.store
    matched: dict[int, Submission] = {}
    pages = (
        lambda after: store.forget_matches(where, channel=channel, after=after, limit=BATCH),
        lambda after: store.forget_sealed(channel=channel, after=after, limit=BATCH),
    )
    for page in pages:
        for rows in _pages(page):
            matched.update((sub.id, sub) for sub in rows if where.matches(sub.payload))
    found = _Found(unsearched=store.forget_pruned(channel))
    sieve = json.dumps(where.value, ensure_ascii=False)[1:-1]
    for url in store.forget_archives(channel):
        archived = _opened(ledger, _archive(url).rows(channel, containing=sieve))
        copies = [copy for copy in archived if where.matches(copy.payload)]
        if copies:
            found.copies[url] = copies
        for copy in copies:
            kept = store.get(copy.id)
            if kept is not None and kept.id not in matched:
                matched[kept.id] = kept
    for sub in list(matched.values()):
        for row in _chain(ledger, sub):
            found.add(row)
    _read_copies(ledger, found)
    return found


def _pages(page: Callable[[int], list[Submission]]) -> Iterator[list[Submission]]:
    """Every page of a search by id, `page(after)` being the one after id `after`."""
    after = 0
    while rows := page(after):
        yield rows
        if len(rows) < BATCH:
            return
        after = rows[-1].id


def _forget(
    ledger: Ledger,
    found: _Found,
    target: str,
    note: str,
    by: str | None,
    dry_run: bool,
    batch: int,
    lease: float,
    where: Where | None,
) -> ForgetResult:
    """Check what was found, then forget it (module docstring)."""
    store = ledger.store
    live = [sub for sub in found.live.values() if sub.forgotten_at is None]
    kept = [sub for sub in found.kept.values() if sub.forgotten_at is None]
    copied = {copy.id for copies in found.copies.values() for copy in copies}
    archived_ids = sorted({sub.id for sub in kept if sub.archived_to} | copied)
    pruned = [sub for sub in kept if not sub.archived_to]
    if not live and not archived_ids and not pruned:
        raise InvalidInput(f"nothing to forget: {_nothing(found, target, where)}")
    now = store.now()
    still_open = [open_refusal(sub, now) for sub in live if is_open(sub, now)]
    if still_open:
        raise InvalidInput("nothing was forgotten: " + "; ".join(still_open))
    result = ForgetResult(dry_run, target, live, archived_ids, pruned, unsearched=found.unsearched)
    if dry_run:
        return result
    payloads: list[Any] = [sub.payload for sub in live]
    payloads += [copy.payload for copies in found.copies.values() for copy in copies]
    scrub = Scrubber(payloads, () if where is None else (where.value,))
    text = scrub(note)
    actor = operator_actor(by)
    params: dict[str, Any] = {"rows": result.counts}
    if where is not None:
        params["where"] = where.field  # never the value: it is what is being erased
    holder = new_holder()
    ids = [sub.id for sub in live] + [sub.id for sub in kept]
    carried = _end_cut_short(ledger, set(ids), holder, lease)
    if carried:
        params["carries_on"] = carried
    entry = NewAction(ActionKind.FORGET, Scope.ROWS, target, actor, text, params=params)
    record = store.add_action(entry, ids=ids, holder=holder, lease=lease)
    skipped: list[tuple[int, str]] = []
    files = 0
    try:
        for part in _batches([sub.id for sub in live], batch):
            done = store.forget_rows(
                part,
                scrub=scrub,
                actor=actor,
                note=text,
                action_id=record.id,
                holder=holder,
                lease=lease,
            )
            skipped += _skips(record, done)
        for url, copies in sorted(found.copies.items()):
            files += _archive(url).forget(copies)
        for part in _batches([sub.id for sub in kept], batch):
            done = store.forget_kept(
                part, scrub=scrub, action_id=record.id, holder=holder, lease=lease
            )
            skipped += _skips(record, done)
    except BaseException:
        store.move_action(record.id, ActionState.CANCELLED, from_=(ActionState.IN_PROGRESS,))
        raise
    finally:
        store.let_go_action(record.id, holder=holder)
    store.move_action(record.id, ActionState.DONE, from_=(ActionState.IN_PROGRESS,))
    now_live = [row for row in map(store.get, (sub.id for sub in live)) if row is not None]
    after = store.action(record.id)
    return replace(result, dry_run=False, live=now_live, action=after, skipped=skipped, files=files)


def _end_cut_short(ledger: Ledger, ids: set[int], holder: str, lease: float) -> list[int]:
    """The earlier forgets of these rows that were cut short (their process died: no
    holder has renewed their lease), ended as `cancelled` (or `done`, if every row was
    done before it died): this forget carries their rows on. A forget still held by a
    live process is left to it. Returns the ids of the ones ended."""
    store = ledger.store
    ended: list[int] = []
    for record in store.actions(kind=ActionKind.FORGET, state=ActionState.IN_PROGRESS, limit=1000):
        pending = store.action_rows(record.id, outcome="pending", limit=record.pending + 1)
        if not {row.submission_id for row in pending} <= ids:
            continue  # another person's forget: whoever ran it runs it again
        if not store.take_action(record.id, holder=holder, lease=lease):
            continue  # its process is alive and at work
        final = ActionState.CANCELLED if pending else ActionState.DONE
        store.move_action(record.id, final, from_=(ActionState.IN_PROGRESS,))
        store.let_go_action(record.id, holder=holder)
        ended.append(record.id)
    return ended


def _skips(
    record: ActionRecord, done: list[tuple[int, RowOutcome, str | None]] | None
) -> list[tuple[int, str]]:
    if done is None:
        raise InvalidInput(f"the forget (action #{record.id}) was cancelled meanwhile")
    return [(sid, why or "skipped") for sid, outcome, why in done if outcome is RowOutcome.SKIPPED]


def _nothing(found: _Found, target: str, where: Where | None) -> str:
    """Why there is nothing to forget: forgotten already, or no row found."""
    gone = [sub for sub in (*found.live.values(), *found.kept.values()) if sub.forgotten_at]
    if gone:
        first = min(sub.forgotten_at for sub in gone if sub.forgotten_at)
        return f"{target}: its payload was forgotten already (on {first:%Y-%m-%d %H:%M} UTC)"
    if where is not None:
        pruned = " (a pruned row's payload is gone already: forget its CHANNEL:KEY to mark it)"
        return f"no payload has that value at {where.field!r}, live or archived" + (
            pruned if found.unsearched else ""
        )
    return f"{target}: no row"


def _batches(ids: Sequence[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


def _archive(url: str) -> Archive:
    """The archive a removed row went to (needs the `archive` extra)."""
    from denpyo.archive import Archive

    return Archive(url)
