"""Who may look and who may act: the people and their roles, the ways they sign in,
their sessions, the throttle on wrong credentials, and the CSRF and origin checks
that guard every POST.

Ways in, tried in this order:

- `Authorization: Bearer TOKEN`: a script (or Prometheus), with the dashboard's
  token or a person's token of the users file. It carries no cookie, so a browser
  cannot be tricked into sending it, and its POSTs need no CSRF token. A Bearer
  header that is wrong is answered 401, never with the sign-in page.
- A trusted proxy's header (`trusted_header`), believed only from the addresses
  of `trusted_proxies`: it names the person, the users file (else `proxy_role`)
  gives the role.
- The session cookie that `POST /login` sets: a random session id and its
  signature (HttpOnly, SameSite=Strict); the session itself (who, how they signed
  in, their role, its times) stays in the server's memory, and signing out ends it.
- `auth=`: the host app decides: a callable that returns an `Access` or None.

A wrong token, by the form or by Bearer, is logged and puts its source in a
back-off that grows with each (`Throttle`): until it ends, that source's
credentials are answered at once with 429 and when to come back, never held.
A browser that signed in here before is its own source (a signed device cookie).
A read-only server makes everyone a viewer.
Every POST a browser sends must come from this origin (`Origin`, else `Referer`,
and `Sec-Fetch-Site`) and carry `csrf_token` equal to the CSRF cookie; the `Host`
that origin is compared with is one the dashboard is served as (`known_host`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import ipaddress
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from starlette.requests import Request

from denpyo.domain.people import MAX_NAME, Role, clean_name, same_name
from denpyo.engine.people import Directory, Person
from denpyo.errors import ConfigurationError

log = logging.getLogger("denpyo.web")

SESSION_COOKIE = "denpyo_session"
CSRF_COOKIE = "denpyo_csrf"
DEVICE_COOKIE = "denpyo_device"
DEVICE_SECONDS = 30 * 86400
"""A browser that signed in here is known this long (its own back-off, not its address's)."""
SESSION_SECONDS = 12 * 3600
"""A session ends this long after its sign-in, however busy."""
IDLE_SECONDS = 2 * 3600
"""A session ends after this long without a request."""
MAX_SESSIONS = 10_000
MIN_TOKEN = 16
MIN_DISTINCT = 8
MIN_SURPRISE = 8
COMMON_WORDS = (
    "password",
    "passwort",
    "passw0rd",
    "secret",
    "admin",
    "letmein",
    "qwerty",
    "azerty",
    "welcome",
    "changeme",
    "iloveyou",
    "dashboard",
    "denpyo",
    "token",
    "monkey",
    "dragon",
)
"""Words a guesser tries first: each counts as one character in a token."""
MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(24))"'
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Access:
    """Who is looking (`name`, kept in the history of what they do) and their role
    on this dashboard: a `viewer` reads, an `operator` also acts on rows and
    channels, an `approver` also decides other people's requests, an `admin` may
    do everything."""

    name: str
    role: Role
    typed: bool = False
    """The name was typed by the holder of the shared token, not proven: such a person
    is never the second person of a two-person rule."""

    def __post_init__(self) -> None:
        if not isinstance(self.role, Role):
            raise TypeError(f"Access's role is a denpyo Role, not {self.role!r}")

    @property
    def can_act(self) -> bool:
        """Retry, abandon, resend, mark synced, pause and resume, bulk actions."""
        return self.role.may_act

    @property
    def can_approve(self) -> bool:
        """Approve or reject another person's request: an approver who signed in as
        themselves (not with the shared token, whose holder may type any name)."""
        return self.role.may_approve and not self.typed

    @property
    def can_manage(self) -> bool:
        """Pause, resume or cancel another person's bulk action."""
        return self.role.may_manage

    @property
    def can_see_full(self) -> bool:
        """See a row's payload unredacted (`?full=1`), each time logged."""
        return self.role.may_see_full

    def at_most(self, ceiling: Role) -> Access:
        """The same person with their role lowered to `ceiling` (a read-only server)."""
        role = self.role.at_most(ceiling)
        return self if role is self.role else Access(self.name, role, self.typed)

    @classmethod
    def admin(cls, name: str) -> Access:
        """A person who may do everything; `name` goes into the history of each action."""
        return cls(name, Role.ADMIN)

    @classmethod
    def approver(cls, name: str) -> Access:
        """A person who may act, and decide other people's requests."""
        return cls(name, Role.APPROVER)

    @classmethod
    def operator(cls, name: str) -> Access:
        """A person who may act on rows and channels."""
        return cls(name, Role.OPERATOR)

    @classmethod
    def read_only(cls, name: str) -> Access:
        """A viewer: a person who may look, and whose actions are refused."""
        return cls(name, Role.VIEWER)


AuthHook = Callable[[Request], "Access | Awaitable[Access | None] | None"]
"""The host app's authentication: given the request, an `Access`, or None to refuse."""


def strong_token(token: str) -> str:
    """The dashboard's token, trimmed, if it is hard enough to guess: at least
    MIN_TOKEN characters, MIN_DISTINCT of them different, and MIN_SURPRISE of them
    not guessed from what comes before (`surprise`: no run such as `12345678` or
    `abcdefgh`, no word such as `password`, no part said twice); else a
    ConfigurationError that says how to make one. With the shared token one
    guess signs in as an admin: it is held to what a made-up token looks like."""
    text = token.strip()
    reason = None
    if len(text) < MIN_TOKEN:
        reason = f"{len(text)} characters (without spaces around), at least {MIN_TOKEN} needed"
    elif len(set(text)) < MIN_DISTINCT:
        reason = f"{len(set(text))} different characters, at least {MIN_DISTINCT} needed"
    elif surprise(text) < MIN_SURPRISE:
        reason = (
            "it is made of runs, repeats or common words "
            f"({surprise(text)} characters not guessed from the others, at least "
            f"{MIN_SURPRISE} needed)"
        )
    if reason is not None:
        raise ConfigurationError(
            f"the dashboard's token is too easy to guess ({reason}); make one with: {MAKE_TOKEN}"
        )
    return text


def surprise(text: str) -> int:
    """How many characters of `text` a guesser would not foresee: a common word
    (COMMON_WORDS, any case) counts as one (said again, as none); a character one
    step from the one before it (`1`→`2`, `b`→`a`, `x`→`x`) as none, and so does
    one that ends three characters seen together earlier (a part said twice)."""
    lowered = text.lower()
    for word in COMMON_WORDS:
        lowered = lowered.replace(word, "\x00", 1).replace(word, "")
    count, seen = 0, set()
    for i, ch in enumerate(lowered):
        trigram = lowered[max(0, i - 2) : i + 1]
        step = i > 0 and abs(ord(ch) - ord(lowered[i - 1])) <= 1 and ch != "\x00"
        if not step and not (len(trigram) == 3 and trigram in seen):
            count += 1
        seen.add(trigram)
    return count


def parse_proxies(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """The trusted proxies' networks (`10.0.0.0/8`, `127.0.0.1`, `::1`)."""
    found = []
    for cidr in cidrs:
        try:
            found.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            raise ConfigurationError(
                f"trusted proxy {cidr!r} is no address or network: {exc}"
            ) from None
    return tuple(found)


def _host_name(host: str) -> str:
    """A Host header's name, without its port and brackets, in lower case."""
    text = host.strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.rpartition(":")[0] if text.count(":") == 1 else text


def _address(host: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address((host or "").strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


# -- wrong credentials ------------------------------------------------------------------


class Throttle:
    """Wrong credentials from one source put it in a back-off: none after the first,
    `first` seconds after the second, twice as long after each next one, up to
    `most`. No request is held: a credential the source sends before its back-off
    ends is not checked, and is answered at once (429, with when to come back:
    `wait`). A success does not end the back-off (another client behind the same
    address may be the one guessing); `quiet` seconds without a failure do.
    Checks from one source take turns (`turn`), held only while a credential is
    checked, so that guesses sent in parallel are checked one after the other. At
    most `sources` sources are remembered (the longest quiet forgotten first)."""

    def __init__(
        self,
        *,
        first: float = 1.0,
        most: float = 30.0,
        quiet: float = 15 * 60,
        sources: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first, self.most, self.quiet, self.sources = first, most, quiet, sources
        self.clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # (in a row, last)
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}  # (lock, requests holding it)

    @contextlib.asynccontextmanager
    async def turn(self, source: str) -> AsyncIterator[None]:
        """One check at a time from `source`; the lock is dropped when nobody waits."""
        lock, waiting = self._turns.get(source) or (asyncio.Lock(), 0)
        self._turns[source] = (lock, waiting + 1)
        try:
            async with lock:
                yield
        finally:
            lock, waiting = self._turns[source]
            if waiting <= 1:
                del self._turns[source]
            else:
                self._turns[source] = (lock, waiting - 1)

    def in_a_row(self, source: str) -> int:
        """How many wrong credentials `source` sent since its last quiet spell."""
        self._forget(self.clock())
        return self._failures.get(source, (0, 0.0))[0]

    def delay(self, in_a_row: int) -> float:
        """The back-off after this many wrong credentials in a row: none after the
        first (a person who mistyped types it again at once), then `first`, doubling."""
        if in_a_row <= 1:
            return 0.0
        return float(min(self.first * 2 ** (in_a_row - 2), self.most))

    def wait(self, source: str) -> float:
        """Seconds before a credential from `source` is checked again (0: now)."""
        now = self.clock()
        self._forget(now)
        count, last = self._failures.get(source, (0, now))
        return max(last + self.delay(count) - now, 0.0) if count else 0.0

    def failed(self, source: str, way: str) -> float:
        """Count a wrong credential from `source` and log it; returns its back-off."""
        now = self.clock()
        self._forget(now)
        count = self._failures.pop(source, (0, now))[0] + 1
        self._failures[source] = (count, now)
        while len(self._failures) > self.sources:
            self._failures.popitem(last=False)
        wait = self.delay(count)
        log.warning(
            "dashboard: a wrong token (%s) from %s, %d in a row; the next checked in %g s",
            way,
            source,
            count,
            wait,
        )
        return wait

    def _forget(self, now: float) -> None:
        while self._failures:
            source, (_, last) = next(iter(self._failures.items()))
            if now - last < self.quiet:
                break
            del self._failures[source]

    def __len__(self) -> int:
        return len(self._failures)


class NotLetIn(Exception):
    """A credential refused with a reason a person should read: the source's back-off
    (429, `retry_after` seconds), or a name the shared token may not take (403)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"retry-after": str(max(1, math.ceil(self.retry_after)))}

    @classmethod
    def throttled(cls, wait: float) -> NotLetIn:
        return cls(
            429,
            f"too many wrong tokens from your address: try again in {math.ceil(wait):g} s",
            wait,
        )


# -- sessions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signed:
    """Who a credential names: `how` they signed in (`token`: the dashboard's token;
    `users`: their own, of the users file), and their role then."""

    name: str
    how: Literal["token", "users"]
    role: Role
    person: str | None = None
    """The users-file person's id."""
    token_hash: str | None = None
    """Their token's hash then: a new token ends the sessions of the old one."""


@dataclass(slots=True)
class Session:
    """One signed-in person on this server: who, and since when they were seen."""

    signed: Signed
    created: float
    seen: float


class Sessions:
    """The signed-in people of this server, in its memory: the cookie holds a random
    id and its signature (HMAC-SHA256 with the server's session key), nothing else.
    A session ends at sign-out, `lifetime` seconds after its sign-in, or `idle`
    seconds after its last request; a restart ends them all."""

    def __init__(
        self,
        key: bytes,
        *,
        clock: Callable[[], float] = time.time,
        lifetime: float = SESSION_SECONDS,
        idle: float = IDLE_SECONDS,
        most: int = MAX_SESSIONS,
    ) -> None:
        self.key, self.clock = key, clock
        self.lifetime, self.idle, self.most = lifetime, idle, most
        self._open: dict[str, Session] = {}

    def start(self, signed: Signed) -> str:
        """A new session for `signed`; returns the cookie's value."""
        now = self.clock()
        for sid in [sid for sid, s in self._open.items() if not self._alive(s, now)]:
            del self._open[sid]
        sid = secrets.token_urlsafe(32)
        self._open[sid] = Session(signed, now, now)
        while len(self._open) > self.most:  # the oldest first
            del self._open[next(iter(self._open))]
        return f"{sid}.{self._sign(sid)}"

    def find(self, cookie: str | None) -> Session | None:
        """The live session a cookie names (and it is seen now), else None."""
        sid = self._id(cookie)
        session = self._open.get(sid) if sid else None
        if session is None or sid is None:
            return None
        now = self.clock()
        if not self._alive(session, now):
            del self._open[sid]
            return None
        session.seen = now
        return session

    def end(self, cookie: str | None) -> None:
        sid = self._id(cookie)
        if sid:
            self._open.pop(sid, None)

    def new_device(self) -> str:
        """The cookie of a browser that just signed in rightly: a random id and its
        signature, nothing else; its later sign-ins are throttled on their own."""
        device = secrets.token_urlsafe(16)
        return f"{device}.{self._sign('device:' + device)}"

    def device(self, cookie: str | None) -> str | None:
        """The id of a browser that signed in here before (its cookie signed by this
        server's key), else None."""
        device, _, signature = (cookie or "").partition(".")
        expected = self._sign("device:" + device).encode()
        if not device or not hmac.compare_digest(signature.encode(), expected):
            return None
        return device

    def _alive(self, session: Session, now: float) -> bool:
        return now < session.created + self.lifetime and now < session.seen + self.idle

    def _id(self, cookie: str | None) -> str | None:
        sid, _, signature = (cookie or "").partition(".")
        # Bytes, not text: compare_digest refuses text that is not ASCII, and a cookie
        # may hold any byte.
        if not sid or not hmac.compare_digest(signature.encode(), self._sign(sid).encode()):
            return None
        return sid

    def _sign(self, sid: str) -> str:
        return hmac.new(self.key, sid.encode(), hashlib.sha256).hexdigest()

    def __len__(self) -> int:
        return len(self._open)


# -- the gate ---------------------------------------------------------------------------


class Gate:
    """Decides who a request comes from, and whether its POST may change anything."""

    def __init__(
        self,
        *,
        token: str | None = None,
        auth: AuthHook | None = None,
        read_only: bool = False,
        users: Directory | None = None,
        trusted_header: str | None = None,
        trusted_proxies: Sequence[Network] = (),
        proxy_role: Role = Role.VIEWER,
        session_key: bytes | None = None,
        throttle: Throttle | None = None,
        allowed_hosts: Sequence[str] | None = None,
    ) -> None:
        self.token = token
        self._token_digest = hashlib.sha256(token.encode()).digest() if token else None
        self.auth = auth
        self.read_only = read_only
        self.ceiling = Role.VIEWER if read_only else Role.ADMIN
        self.users = users
        self.trusted_header = trusted_header.lower() if trusted_header else None
        self.trusted_proxies = tuple(trusted_proxies)
        self.proxy_role = proxy_role
        self.sessions = Sessions(session_key or secrets.token_bytes(32))
        self.throttle = throttle or Throttle()
        self.allowed_hosts = (
            None if allowed_hosts is None else frozenset(_host_name(h) for h in allowed_hosts)
        )
        self._warned: set[str] = set()

    @property
    def has_form(self) -> bool:
        """People sign in here (and scripts send Bearer): there is a token or a users file."""
        return self.token is not None or self.users is not None

    # -- who ---------------------------------------------------------------------------

    async def identify(self, request: Request) -> Access | None:
        """Who the request comes from, with their role on this server; None: nobody
        (a wrong Bearer token answers only after the throttle's wait)."""
        if self.bearer(request):
            access = await self._by_bearer(request)
        else:
            access = self._by_proxy(request) or self._by_session(request)
            if access is None and self.auth is not None:
                try:
                    found = self.auth(request)
                    access = await found if inspect.isawaitable(found) else found
                except Exception:
                    log.exception("the dashboard's auth hook failed; the request is refused")
                    access = None
        return access.at_most(self.ceiling) if access is not None else None

    def bearer(self, request: Request) -> bool:
        """The request carries a Bearer token (a script, not a browser session) on a
        dashboard that takes them: it is that token, right or wrong, that decides."""
        scheme, _, _ = request.headers.get("authorization", "").partition(" ")
        return self.has_form and scheme.lower() == "bearer"

    async def _by_bearer(self, request: Request) -> Access | None:
        given = request.headers.get("authorization", "").partition(" ")[2]
        signed = await self.check(request, "bearer", given)
        if signed is None:
            return None
        if signed.how == "token":  # a script names itself, for the history
            name = clean_name(request.headers.get("x-denpyo-by")) or "token"
            if self.listed(name):
                raise NotLetIn(403, f"{name} is a person of the users file: send their own token")
            return Access(name, signed.role, typed=True)
        return Access(signed.name, signed.role)

    def _by_proxy(self, request: Request) -> Access | None:
        if self.trusted_header is None:
            return None
        value = request.headers.get(self.trusted_header)
        if value is None:
            return None
        peer = request.client.host if request.client else ""
        if not self.from_proxy(peer):
            if peer not in self._warned:
                if len(self._warned) >= 10_000:
                    self._warned.clear()
                self._warned.add(peer)
                log.warning(
                    "dashboard: %s from %s, which is no trusted proxy: the header is ignored",
                    self.trusted_header,
                    peer or "an unknown address",
                )
            return None
        name = clean_name(value)
        if not name:
            return None
        person = self.users.by_name(name) if self.users is not None else None
        if person is not None:
            return Access(person.name, person.role)
        return Access(name, self.proxy_role)

    def _by_session(self, request: Request) -> Access | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.find(cookie)
        if session is None:
            return None
        signed = session.signed
        if signed.how == "token" and self.listed(signed.name):
            self.sessions.end(cookie)  # the name became a person's of the users file
            return None
        if signed.how != "users":
            return Access(signed.name, signed.role, typed=signed.how == "token")
        # A person of the users file: their role now; removed, or given a new token,
        # and the session is over.
        person = self.users.by_id(signed.person) if self.users is not None else None
        if person is None or person.token_hash != signed.token_hash:
            self.sessions.end(cookie)
            return None
        return Access(person.name, person.role)

    def from_proxy(self, host: str | None) -> bool:
        ip = _address(host)
        return ip is not None and any(ip in network for network in self.trusted_proxies)

    def throttled_as(self, request: Request) -> str:
        """Whose wrong credentials a check counts, and whose back-off it waits: a
        browser that signed in here rightly before (its device cookie) its own, so
        that a guesser behind the same address does not lock its people out;
        anyone else, their address (`source`)."""
        device = self.sessions.device(request.cookies.get(DEVICE_COOKIE))
        return f"browser {device}" if device else self.source(request)

    def source(self, request: Request) -> str:
        """Where a request comes from, for the throttle: its peer's address, or behind a
        trusted proxy the address that proxy saw (the last of `X-Forwarded-For`). An
        IPv6 address counts as its /64: one host usually has the whole of one."""
        host = request.client.host if request.client else ""
        if self.from_proxy(host):
            forwarded = request.headers.get("x-forwarded-for", "").rsplit(",", 1)[-1].strip()
            host = forwarded or host
        ip = _address(host)
        if ip is None:
            return host[:MAX_NAME] or "unknown"
        if isinstance(ip, ipaddress.IPv6Address):
            return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
        return str(ip)

    # -- credentials ---------------------------------------------------------------------

    async def check(self, request: Request, way: str, token: str, name: str = "") -> Signed | None:
        """Who `token` (and, for the form, the `name` typed) signs in, or None: a wrong
        one is counted and logged, and puts its source in a back-off. During the
        back-off a credential is not checked and NotLetIn (429) says when to come
        back; only a token of the users file that signed in a moment ago
        (`Directory.remembered`: proven, and no guess can hit one) is let in at once.
        The shared token never takes the name of a person of the users file."""
        source = self.throttled_as(request)
        given = token.strip()
        async with self.throttle.turn(source):
            wait = self.throttle.wait(source)
            if wait > 0:
                signed = self._remembered(given, name)
                if signed is None:
                    raise NotLetIn.throttled(wait)
            else:
                signed = await self._match(given, name)
                if signed is None:
                    self.throttle.failed(source, way)
                    return None
        if signed.how == "token" and self.listed(name):
            raise NotLetIn(
                403,
                f"{name} is a person of the users file: sign in with your own token, "
                "not the shared one",
            )
        return signed

    def listed(self, name: str) -> bool:
        """`name` is a person of the users file."""
        return bool(name) and self.users is not None and self.users.by_name(name) is not None

    def _remembered(self, token: str, name: str) -> Signed | None:
        person = self.users.remembered(token) if self.users is not None and token else None
        return self._person(person, name) if person is not None else None

    async def _match(self, token: str, name: str) -> Signed | None:
        if not token:
            return None
        digest = hashlib.sha256(token.encode()).digest()
        if self._token_digest is not None and hmac.compare_digest(digest, self._token_digest):
            return Signed(name, "token", Role.ADMIN.at_most(self.ceiling))
        if self.users is not None:
            person = self.users.remembered(token) or await asyncio.to_thread(
                self.users.verify, token
            )
            if person is not None:
                return self._person(person, name)
        return None

    def _person(self, person: Person, name: str) -> Signed | None:
        """A person of the users file signed in, if the name typed (if any) is theirs."""
        if name and not same_name(person.name, name):
            return None
        role = person.role.at_most(self.ceiling)
        return Signed(person.name, "users", role, person.id, person.token_hash)

    # -- POSTs ---------------------------------------------------------------------------

    def known_host(self, host: str) -> bool:
        """A `Host` this dashboard answers: any without `allowed_hosts` (the host app
        checks it), else an IP address (no name to rebind), `localhost`, or a name
        of the list (`*`: any), whatever its port."""
        if self.allowed_hosts is None or "*" in self.allowed_hosts:
            return True
        name = _host_name(host)
        return bool(name) and (
            name in self.allowed_hosts or name == "localhost" or _address(name) is not None
        )

    def same_origin(self, request: Request) -> bool:
        """A browser names the page a POST comes from; it must be this site."""
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return False
        source = request.headers.get("origin") or request.headers.get("referer")
        if not source or source == "null":
            return source is None  # no header at all: not a browser's cross-site form
        parts = urlsplit(source)
        return f"{parts.scheme}://{parts.netloc}" == f"{request.url.scheme}://{request.url.netloc}"

    def csrf_ok(self, request: Request, given: str | None) -> bool:
        expected = request.cookies.get(CSRF_COOKIE, "")
        return bool(expected and given) and hmac.compare_digest(
            str(given).encode(), expected.encode()
        )


def new_csrf() -> str:
    return secrets.token_urlsafe(32)
