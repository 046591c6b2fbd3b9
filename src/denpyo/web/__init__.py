"""The dashboard for the people on call: `create_app(ledger, token=...)` (or
`users=`, a users file of people each with their own token and role) is an ASGI
app (Starlette, Jinja2, htmx; no front-end build) to serve with `denpyo
dashboard` or mount inside your own Starlette or FastAPI app."""

from denpyo.domain.people import Role
from denpyo.domain.redaction import DEFAULT_REDACT, REDACTED
from denpyo.extras import missing

try:
    from denpyo.web.app import create_app
    from denpyo.web.auth import Access
except ImportError as exc:  # the extra is not installed
    raise missing("dashboard", "denpyo.web", exc) from exc

__all__ = ["DEFAULT_REDACT", "REDACTED", "Access", "Role", "create_app"]
