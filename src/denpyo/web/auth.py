"""Who may look and who may act: the token, the session cookie, the host app's own
authentication, and the CSRF and origin checks that guard every POST.

- `Authorization: Bearer TOKEN` lets a script (or Prometheus) in; it carries no
  cookie, so a browser cannot be tricked into sending it, and its POSTs need no
  CSRF token.
- `POST /login` with the token sets a session cookie: HttpOnly, SameSite=Strict,
  signed with a key derived from the token (a new token signs every session out),
  holding the person's name (for the history) and its expiry.
- `auth=` lets the host app decide instead: a callable that returns an `Access`
  (who, and whether they may act) or None (refused).
- Every POST a browser sends must come from this origin (`Origin`, else `Referer`,
  and `Sec-Fetch-Site`) and carry `csrf_token` equal to the CSRF cookie (a random
  value, HttpOnly, SameSite=Strict): a page of another site can neither read it nor
  make the browser send it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import logging
import secrets
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

log = logging.getLogger("denpyo.web")

SESSION_COOKIE = "denpyo_session"
CSRF_COOKIE = "denpyo_csrf"
SESSION_SECONDS = 12 * 3600
MAX_NAME = 100


@dataclass(frozen=True, slots=True)
class Access:
    """Who is looking (`name`, kept in the history of what they do) and whether they
    may act (retry, abandon, resend, mark synced) or only read."""

    name: str
    can_act: bool

    @classmethod
    def admin(cls, name: str) -> Access:
        """A person who may act on rows; `name` goes into the history of each action."""
        return cls(name, True)

    @classmethod
    def read_only(cls, name: str) -> Access:
        """A person who may look, and whose actions are refused."""
        return cls(name, False)


AuthHook = Callable[[Request], "Access | Awaitable[Access | None] | None"]
"""The host app's authentication: given the request, an `Access`, or None to refuse."""


class Gate:
    """Decides who a request comes from, and whether its POST may change anything."""

    def __init__(self, token: str | None, auth: AuthHook | None, read_only: bool) -> None:
        self.token = token
        self.auth = auth
        self.read_only = read_only
        secret = (token or secrets.token_hex(32)).encode()
        self.key = hashlib.sha256(b"denpyo-dashboard-session\0" + secret).digest()

    # -- who ---------------------------------------------------------------------------

    async def identify(self, request: Request) -> Access | None:
        access = self._by_bearer(request) or self._by_session(request)
        if access is None and self.auth is not None:
            try:
                found = self.auth(request)
                access = await found if inspect.isawaitable(found) else found
            except Exception:
                log.exception("the dashboard's auth hook failed; the request is refused")
                access = None
        if access is not None and self.read_only:
            access = Access.read_only(access.name)
        return access

    def bearer(self, request: Request) -> bool:
        """The request carries the token itself (a script), not a browser session."""
        return self._by_bearer(request) is not None

    def _by_bearer(self, request: Request) -> Access | None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is None or scheme.lower() != "bearer":
            return None
        if not hmac.compare_digest(value.strip().encode(), self.token.encode()):
            return None
        return Access.admin(clean_name(request.headers.get("x-denpyo-by")) or "token")

    def _by_session(self, request: Request) -> Access | None:
        if self.token is None:
            return None
        cookie = request.cookies.get(SESSION_COOKIE, "")
        body, _, signature = cookie.partition(".")
        # Bytes, not text: compare_digest refuses text that is not ASCII, and a cookie
        # may hold any byte.
        if not body or not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body.encode()))
            name, expires = str(data["n"]), float(data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        return Access.admin(name) if expires > time.time() else None

    # -- signing in ----------------------------------------------------------------------

    def check_token(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def session(self, name: str) -> str:
        data = {"n": name, "e": time.time() + SESSION_SECONDS}
        body = base64.urlsafe_b64encode(json.dumps(data).encode()).decode()
        return f"{body}.{self._sign(body)}"

    def _sign(self, body: str) -> str:
        return hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()

    # -- POSTs ---------------------------------------------------------------------------

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


def clean_name(value: str | None) -> str:
    """A person's name for the history: trimmed, printable, at most MAX_NAME characters."""
    text = "".join(
        ch for ch in (value or "").strip() if not unicodedata.category(ch).startswith("C")
    )
    return text[:MAX_NAME]
