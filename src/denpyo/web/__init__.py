"""The dashboard for the people on call: `create_app(ledger, token=...)` is an ASGI
app (Starlette, Jinja2, htmx; no front-end build) to serve with `denpyo
dashboard` or mount inside your own Starlette or FastAPI app."""

from denpyo.errors import ConfigurationError

try:
    from denpyo.web.app import create_app
    from denpyo.web.auth import Access
    from denpyo.web.present import DEFAULT_REDACT, REDACTED
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ConfigurationError(
        f"the dashboard needs its extra ({exc.name} is missing): pip install 'denpyo[dashboard]'"
    ) from exc

__all__ = ["DEFAULT_REDACT", "REDACTED", "Access", "create_app"]
