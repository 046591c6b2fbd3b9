"""The users file: the people who may sign in to the dashboard, each with a role and
the argon2 hash of a token of their own (never the token itself).

A token reads `dpy_<id>_<secret>`: the id names its person, so a check costs one
hash, however many people the file lists. The file is JSON, written whole to a
temporary file and renamed over the old one (a reader never sees half a file),
readable by its owner only (0600):

    {"version": 1, "people": [{"id": "3f9c2a1b7d4e", "name": "alice",
      "role": "operator", "added": "2026-05-04T09:12:40Z", "token_hash": "$argon2id$…"}]}

An entry whose `token_hash` is null signs in through the proxy only (its role is
the file's, its sign-in the proxy's). The CLI's `denpyo users` changes the file
with the functions below; a running dashboard reads it through `Directory`, which
reads it again when it changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from denpyo.domain.people import MAX_NAME, Role, parse_role, same_name
from denpyo.errors import ConfigurationError, InvalidInput
from denpyo.extras import missing

try:
    from argon2 import PasswordHasher
    from argon2.exceptions import InvalidHashError, VerificationError
except ImportError as exc:  # the dashboard extra is not installed
    raise missing("dashboard", "the dashboard's users file", exc) from exc

log = logging.getLogger("denpyo.web")

VERSION = 1
PREFIX = "dpy"
CACHE_SECONDS = 300.0
"""How long a token that matched is believed without hashing it again."""
CACHE_SIZE = 10_000
HASHER = PasswordHasher()
PathLike = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Person:
    """One person of the users file."""

    id: str
    name: str
    role: Role
    added: str
    """When they were added: ISO 8601, UTC."""
    token_hash: str | None
    """The argon2 hash of their token; None: they sign in through the proxy only."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role.value,
            "added": self.added,
            "token_hash": self.token_hash,
        }

    def listed(self) -> dict[str, Any]:
        """What `denpyo users list` shows: never the hash."""
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role.value,
            "added": self.added,
            "token": self.token_hash is not None,
        }


def check_name(name: str) -> str:
    """A person's name as the file keeps it: trimmed, not empty, printable, at most
    MAX_NAME characters. Refused rather than cleaned: the name is what they type."""
    text = name.strip()
    if not text:
        raise InvalidInput("a person's name cannot be empty")
    if any(unicodedata.category(ch).startswith("C") for ch in text):
        raise InvalidInput(f"{text!r}: a name cannot hold control characters")
    if len(text) > MAX_NAME:
        raise InvalidInput(f"a name is at most {MAX_NAME} characters, not {len(text)}")
    return text


def new_token(person_id: str) -> str:
    return f"{PREFIX}_{person_id}_{secrets.token_urlsafe(32)}"


def token_id(token: str) -> str | None:
    """The person id a token names, or None when it is not a users-file token."""
    prefix, _, rest = token.partition("_")
    person_id, _, secret = rest.partition("_")
    if prefix != PREFIX or not person_id or not secret:
        return None
    return person_id


# -- the file --------------------------------------------------------------------------


def read_people(path: PathLike) -> list[Person]:
    """The people of the file at `path`; a file that cannot be read, or is not a
    users file, is a ConfigurationError that says which and why."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(
            f"no users file at {os.fspath(path)}: `denpyo users add NAME --role ROLE` makes it"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the users file {os.fspath(path)}: {exc}") from None
    try:
        data = json.loads(text)
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, not {VERSION}")
        people = [
            Person(
                id=str(item["id"]),
                name=check_name(str(item["name"])),
                role=parse_role(str(item["role"])),
                added=str(item["added"]),
                token_hash=None if item.get("token_hash") is None else str(item["token_hash"]),
            )
            for item in data["people"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError, InvalidInput) as exc:
        raise ConfigurationError(
            f"{os.fspath(path)} is not a denpyo users file: {type(exc).__name__}: {exc}"
        ) from None
    for what, keys in (
        ("id", [p.id for p in people]),
        ("name", [p.name.casefold() for p in people]),
    ):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ConfigurationError(
                f"{os.fspath(path)} lists the {what} {twice[0]!r} twice: each person once"
            )
    return people


def write_people(path: PathLike, people: Iterable[Person]) -> None:
    """Write the whole file atomically (a temporary file in the same folder, renamed
    over it), readable and writable by its owner only."""
    target = Path(path)
    body = json.dumps(
        {"version": VERSION, "people": [p.to_json() for p in people]}, indent=2, ensure_ascii=False
    )
    folder = target.parent
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(body + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    try:  # the rename itself, on disk
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _find(people: list[Person], name: str, path: PathLike) -> int:
    for i, person in enumerate(people):
        if same_name(person.name, name):
            return i
    raise InvalidInput(f"no one named {name.strip()!r} in {os.fspath(path)}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add(
    path: PathLike, name: str, role: str | Role, *, token: bool = True
) -> tuple[Person, str | None]:
    """Add a person (the file is made when missing); returns them and their token,
    which exists nowhere else (None with `token=False`: the proxy signs them in)."""
    name, chosen = check_name(name), parse_role(role)
    people = read_people(path) if Path(path).exists() else []
    if any(same_name(p.name, name) for p in people):
        raise InvalidInput(f"{name!r} is already in {os.fspath(path)}")
    taken = {p.id for p in people}
    person_id = secrets.token_hex(6)
    while person_id in taken:
        person_id = secrets.token_hex(6)
    given = new_token(person_id) if token else None
    person = Person(person_id, name, chosen, _now(), HASHER.hash(given) if given else None)
    write_people(path, [*people, person])
    return person, given


def remove(path: PathLike, name: str) -> Person:
    """Remove a person: their token and their sessions stop working at their next request."""
    people = read_people(path)
    gone = people.pop(_find(people, name, path))
    write_people(path, people)
    return gone


def set_role(path: PathLike, name: str, role: str | Role) -> tuple[Person, Role]:
    """Change a person's role (their open sessions follow); returns them and their old role."""
    chosen = parse_role(role)
    people = read_people(path)
    i = _find(people, name, path)
    was = people[i].role
    people[i] = replace(people[i], role=chosen)
    write_people(path, people)
    return people[i], was


def reset(path: PathLike, name: str) -> tuple[Person, str]:
    """A new token for a person: the old one, and the sessions signed in with it, stop."""
    people = read_people(path)
    i = _find(people, name, path)
    given = new_token(people[i].id)
    people[i] = replace(people[i], token_hash=HASHER.hash(given))
    write_people(path, people)
    return people[i], given


# -- a running dashboard's view ---------------------------------------------------------


class Directory:
    """The users file as a running dashboard sees it: read again whenever it changes
    (its modification time, size or inode), so that a person removed or given
    another role is so at their next request; a file that cannot be read then lets
    nobody in until it is fixed. A token that matched is remembered (by its SHA-256,
    CACHE_SECONDS) so that a script's requests do not pay argon2 each."""

    def __init__(self, path: PathLike, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._index(read_people(path))  # at start, a bad file is an error
        self._matched: OrderedDict[bytes, tuple[str, str, float]] = OrderedDict()
        self._matched_lock = threading.Lock()
        self._decoy: str | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _index(self, found: list[Person]) -> None:
        self._people = found
        self._by_id = {p.id: p for p in found}
        self._by_name = {p.name.casefold(): p for p in found}

    def _fresh(self) -> None:
        """Read the file again if it changed since (one stat per call)."""
        stamp = self._stat()
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp == self._stamp:
                return
            try:
                self._index(read_people(self.path))
            except ConfigurationError as exc:
                log.error("dashboard: %s; nobody of the users file may sign in", exc)
                self._index([])
            self._stamp = stamp

    def people(self) -> list[Person]:
        """The people now."""
        self._fresh()
        return self._people

    def by_id(self, person_id: str | None) -> Person | None:
        self._fresh()
        return self._by_id.get(person_id or "")

    def by_name(self, name: str) -> Person | None:
        self._fresh()
        return self._by_name.get(name.strip().casefold())

    def remembered(self, token: str) -> Person | None:
        """The person of a token that matched a short while ago (and still is theirs):
        no hashing, so it may run on the event loop."""
        digest = hashlib.sha256(token.encode()).digest()
        with self._matched_lock:
            seen = self._matched.get(digest)
        if seen is None:
            return None
        person = self.by_id(seen[0])
        if seen[2] > self.clock() and person is not None and person.token_hash == seen[1]:
            return person
        with self._matched_lock:
            self._matched.pop(digest, None)
        return None

    def verify(self, token: str) -> Person | None:
        """The person whose token this is, or None. Blocking (argon2 takes tens of
        milliseconds): call it off the event loop."""
        known = self.remembered(token)
        if known is not None:
            return known
        person = self.by_id(token_id(token))
        stored = person.token_hash if person is not None else None
        try:
            # A token naming nobody is hashed too: the answer takes as long.
            HASHER.verify(stored or self.decoy(), token)
        except (VerificationError, InvalidHashError):
            return None
        if person is None or stored is None:
            return None
        digest = hashlib.sha256(token.encode()).digest()
        with self._matched_lock:
            self._matched[digest] = (person.id, stored, self.clock() + CACHE_SECONDS)
            while len(self._matched) > CACHE_SIZE:
                self._matched.popitem(last=False)
        return person

    def decoy(self) -> str:
        if self._decoy is None:
            self._decoy = HASHER.hash(secrets.token_urlsafe(32))
        return self._decoy
