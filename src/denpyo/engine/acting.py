"""What every action of a person's starts from: who acts (`operator_actor`), why
(`check_note`), on which row (`find`), and who carries a long one out, a batch at a
time (`new_holder`, `BATCH`, `LEASE`). Below both the ledger's own verbs (pause,
resume, forget) and the operator module's, so that neither imports the other."""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from typing import TYPE_CHECKING

from denpyo.domain.limits import MAX_ID, check_id, check_search_text
from denpyo.domain.people import clean_name
from denpyo.domain.submission import Submission
from denpyo.errors import InvalidInput, SubmissionNotFound
from denpyo.store.base import Store

if TYPE_CHECKING:
    from denpyo.engine.ledger import Ledger

BATCH = 500
"""Rows per batch (one transaction each)."""
LEASE = 60.0
"""Seconds a holder holds its action between batches: a holder that died lets
another carry the action on after this long."""

MAX_NOTE_LENGTH = 2000


def check_note(note: str | None, what: str = "this action") -> str:
    """A person's note: required, trimmed, at most MAX_NOTE_LENGTH characters."""
    text = (note or "").strip()
    if not text:
        raise InvalidInput(f"a note (--note) is required for {what}: say why, for the next person")
    if len(text) > MAX_NOTE_LENGTH:
        raise InvalidInput(f"the note is {len(text)} characters; the limit is {MAX_NOTE_LENGTH}")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise InvalidInput("the note is not valid Unicode text (a lone surrogate)") from None
    return text


def operator_actor(by: str | None = None) -> str:
    """`operator:<by>`, or `operator:<login name>` when `by` is not given; the name
    cleaned as the dashboard cleans the names it is given (no control character
    reaches the history, a terminal or a CSV)."""
    name = clean_name(by)
    if not name:
        try:
            name = clean_name(getpass.getuser())
        except (KeyError, OSError):  # no login name in some containers
            name = ""
    return f"operator:{name or 'unknown'}"


def new_holder() -> str:
    """Who carries an action out: this host and process, and a nonce."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def find(ledger: Ledger, ref: str | int, *, reading: bool = False) -> Submission:
    """A submission by id (``123`` or ``#123``) or by ``CHANNEL:KEY``.

    Channels and keys may both contain ``:``; each split is tried, leftmost first.
    From the primary, for an action to act on (`reading`: from the ledger's
    `reader`, a standby, for a person to look at).
    """
    store = ledger.reader if reading else ledger.store
    text = check_search_text(str(ref).strip(), "the submission to find")
    digits = text[1:] if text.startswith("#") else text
    if digits.isdigit():
        number = int(digits) if len(digits) <= len(str(MAX_ID)) else 0
        found = store.get(number) if check_id(number) else None
        if found is None:
            raise SubmissionNotFound(f"no submission with id {digits}")
        return found
    if ":" not in text:
        raise InvalidInput(
            f"{text!r} is neither an id (123) nor CHANNEL:KEY (invoice-email:order:42)"
            f"{_key_elsewhere(store, text)}"
        )
    start = 0
    while (at := text.find(":", start)) != -1:
        channel, key = text[:at], text[at + 1 :]
        if channel and key:
            found = store.get_by_key(channel, key)
            if found is not None:
                return found
        start = at + 1
    channel, _, key = text.partition(":")
    raise SubmissionNotFound(
        f"no submission {text!r}: a row is found by CHANNEL:KEY (read here as channel "
        f"{channel!r}, key {key!r}) or by its id{_key_elsewhere(store, text)}"
    )


def _key_elsewhere(store: Store, key: str) -> str:
    """What a person who typed a key without its channel meant: the rows of that key
    in each channel, else the channels there are."""
    channels = store.channels()
    meant = [f"{name}:{key}" for name in channels if store.get_by_key(name, key)]
    if meant:
        return f"; did you mean {' or '.join(meant[:3])}?"
    return f"; channels with rows: {', '.join(channels[:10]) or 'none'}"
