"""What every provider's route shares: the refusal of a request that is not the
provider's, and the pieces of its JSON read without trusting their types."""

from __future__ import annotations

import json
from typing import Any


class Refused(Exception):
    """A request that is not a provider's signed event (unsigned, badly signed, stale,
    unparseable): answered 400, nothing written."""


def json_body(body: bytes) -> Any:
    """The request's JSON, or `Refused`."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(f"the body is not JSON: {exc}") from exc


def text(value: Any) -> str | None:
    """A field the event should hold as text: None when it holds anything else."""
    return value if isinstance(value, str) and value else None


def field(data: Any, *path: str) -> Any:
    """`data[path[0]][path[1]]…`, None where a step is missing or not an object."""
    for name in path:
        if not isinstance(data, dict):
            return None
        data = data.get(name)
    return data
