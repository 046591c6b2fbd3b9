"""Archive targets: which URLs are accepted, and how they appear in messages.

A message names its target, and a target may carry secrets (a password in a URL,
a secret key in a query parameter): every message shows it through `redact`.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, unquote, urlsplit

from denpyo.errors import InvalidInput

S3_PARAMETERS = ("endpoint_override", "region", "scheme")
"""Query parameters an `s3://` URL may carry (pyarrow reads them)."""

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_USERINFO = re.compile(r"(?<=//).*@")
_SECRET_VALUE = re.compile(r"(?i)([?&][^=&#]*(?:secret|password|token|key)[^=&#]*=)[^&#]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HINT = "give a folder, file:///absolute/path or s3://bucket/prefix"


def parse_target(url: str) -> tuple[str, bool]:
    """The absolute folder path, or the S3 URL for pyarrow, and whether it is a folder.
    InvalidInput for any other scheme or a malformed URL."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(f"the archive target is empty: {_HINT}")
    if _CONTROL.search(url):
        raise InvalidInput(f"the archive target {shown(url)} has a control character")
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidInput(f"archive URL {shown(url)} is malformed: {_HINT}") from None
    if not parts.scheme:
        return os.path.abspath(url), True
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise InvalidInput(f"archive URL {shown(url)} is malformed: use file:///absolute/path")
        return os.path.abspath(unquote(parts.path) or "/"), True
    if parts.scheme != "s3":
        raise InvalidInput(f"archive URL {shown(url)} has an unknown scheme: {_HINT}")
    if "@" in parts.netloc:
        raise InvalidInput(
            f"archive URL {shown(url)} carries credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or an AWS profile) instead"
        )
    if not _BUCKET.match(parts.netloc) or parts.fragment:
        raise InvalidInput(f"archive URL {shown(url)} is malformed: use s3://bucket/prefix")
    for name, _ in query:
        if name not in S3_PARAMETERS:
            raise InvalidInput(
                f"archive URL {shown(url)} has an unknown parameter {name!r} "
                f"(known: {', '.join(S3_PARAMETERS)})"
            )
    return url, False


def shown(url: str) -> str:
    """`url`, quoted, as a message may show it (`redact`)."""
    return repr(redact(url))


def redact(text: str) -> str:
    """`text` without what may be a secret: everything between `//` and the last `@`
    (a user name and password, even one holding a `/`), the value of a query
    parameter named like a secret, and control characters (a message is one line)."""
    text = _USERINFO.sub("***@", text)
    text = _SECRET_VALUE.sub(r"\1***", text)
    return _CONTROL.sub("?", text)


def reason(exc: BaseException) -> str:
    """The first line of an error's text, for a one-line message."""
    lines = str(exc).strip().splitlines()
    line = redact(lines[0].strip()) if lines else type(exc).__name__
    return line if len(line) <= 300 else line[:299] + "…"
