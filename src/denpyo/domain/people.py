"""Who may do what: the roles of the people on call. Pure, no I/O.

A role travels with the person (their sign-in), not with the server: a `viewer`
reads; an `operator` also acts on rows and channels (retry, abandon, resend,
mark synced, pause, resume, bulk actions); an `approver` also decides the
requests a two-person rule made of another person's action; an `admin` may do
everything, including stopping another person's bulk action. A read-only server
makes every person a viewer on it.
"""

from __future__ import annotations

import unicodedata
from enum import StrEnum

from denpyo.errors import InvalidInput

MAX_NAME = 100


class Role(StrEnum):
    """A person's role, each one allowing what the one before it allows and more."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    @property
    def may_act(self) -> bool:
        """Retry, abandon, resend, mark synced, pause and resume, bulk actions."""
        return self.rank >= Role.OPERATOR.rank

    @property
    def may_approve(self) -> bool:
        """Approve or reject another person's request (never one's own)."""
        return self.rank >= Role.APPROVER.rank

    @property
    def may_manage(self) -> bool:
        """Pause, resume or cancel another person's bulk action."""
        return self is Role.ADMIN

    @property
    def may_see_full(self) -> bool:
        """See a row's payload unredacted (each time logged with the person's name)."""
        return self is Role.ADMIN

    def at_most(self, ceiling: Role) -> Role:
        """This role, lowered to `ceiling` (a read-only server: `Role.VIEWER`)."""
        return self if self.rank <= ceiling.rank else ceiling


def parse_role(text: str) -> Role:
    """A role a person typed: one of the four names, any case."""
    try:
        return Role(text.strip().lower())
    except ValueError:
        names = ", ".join(role.value for role in Role)
        raise InvalidInput(f"no role named {text!r}: choose {names}") from None


def clean_name(value: str | None) -> str:
    """A person's name for the history, however it came (a form, a header, `--by`):
    trimmed, without control characters, at most MAX_NAME characters."""
    text = "".join(
        ch for ch in (value or "").strip() if not unicodedata.category(ch).startswith("C")
    )
    return text[:MAX_NAME].strip()


def same_name(a: str, b: str) -> bool:
    """Names are one person whatever their case: `Alice` is `alice`. The one
    comparison of people: sign-in, the second person of a two-person rule, whose
    action it is."""
    return a.strip().casefold() == b.strip().casefold()
