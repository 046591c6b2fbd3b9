"""Opening a store from a database URL: its scheme names the database (store/dialects.py)."""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

from denpyo.errors import InvalidDatabaseURL
from denpyo.store.base import NewSubmission, Store
from denpyo.store.dialects import BY_SCHEME, DATABASES, DIALECTS, Dialect

__all__ = ["NewSubmission", "Store", "dialect_of", "masked", "open_store", "shown_url"]


def dialect_of(url: str) -> str:
    """The dialect a URL names, or InvalidDatabaseURL with the reason."""
    return _dialect(url).name


def _shown_text(url: object) -> object:
    """What a message may quote of a value given as a URL: its passwords hidden."""
    return _without_password(url) if isinstance(url, str) else url


def _dialect(url: str) -> Dialect:
    """The database a URL names (store/dialects.py), or InvalidDatabaseURL."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidDatabaseURL(
            f"not a database URL: {_shown_text(url)!r} (expected sqlite:///path.db, "
            "postgresql://user@host/db or mysql://user@host/db)"
        )
    scheme = url.split("://", 1)[0].lower()
    dialect = BY_SCHEME.get(scheme)
    if dialect is None:
        schemes = ", ".join(sorted(BY_SCHEME))
        raise InvalidDatabaseURL(
            f"unsupported database {scheme!r} in {_without_password(url)!r}; use one of: {schemes}"
        )
    profile = dict(parse_qsl(url.partition("?")[2])).get(PROFILE_OPTION)
    if profile is not None:
        variants = [
            known
            for known in DIALECTS.values()
            if known.parent == dialect.name and known.profile == profile
        ]
        if not variants:
            raise InvalidDatabaseURL(
                f"{_without_password(url)!r}: no {PROFILE_OPTION} {profile!r} for {dialect.title}"
            )
        return variants[0]
    return dialect


PROFILE_OPTION = "denpyo_profile"
"""The URL option that picks a variant of a database's store by its `profile`:
`postgresql://…?denpyo_profile=distributed` (the store strips it before connecting)."""


def shown_url(url: str) -> str:
    """The URL for a header or a message: no password, a SQLite path made absolute."""
    if "://" not in url:
        return _without_password(url)
    dialect = _dialect(url)
    if dialect.embedded:
        return f"{dialect.name}:///{os.path.abspath(sqlite_path(url))}"
    return _without_password(url)


_SECRET = r"[A-Za-z_]*pass(?:word|wd)?"
"""A setting that holds a password: password, passwd, sslpassword (libpq, PyMySQL)."""
_QUERY_SECRET = re.compile(rf"([?&]{_SECRET}=)([^&#]*)", re.IGNORECASE)
"""One in a URL's query string: `?password=...`, `&sslpassword=...`."""
_KV_SECRET = re.compile(rf"(?<![\w.])({_SECRET}\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)", re.IGNORECASE)
"""One in a libpq key/value string: `password=abc`, `password = 'a b\\'c'`."""


def _without_password(url: str) -> str:
    """The URL with `***` for every password it holds, whatever its scheme or form:
    the user's (`user:pw@host`, each host of several), a query string's
    (`?password=`, `passwd`, `sslpassword`), a libpq key/value string's."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _KV_SECRET.sub(r"\1***", url)
    authority, query_mark, query = rest.partition("?")
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{host}"
    return f"{scheme}://{authority}" + _QUERY_SECRET.sub(r"\1***", query_mark + query)


def _passwords(url: str) -> set[str]:
    """Every password `url` holds, as written and as decoded."""
    found: set[str] = set()
    _, sep, rest = url.partition("://")
    if sep:
        authority, _, query = rest.partition("?")
        userinfo, at, _ = authority.rpartition("@")
        if at:
            found.add(userinfo.partition(":")[2])
        found.update(match[2] for match in _QUERY_SECRET.finditer("?" + query))
        found |= {unquote(value) for value in found} | {unquote_plus(value) for value in found}
    else:
        for match in _KV_SECRET.finditer(url):
            value = match[2]
            found.add(value)
            if value.startswith("'"):
                inner = value[1:].removesuffix("'")
                found |= {inner, re.sub(r"\\(.)", r"\1", inner)}
    return {value for value in found if value}


def masked(text: str, url: str) -> str:
    """`text` (a driver's message, say) with the URL's passwords hidden, as written
    and as decoded: a driver that cannot read a URL may quote any part of it."""
    for form in sorted(_passwords(url), key=len, reverse=True):
        text = text.replace(form, "***")
    return text


def sqlite_path(url: str) -> str:
    """`sqlite:///app.db` is app.db relative to the working directory; `sqlite:////abs`."""
    rest = url.split("://", 1)[1]
    if not rest.startswith("/") or len(rest) < 2:
        raise InvalidDatabaseURL(
            f"malformed SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = unquote(rest[1:].split("?", 1)[0])
    if path in ("", ":memory:"):
        raise InvalidDatabaseURL(
            f"{url!r}: denpyo needs a database file that outlives the process, not :memory:"
        )
    return path


def _check_hosts(netloc: str, dialect: Dialect, shown: str) -> None:
    """Each host's port is a number. PostgreSQL takes several hosts, comma-separated
    (`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`): libpq
    tries them in turn, which is how a client follows a failover to a standby."""
    hosts = netloc.rpartition("@")[2].split(",")
    if len(hosts) > 1 and not dialect.capabilities.several_hosts:
        several = [
            known.title
            for known in DATABASES.values()
            if known.capabilities.several_hosts and known.parent is None
        ]
        raise InvalidDatabaseURL(f"{shown!r}: several hosts are for {', '.join(several)} only")
    for host in hosts:
        try:
            urlsplit(f"//{host}").port  # noqa: B018 - raises on a malformed port
        except ValueError as exc:
            raise InvalidDatabaseURL(f"malformed port in {shown!r}") from exc


def open_store(url: str) -> Store:
    """Open (lazily connect) the store a URL names."""
    dialect = _dialect(url)
    if not dialect.embedded:
        shown = shown_url(url)
        try:
            parts = urlsplit(url)  # raises on a bracket left open ([::1)
        except ValueError as exc:
            reason = masked(str(exc), url)
            raise InvalidDatabaseURL(f"malformed URL {shown!r}: {reason}") from exc
        _check_hosts(parts.netloc, dialect, shown)
        if not parts.path.strip("/"):
            raise InvalidDatabaseURL(f"{shown!r} names no database (…/dbname)")
    return dialect.store_class().from_url(url)
